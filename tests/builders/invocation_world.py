"""A ready world for invocation tests: a scripted provider, a published version, a caller."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import func, select

from builders.accounts import PASSWORD_HASH_MEMORY_KIB, make_account, make_api_key
from builders.catalog import approve_connection, example_contract, publish
from builders.event_loops import run_on_fresh_loop
from builders.invocations import CREDENTIAL, ScriptedProvider
from mercato.catalog import service as catalog
from mercato.core.clock import FakeClock, utcnow
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.invocations import service as invocations_service
from mercato.invocations.models import Invocation
from mercato.invocations.schemas import Address
from mercato.ledger import service as ledger
from mercato.ledger.models import Reservation
from mercato.providers import service as providers
from mercato.providers.models import ProviderConnection
from mercato.quotas import service as quotas
from mercato.settings import Settings
from mercato.web.app import create_app
from mercato.worker import loops

SERVICE = "acme.echo"
PRICE = 10
CONTRACT = example_contract(
    requestMaxBytes=256,
    requestSchema={
        "type": "object",
        "properties": {"n": {"type": "integer"}, "tags": {"type": "array"}},
        "additionalProperties": True,
    },
    resultSchema={"type": "object", "required": ["echo"]},
    artifactContract=None,
)


def answer(response: Response) -> tuple[int, bytes | dict[str, Any], dict[str, str]]:
    """What a caller is answered, to compare two answers: status, body (a problem without its
    request's own id) and headers (without the request id, the date and the length)."""
    body: bytes | dict[str, Any] = response.content
    if response.headers["content-type"].startswith("application/problem+json"):
        body = {k: v for k, v in response.json().items() if k not in ("instance", "requestId")}
    headers = {
        name: value
        for name, value in response.headers.items()
        if name not in ("x-request-id", "content-length", "date")
    }
    return response.status_code, body, headers


@dataclass
class World:
    runtime: Runtime
    clock: FakeClock
    client: TestClient
    provider: ScriptedProvider
    provider_client: ProviderClient
    caller_id: str
    provider_id: str
    api_key: str

    def invoke(
        self,
        body: Any = None,
        *,
        key: str | None = "key-1",
        raw: bytes | None = None,
        version: str = "v1",
        service: str = SERVICE,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        client: TestClient | None = None,
    ) -> Response:
        """POST an invoke through the world's app (or `client`: another app on this world)."""
        sent = {"Authorization": f"Bearer {api_key or self.api_key}"}
        if key is not None:
            sent["Idempotency-Key"] = key
        sent.update(headers or {})
        content = (
            raw
            if raw is not None
            else (__import__("json").dumps(body if body is not None else {"n": 1}).encode())
        )
        return (client or self.client).post(
            f"/v1/services/{service}/versions/{version}:invoke", content=content, headers=sent
        )

    def get(self, path: str, api_key: str | None = None) -> Response:
        return self.client.get(path, headers={"Authorization": f"Bearer {api_key or self.api_key}"})

    def balances(self, account_id: str | None = None) -> tuple[int, int]:
        with self.runtime.db.read() as session:
            b = ledger.balances(session, account_id=account_id or self.caller_id)
        return b.available, b.reserved

    def earnings(self) -> int:
        with self.runtime.db.read() as session:
            return ledger.balances(session, account_id=self.provider_id).earnings

    def reservations(self, state: str) -> int:
        with self.runtime.db.read() as session:
            return int(
                session.scalar(
                    select(func.count()).select_from(Reservation).where(Reservation.state == state)
                )
                or 0
            )

    def invocations(self) -> list[Invocation]:
        with self.runtime.db.read() as session:
            return list(session.scalars(select(Invocation).order_by(Invocation.id)))

    def address(self) -> Address:
        """The address a send made now would record (the connection as it stands)."""
        with self.runtime.db.read() as session:
            connection_id = session.scalars(select(ProviderConnection.id)).one()
            target = providers.get_dispatch_target(
                session, connection_id=connection_id, settings=self.runtime.settings
            )
        return invocations_service.address_of(target, self.runtime.settings)

    def rename_connection(self) -> None:
        """Change the provider's only connection: a new revision, not approved yet."""
        with self.runtime.db.transaction() as session:
            connection_id = session.scalars(select(ProviderConnection.id)).one()
            providers.update_connection(
                session,
                connection_id=connection_id,
                name="renamed",
                settings=self.runtime.settings,
                now=utcnow(),
            )

    def set_quota(self, *, limit: int, window_seconds: int, policy: str = "tight") -> None:
        """Give the caller its own quota policy, from now on."""
        with self.runtime.db.transaction() as session:
            quotas.set_quota(
                session,
                account_id=self.caller_id,
                policy=policy,
                limit=limit,
                window_seconds=window_seconds,
                now=self.clock.now(),
            )

    def accept_without_sending(
        self,
        key: str,
        *,
        owner: str = "another-process",
        lease_seconds: float = 30,
        address: Address | None = None,
    ) -> str:
        """A call accepted under `key` by a process (`owner`) that has not sent it: still
        sending it (its lease is live for `lease_seconds`) or dead since. Its id."""
        invocation_id = self.runtime.ids.new("inv")
        body = b'{"n": 1}'
        with self.runtime.db.transaction() as session:
            version = catalog.get_invocable_version(session, service_code=SERVICE, version="v1")
            invocations_service.accept(
                session,
                invocation_id=invocation_id,
                account_id=self.caller_id,
                channel="API_KEY",
                idempotency_key=key,
                fingerprint=invocations_service.fingerprint_of(
                    service_code=SERVICE, version="v1", body=body
                ),
                version=version,
                payload=body,
                policy=quotas.default_policy(self.runtime.settings),
                address=address or self.address(),
                lease_owner=owner,
                lease_seconds=lease_seconds,
                now=self.clock.now(),
            )
        return invocation_id

    def provider_key(self, invocation_id: str) -> str:
        return f"mercato:{invocation_id}"

    def work(self, *, advance: float = 3600.0) -> int:
        """Let backoffs and leases fall due, then run worker passes until idle."""
        self.clock.advance(advance)
        total = 0
        for _ in range(20):
            done = run_on_fresh_loop(loops.run_once(self.runtime))
            total += done
            if done == 0:
                return total
            self.clock.advance(advance)
        busy = {loop.__name__: run_on_fresh_loop(loop(self.runtime)) for loop in loops.LOOPS}
        raise AssertionError(f"worker did not become idle: {busy}")

    def ledger_balanced(self) -> bool:
        with self.runtime.db.read() as session:
            return ledger.verify(session).balanced


@contextmanager
def running_world(
    db_url: str, tmp_path: Path, provider: ScriptedProvider, **settings: Any
) -> Iterator[World]:
    """`build_world` for a fixture: the world, then its client and database closed."""
    world = build_world(db_url, tmp_path, provider, **settings)
    try:
        yield world
    finally:
        world.provider_client.close()
        world.runtime.db.dispose()


def build_world(db_url: str, tmp_path: Path, provider: ScriptedProvider, **settings: Any) -> World:
    config = Settings(
        env="dev",
        data_dir=tmp_path / "data",
        database_url=db_url,
        # Generous by default: a loaded CI machine must never turn an answer into a timeout.
        # Tests that provoke timeouts on purpose pass a short one.
        provider_timeout_seconds=settings.pop("provider_timeout_seconds", 10.0),
        redispatch_attempts=settings.pop("redispatch_attempts", 2),
        password_hash_memory_kib=settings.pop("password_hash_memory_kib", PASSWORD_HASH_MEMORY_KIB),
        **settings,
    )
    clock = FakeClock(utcnow())
    runtime = Runtime.from_settings(config, clock=clock)
    caller_id = make_account(runtime.db, "caller@example.com", password=None)
    provider_id = make_account(runtime.db, "provider@example.com", password=None)
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=caller_id, amount=100, now=clock.now())
        connection = providers.create_connection(
            session,
            owner_id=provider_id,
            name="echo",
            base_url=provider.url,
            credential=CREDENTIAL,
            settings=config,
            now=clock.now(),
        )
        connection_id = connection.id
    approve_connection(runtime, connection_id)
    publish(
        runtime,
        connection_id,
        service_code=SERVICE,
        price=PRICE,
        contract=CONTRACT,
        provider_share_bps=7000,
    )
    api_key, _ = make_api_key(runtime.db, caller_id)
    provider_client = ProviderClient(config)
    runtime = dataclasses.replace(runtime, provider=provider_client)
    app = create_app(runtime)
    client = TestClient(app, raise_server_exceptions=False)
    return World(runtime, clock, client, provider, provider_client, caller_id, provider_id, api_key)
