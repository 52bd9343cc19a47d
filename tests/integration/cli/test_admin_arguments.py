"""Every `mercato admin` command refuses bad arguments the same way (DESIGN.md §10, issue 19
item 11): exit 2, exactly one line on stderr naming the argument, no traceback, nothing written.

The commands run in-process through `mercato.cli.main.main` against both stores; the bad
numbers and the missing arguments are generated from the click command tree itself, so a new
command or option is covered without editing this file. `tests/functional/cli/` runs a few as real
processes.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from sqlalchemy import select, text

from builders.accounts import make_account
from builders.catalog import SERVICE_CODE, example_contract, make_provider, publish
from builders.hard_schemas import publish_legacy
from mercato.cli.main import build_cli, main
from mercato.db.base import Base
from mercato.db.runtime import Runtime
from mercato.db.uow import Database

EMAIL = "a@example.com"
NO_ONE = "nobody@example.com"


def _admin_commands() -> dict[str, click.Command]:
    top = build_cli()
    admin = top.get_command(click.Context(top), "admin")
    assert isinstance(admin, click.Group)
    ctx = click.Context(admin)
    commands = {name: admin.get_command(ctx, name) for name in admin.list_commands(ctx)}
    return {name: command for name, command in commands.items() if command is not None}


def _snapshot(db: Database) -> dict[str, list[str]]:
    """Every row of every table, as text: what a refused command must leave unchanged."""
    with db.read() as session:
        return {
            table.name: sorted(repr(tuple(row)) for row in session.execute(select(table)))
            for table in Base.metadata.sorted_tables
        }


class Admin:
    """Runs `mercato admin …` in this process and captures what an operator would see."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        try:
            code = main(["admin", *argv])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            # Each command builds its own engine: close its pool now. The fixture froze
            # everything older than the test, so this pass walks only what the test made.
            gc.collect()
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def admin(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Admin]:
    settings = runtime.settings
    for name in list(__import__("os").environ):
        if name.startswith("MERCATO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("MERCATO_DATA_DIR", str(settings.data_dir))
    # A full collection over the whole process (every module of the platform, the test
    # session) took ~0.1 s a command; frozen, those objects are skipped (decision 0392).
    gc.collect()
    gc.freeze()
    try:
        yield Admin(capsys)
    finally:
        gc.unfreeze()


@pytest.fixture
def world(runtime: Runtime, tmp_path: Path) -> dict[str, str]:
    """An account, an approved connection with a published listing, and a contract file."""
    make_account(runtime.db, EMAIL)
    _, connection_id = make_provider(runtime)
    publish(runtime, connection_id)
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(example_contract()))
    not_re2 = tmp_path / "not-re2.json"
    not_re2.write_text(json.dumps(example_contract(requestSchema={"pattern": "(a)\\1"})))
    not_json = tmp_path / "not-json.json"
    not_json.write_text("{ not json")
    return {
        "conn": connection_id,
        "contract": str(contract),
        "not_json": str(not_json),
        "not_re2": str(not_re2),
        "missing": str(tmp_path / "missing.json"),
        "dir": str(tmp_path),
    }


def _publish(world: dict[str, str], **changes: str) -> list[str]:
    options = {
        "--connection": world["conn"],
        "--service-code": "acme.search",
        "--display-name": "Search",
        "--version": "v1",
        "--price": "5",
        "--contract": world["contract"],
    } | changes
    return ["publish", *[part for pair in options.items() for part in pair]]


_QUOTA = ["--policy", "p", "--limit", "5", "--window-seconds", "5"]  # a later option wins
_CONNECTION = ["--name", "n", "--base-url", "https://example.com", "--credential", "c"]


def _cases(world: dict[str, str]) -> list[tuple[list[str], str]]:
    """(argv after `admin`, the argument the one error line must name)."""
    long = "x" * 3000
    return [
        (["create-account", "not-an-email"], "EMAIL"),
        (["create-account", "b@example.com", "--password", "short"], "--password"),
        (["create-api-key", NO_ONE], "EMAIL"),
        (["create-api-key", EMAIL, "--name", long], "--name"),
        (["create-api-key", EMAIL, "--spend-limit", "10"], "--period"),
        (["create-api-key", EMAIL, "--period", "day"], "--spend-limit"),
        (["create-api-key", EMAIL, "--spend-limit", "10", "--period", "hour"], "--period"),
        (["create-api-key", EMAIL, "--spend-limit", str(2**53), "--period", "day"],
         "--spend-limit"),
        (["set-key-limit", "key_unknown", "--none"], "KEY_ID"),
        (["set-key-limit", "key_unknown", "--spend-limit", "5", "--period", "week"], "KEY_ID"),
        (["set-key-limit", "key_unknown"], "--spend-limit"),
        (["set-key-limit", "key_unknown", "--none", "--spend-limit", "1", "--period", "day"],
         "--none"),
        (["revoke-api-key", "key_unknown"], "KEY_ID"),
        (["unlock", NO_ONE], "EMAIL"),
        (["grant-points", NO_ONE, "10"], "EMAIL"),
        (["grant-points", EMAIL, "10", "--memo", long], "--memo"),
        (["set-quota", NO_ONE, *_QUOTA], "EMAIL"),
        (["set-quota", EMAIL, *_QUOTA, "--policy", long], "--policy"),
        (["set-quota", EMAIL, *_QUOTA, "--window-seconds", "10" * 10], "--window-seconds"),
        (["set-quota", EMAIL, *_QUOTA, "--limit", str(2**31)], "--limit"),
        (_publish(world, **{"--contract": world["missing"]}), "--contract"),
        (_publish(world, **{"--contract": world["not_json"]}), "--contract"),
        (_publish(world, **{"--contract": world["not_re2"]}), "--contract"),
        (_publish(world, **{"--contract": world["dir"]}), "--contract"),
        (_publish(world, **{"--contract": "/dev/zero"}), "--contract"),
        (_publish(world, **{"--connection": "conn_unknown"}), "--connection"),
        (_publish(world, **{"--service-code": "Not A Code"}), "--service-code"),
        (_publish(world, **{"--version": "1.0"}), "--version"),
        (_publish(world, **{"--version": "v99999999999999999999"}), "--version"),
        (_publish(world, **{"--display-name": " "}), "--display-name"),
        (_publish(world, **{"--description": long * 4}), "--description"),
        (_publish(world, **{"--price": "0"}), "--price"),
        (_publish(world, **{"--price": str(2**63)}), "--price"),
        (_publish(world, **{"--provider-share-bps": "10001"}), "--provider-share-bps"),
        (["hold", "acme.unknown", "--reason", "r"], "SERVICE_CODE"),
        (["hold", SERVICE_CODE, "--reason", " "], "--reason"),
        (["release-hold", "hold_unknown"], "HOLD_ID"),
        (["decide-dispute", "case_unknown", "--approve", "--reason", "r"], "CASE_ID"),
        (["decide-report", "case_unknown", "--dismiss", "--reason", long], "--reason"),
        (["add-connection", "--owner", NO_ONE, *_CONNECTION], "--owner"),
        (["check-connection", "conn_unknown"], "ID"),
        (["approve-connection", "conn_unknown"], "ID"),
        (["update-connection", "conn_unknown", "--name", "n"], "ID"),
        (["update-connection", world["conn"], "--max-in-flight", "1025"], "--max-in-flight"),
        (["update-connection", world["conn"], "--max-in-flight", "0"], "--max-in-flight"),
        (["update-connection", world["conn"], "--max-in-flight", "x"], "--max-in-flight"),
        (["resolve-invocation", "inv_unknown", "--failed", "--reason", "r"], "ID"),
    ]  # fmt: skip


def _assert_refused(result: tuple[int, str, str], argument: str) -> None:
    code, out, err = result
    assert code == 2, (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and out == ""
    assert lines[0].startswith("error: ") and argument in lines[0], (argument, err)


def test_every_bad_argument_exits_2_naming_it_and_writes_nothing(
    admin: Admin, world: dict[str, str], db: Database
) -> None:
    cases = _cases(world)
    listings = {"verify-ledger", "stuck-invocations", "legacy-patterns"}
    assert {argv[0] for argv, _ in cases} | listings == set(_admin_commands()), (
        "every admin command needs its bad-argument cases here"
    )
    before = _snapshot(db)
    for argv, argument in cases:
        _assert_refused(admin(*argv), argument)
    assert _snapshot(db) == before


def _placeholder(param: click.Parameter) -> str:
    return "x@example.com" if param.metavar == "EMAIL" else "placeholder"


def test_generated_bad_numbers_and_missing_arguments(admin: Admin, db: Database) -> None:
    before = _snapshot(db)
    checked = 0
    for name, command in _admin_commands().items():
        positionals = [p for p in command.params if isinstance(p, click.Argument)]
        required = [p for p in command.params if p.required]
        if required:  # nothing given: the line names everything that is missing
            _assert_refused(admin(name), "required")
            checked += 1
        for param in command.params:
            if param.type.name in ("text", "boolean", "path"):
                continue
            option = isinstance(param, click.Option)
            lead = (
                [] if option else [_placeholder(p) for p in positionals[: positionals.index(param)]]
            )
            label = param.opts[0] if option else str(param.metavar)
            for bad in ("-1", "twelve", "9" * 30, "1e3", ""):
                argv = [label, bad] if option else [*lead, bad]
                _assert_refused(admin(name, *argv), label)
                checked += 1
    assert checked > 20
    assert _snapshot(db) == before


def test_an_argument_that_is_not_utf8_is_refused(admin: Admin) -> None:
    undecodable = b"caf\xe9@example.com".decode("utf-8", "surrogateescape")
    _assert_refused(admin("create-account", undecodable), "argument 3")


def test_a_bad_setting_is_one_line_naming_the_variable(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERCATO_LOGIN_WINDOW_SECONDS", "soon")
    code, _, err = admin("verify-ledger")
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("configuration error: MERCATO_LOGIN_WINDOW_SECONDS")
    monkeypatch.setenv("MERCATO_LOGIN_WINDOW_SECONDS", "300")
    monkeypatch.setenv("MERCATO_TRUSTED_PROXIES", "10.0.0.0/8,proxy.internal")
    code, _, err = admin("verify-ledger")
    assert code == 2 and "MERCATO_TRUSTED_PROXIES" in err and len(err.splitlines()) == 1


def test_unlock_lifts_the_throttle_and_says_so(admin: Admin, runtime: Runtime) -> None:
    from mercato.accounts import service

    make_account(runtime.db, EMAIL)
    settings = runtime.settings
    subjects = service.login_subjects(email=EMAIL, client_ip="192.0.2.1", settings=settings)
    with runtime.db.transaction() as session:
        for _ in range(settings.login_attempts_per_window):
            service.record_login_failure(
                session, subjects=subjects, settings=settings, now=runtime.clock.now()
            )
    code, out, err = admin("unlock", "A@Example.com", "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "email": EMAIL,
        "forgottenFailures": 2 * settings.login_attempts_per_window,
    }
    with runtime.db.read() as session:
        service.check_login_allowed(
            session, subjects=subjects, settings=settings, now=runtime.clock.now()
        )
        left = session.execute(text("SELECT count(*) FROM login_attempts")).scalar_one()
    assert left == settings.login_attempts_per_window  # the address's own count stays


def test_legacy_patterns_lists_the_versions_whose_patterns_re2_refuses(
    admin: Admin, runtime: Runtime
) -> None:
    """Issue 39 item 1 (DESIGN.md §7): staff see the versions published before patterns had to
    be RE2, which keep Python's engine."""
    code, out, err = admin("legacy-patterns")
    assert (code, out.strip(), err) == (0, "no version has a pattern RE2 refuses", "")
    owner, connection_id = make_provider(runtime)
    publish(runtime, connection_id)  # RE2 patterns only: not listed
    version_id = publish_legacy(
        runtime,
        connection_id,
        owner_id=owner,
        service_code="acme.legacy",
        request_schema={"properties": {"a": {"pattern": "^(?=x)"}, "b": {"pattern": "^x$"}}},
    )
    code, out, err = admin("legacy-patterns", "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "items": [
            {
                "versionId": version_id,
                "serviceCode": "acme.legacy",
                "version": "v1",
                "state": "PUBLISHED",
                "pointers": ["/requestSchema/properties/a/pattern"],
            }
        ]
    }
    code, out, _ = admin("legacy-patterns")
    assert code == 0 and "acme.legacy" in out and "/requestSchema/properties/a/pattern" in out


def test_a_key_is_made_with_a_spend_limit_and_the_limit_changed(
    admin: Admin, runtime: Runtime
) -> None:
    make_account(runtime.db, EMAIL)
    code, out, err = admin(
        "create-api-key", EMAIL, "--spend-limit", "250", "--period", "Month", "--json"
    )
    assert code == 0, err
    created = json.loads(out)
    assert created["spendLimit"] == {"points": 250, "period": "MONTH"}
    assert created["apiKey"].startswith("mercato_live_")

    limit = ["--spend-limit", "7", "--period", "total"]
    code, out, err = admin("set-key-limit", created["keyId"], *limit, "--json")
    assert code == 0, err
    changed = json.loads(out)
    assert changed["spendLimit"] == {"points": 7, "period": "TOTAL"}
    assert (changed["spentInPeriod"], changed["periodResetsAt"]) == (0, None)

    code, out, err = admin("set-key-limit", created["keyId"], "--none")
    assert code == 0, err
    assert out == f"API key {created['keyId']}: no spend limit\n"
    code, out, _ = admin("create-api-key", EMAIL, "--json")
    assert code == 0 and "spendLimit" not in json.loads(out)
