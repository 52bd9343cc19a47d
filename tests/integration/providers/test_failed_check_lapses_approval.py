"""A failed conformance run lapses approval at once (DESIGN §7, issue 19 item 4).

A real SDK provider on loopback passes, is approved and serves a call; its readiness then fails,
and a re-check (the provider's web page, the operator CLI) lapses the approval: calls get 503
`PROVIDER_NOT_APPROVED` with nothing consumed until a new run passes and staff approve again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from builders.accounts import make_account, make_api_key
from builders.catalog import publish
from builders.invocation_world import CONTRACT, SERVICE
from builders.invocations import ServerThread
from builders.pages import STAFF, Browser
from builders.provider import CountingHandler
from mercato.cli.main import main
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.provider import create_provider_app
from mercato.providers import service as providers
from mercato.settings import Settings
from mercato.web.app import create_app

OWNER = "owner@example.com"
CREDENTIAL = "sdk-credential-0123456789abcdef"


class SdkProvider:
    """An SDK provider served on 127.0.0.1 whose readiness can be switched off."""

    def __init__(self, store: Path) -> None:
        self.ready = threading.Event()
        self.ready.set()
        self.handler = CountingHandler()
        app = create_provider_app(
            self.handler, credential=CREDENTIAL, store=str(store), ready_check=self.ready.is_set
        )
        self.server = ServerThread(app)

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def sdk_provider(tmp_path: Path) -> Iterator[SdkProvider]:
    provider = SdkProvider(tmp_path / "provider" / "store.db")
    with provider.server:
        yield provider


class Platform:
    """The ASGI app with an owner and a staff browser and a caller's API key."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.client = TestClient(create_app(runtime), raise_server_exceptions=False)
        self.caller_id = make_account(runtime.db, "caller@example.com", password=None)
        with runtime.db.transaction() as session:
            ledger.grant(session, account_id=self.caller_id, amount=100, now=runtime.clock.now())
        self.api_key, _ = make_api_key(runtime.db, self.caller_id)
        make_account(runtime.db, OWNER)
        make_account(runtime.db, STAFF, is_staff=True)
        shell = SimpleNamespace(client=self.client)
        self.owner, self.staff = Browser(shell), Browser(shell)  # type: ignore[arg-type]
        self.owner.login(OWNER)
        self.staff.login(STAFF)

    def invoke(self, key: str) -> Any:
        return self.client.post(
            f"/v1/services/{SERVICE}/versions/v1:invoke",
            content=json.dumps({"n": 1}).encode(),
            headers={"Authorization": f"Bearer {self.api_key}", "Idempotency-Key": key},
        )

    def consumed(self) -> tuple[int, int, int]:
        """(available points, reserved points, accepted calls in the quota window)."""
        with self.runtime.db.read() as session:
            balances = ledger.balances(session, account_id=self.caller_id)
        accepted = self.client.get(
            "/v1/rate-limit", headers={"Authorization": f"Bearer {self.api_key}"}
        ).json()["accepted"]
        return balances.available, balances.reserved, accepted

    def approved(self, connection_id: str) -> bool:
        with self.runtime.db.read() as session:
            return providers.is_approved(session, connection_id=connection_id)

    def approve(self, connection_id: str) -> int:
        self.staff.get(f"/staff/connections/{connection_id}")
        return self.staff.post(f"/staff/connections/{connection_id}/approve").status_code


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """One quota window for the whole test: `consumed` compares the window's accepted calls
    before and after a refusal, and a minute's boundary between the two reads reset the count
    (seen once, under CI load)."""
    return settings.model_copy(update={"default_quota_window_seconds": 86_400})


@pytest.fixture
def platform(runtime: Runtime) -> Platform:
    return Platform(runtime)


def _published_connection(platform: Platform, provider: SdkProvider) -> str:
    """Submit through the page (its automatic run passes), approve as staff, publish, call once."""
    platform.owner.get("/provider")
    created = platform.owner.post(
        "/provider/connections",
        {"name": "echo", "base_url": provider.url, "credential": CREDENTIAL},
    )
    assert created.status_code == 303, created.text[:2000]
    connection_id = created.headers["location"].split("?")[0].rsplit("/", 1)[1]
    assert platform.approve(connection_id) == 303
    publish(platform.runtime, connection_id, service_code=SERVICE, price=10, contract=CONTRACT)
    assert platform.invoke("before-the-recheck").status_code == 200
    return connection_id


def _assert_refused_and_nothing_consumed(platform: Platform, provider: SdkProvider) -> None:
    before, calls = platform.consumed(), provider.handler.calls
    refused = platform.invoke("after-the-recheck")
    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "PROVIDER_NOT_APPROVED"
    assert platform.consumed() == before
    assert provider.handler.calls == calls


def test_a_failed_recheck_from_the_page_lapses_approval_until_a_pass_and_a_new_approval(
    platform: Platform, sdk_provider: SdkProvider
) -> None:
    connection_id = _published_connection(platform, sdk_provider)
    assert platform.consumed() == (90, 0, 1)

    sdk_provider.ready.clear()  # the provider's dependency is down: readiness fails
    assert platform.owner.post(f"/provider/connections/{connection_id}/check").status_code == 303
    assert not platform.approved(connection_id)
    page = platform.owner.get(f"/provider/connections/{connection_id}")
    assert '<dd id="approval"><span class="badge badge-not_approved">' in page.text
    _assert_refused_and_nothing_consumed(platform, sdk_provider)

    sdk_provider.ready.set()  # a new run passes, but nobody approved it yet
    assert platform.owner.post(f"/provider/connections/{connection_id}/check").status_code == 303
    assert not platform.approved(connection_id)
    _assert_refused_and_nothing_consumed(platform, sdk_provider)

    assert platform.approve(connection_id) == 303
    again = platform.invoke("after-the-recheck")  # the refused calls consumed no key
    assert again.status_code == 200, again.text
    assert platform.consumed() == (80, 0, 2)


def test_a_failed_check_connection_from_the_cli_lapses_approval(
    platform: Platform,
    sdk_provider: SdkProvider,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    connection_id = _published_connection(platform, sdk_provider)
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("MERCATO_DATA_DIR", str(settings.data_dir))

    sdk_provider.ready.clear()
    assert main(["admin", "check-connection", connection_id, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["passed"] is False
    assert not platform.approved(connection_id)
    _assert_refused_and_nothing_consumed(platform, sdk_provider)

    sdk_provider.ready.set()
    assert main(["admin", "check-connection", connection_id]) == 0
    assert not platform.approved(connection_id)
    assert main(["admin", "approve-connection", connection_id]) == 0
    assert platform.invoke("after-the-recheck").status_code == 200


def test_a_failed_run_of_an_older_revision_leaves_the_current_approval_alone(
    platform: Platform, sdk_provider: SdkProvider
) -> None:
    connection_id = _published_connection(platform, sdk_provider)
    with platform.runtime.db.read() as session:
        first = providers.latest_run(session, connection_id=connection_id)
    assert first is not None and first.passed and first.connection_revision == 1
    renamed = platform.owner.post(f"/provider/connections/{connection_id}", {"name": "echo-2"})
    assert renamed.status_code == 303  # revision 2, checked automatically (passes)
    assert platform.approve(connection_id) == 303

    # A run of revision 1 that was still in flight when the change landed comes back failed.
    failed = [providers.CheckVerdict(c.position, c.name, "failed", {}) for c in first.checks]
    with platform.runtime.db.transaction() as session:
        providers.record_run(
            session,
            connection_id=connection_id,
            connection_revision=1,
            started_at=first.started_at,
            finished_at=first.finished_at,
            checks=failed,
        )
    assert platform.approved(connection_id)
    assert platform.invoke("after-the-recheck").status_code == 200
