"""The operator CLI for connections: add (auto-check), check, approve, update (lapses approval)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from builders.providers import CREDENTIAL, Faults, reference_provider
from mercato.accounts import service as accounts
from mercato.cli.main import main
from mercato.db.runtime import Runtime
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


def test_unknown_owner_and_unknown_connection_fail_cleanly(cli: Any) -> None:
    code, _, err = cli(
        "admin", "add-connection", "--owner", "nobody@example.com", "--name", "x",
        "--base-url", "http://127.0.0.1:9", "--credential", CREDENTIAL,
    )  # fmt: skip
    assert code == 1 and "ACCOUNT_NOT_FOUND" in err
    code, _, err = cli("admin", "check-connection", "pcon_missing", "--json")
    assert code == 1 and "PROVIDER_CONNECTION_NOT_FOUND" in err
