"""The operator CLI for connections: add (auto-check), check, approve, update (lapses approval)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from sqlalchemy import func, select

from builders.providers import CREDENTIAL, Faults, reference_provider
from mercato.accounts import service as accounts
from mercato.cli.main import main
from mercato.db.runtime import Runtime
from mercato.providers import service as providers
from mercato.providers.models import ProviderConnection
from mercato.settings import Settings


@pytest.fixture
def cli(
    runtime: Runtime,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("MERCATO_DATA_DIR", str(settings.data_dir))
    with runtime.db.transaction() as session:
        accounts.create_account(
            session,
            email="owner@example.com",
            password=None,
            is_staff=False,
            now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        )
    capsys.readouterr()
    outputs: list[str] = []

    def run(*argv: str) -> tuple[int, Any, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        outputs.append(captured.out + captured.err)
        out = json.loads(captured.out) if "--json" in argv and captured.out else captured.out
        return code, out, captured.err

    run.outputs = outputs  # type: ignore[attr-defined]
    return run


def test_add_check_approve_and_lapse_through_the_cli(cli: Any) -> None:
    with reference_provider(Faults(accept_unknown_fields=True)) as provider:
        code, out, _ = cli(
            "admin", "add-connection", "--owner", "owner@example.com", "--name", "demo",
            "--base-url", provider.url, "--credential", CREDENTIAL, "--json",
        )  # fmt: skip
        assert code == 0
        connection_id = out["connectionId"]
        assert out["check"]["passed"] is False
        assert [c["status"] for c in out["check"]["checks"]][6] == "failed"

        code, _, err = cli("admin", "approve-connection", connection_id)
        assert code != 0
        assert "CONFORMANCE_NOT_PASSED" in err

        code, out, _ = cli("admin", "check-connection", connection_id, "--json")
        assert code == 1
        assert out["passed"] is False
        assert [set(c) for c in out["checks"]] == [{"name", "status", "detail"}] * 9

        provider.state.faults = Faults()
        code, out, _ = cli("admin", "check-connection", connection_id, "--json")
        assert code == 0
        assert out["passed"] is True
        assert out["checks"][0]["name"] == "liveness"

        code, _, _ = cli("admin", "approve-connection", connection_id)
        assert code == 0

        with reference_provider() as moved:
            code, out, _ = cli(
                "admin", "update-connection", connection_id, "--base-url", moved.url, "--json"
            )
        assert code == 0
        assert (out["revision"], out["approved"], out["check"]["passed"]) == (2, False, True)
        # The automatic check after the change passed, so staff may approve again.
        code, _, _ = cli("admin", "approve-connection", connection_id)
        assert code == 0

    assert not any(CREDENTIAL in text for text in cli.outputs)


def test_text_mode_prints_the_check(cli: Any) -> None:
    with reference_provider(Faults(live_status=500)) as provider:
        code, out, _ = cli(
            "admin", "add-connection", "--owner", "owner@example.com", "--name", "demo",
            "--base-url", provider.url, "--credential", CREDENTIAL,
        )  # fmt: skip
    assert code == 0
    assert "created connection pcon_" in out
    assert "NOT passed" in out and "1. liveness: failed" in out


def _one_line_naming(err: str, argument: str) -> None:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"error: argument {argument}: "), err


def test_unknown_owner_and_unknown_connection_exit_2_naming_the_argument(cli: Any) -> None:
    code, _, err = cli(
        "admin", "add-connection", "--owner", "nobody@example.com", "--name", "x",
        "--base-url", "http://127.0.0.1:9", "--credential", CREDENTIAL,
    )  # fmt: skip
    assert code == 2
    _one_line_naming(err, "--owner")
    for argv in (
        ("check-connection", "pcon_missing", "--json"),
        ("approve-connection", "pcon_missing"),
        ("update-connection", "pcon_missing", "--name", "y"),
    ):
        code, _, err = cli("admin", *argv)
        assert code == 2, argv
        _one_line_naming(err, "ID")


def _add(cli: Any, *flags: str, **arguments: str) -> tuple[int, Any, str]:
    options = {"owner": "owner@example.com", "name": "demo", "credential": CREDENTIAL}
    argv = ["admin", "add-connection", *flags]
    for name, value in (options | arguments).items():
        argv += [f"--{name.replace('_', '-')}", value]
    result: tuple[int, Any, str] = cli(*argv)
    return result


def _connection(runtime: Runtime) -> tuple[str, int] | None:
    with runtime.db.read() as session:
        row = session.execute(select(ProviderConnection.base_url, ProviderConnection.revision))
        found = row.first()
    return None if found is None else (found[0], found[1])


@pytest.mark.parametrize(
    "base_url",
    ["http://localhost:8080", "http://api.localhost", "http://127.1:9", "http://2130706433",
     "http://10.0.0.1", "http://169.254.169.254", "http://[::1]:80"],
)  # fmt: skip
def test_a_base_url_naming_a_non_public_address_exits_2_outside_dev(
    cli: Any, runtime: Runtime, monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    monkeypatch.setenv("MERCATO_ALLOW_PRIVATE_PROVIDER_ADDRESSES", "false")
    code, out, err = _add(cli, base_url=base_url)
    assert (code, out) == (2, "")
    _one_line_naming(err, "--base-url")
    assert "non-public address" in err
    assert _connection(runtime) is None

    with runtime.db.transaction() as session:  # a connection stored while it was allowed
        connection_id = providers.create_connection(
            session,
            owner_id=accounts.get_account_by_email(session, email="owner@example.com").id,
            name="demo",
            base_url="https://provider.example.com",
            credential=CREDENTIAL,
            settings=runtime.settings,
            now=dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
        ).id
    code, out, err = cli("admin", "update-connection", connection_id, "--base-url", base_url)
    assert (code, out) == (2, "")
    _one_line_naming(err, "--base-url")
    assert _connection(runtime) == ("https://provider.example.com", 1)


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"base_url": "not a url"}, "--base-url"),
        ({"base_url": "ftp://provider.example.com"}, "--base-url"),
        ({"base_url": "https://user:pw@provider.example.com"}, "--base-url"),
        ({"base_url": "https://provider.example.com/?q=1"}, "--base-url"),
        ({"base_url": "http://provider.example.com:99999"}, "--base-url"),
        ({"base_url": "https://provider.example.com", "name": " "}, "--name"),
        ({"base_url": "https://provider.example.com", "credential": "has space"}, "--credential"),
    ],
)
def test_malformed_arguments_exit_2_naming_them_and_store_nothing(
    cli: Any, runtime: Runtime, arguments: dict[str, str], argument: str
) -> None:
    code, out, err = _add(cli, **arguments)
    assert (code, out) == (2, "")
    _one_line_naming(err, argument)
    assert "has space" not in err  # a credential is never echoed
    with runtime.db.read() as session:
        assert session.scalar(select(func.count()).select_from(ProviderConnection)) == 0


def test_a_taken_name_exits_2_naming_it(cli: Any) -> None:
    with reference_provider() as provider:
        assert _add(cli, base_url=provider.url)[0] == 0
        code, _, err = _add(cli, base_url=provider.url)
    assert code == 2
    _one_line_naming(err, "--name")
