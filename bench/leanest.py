"""The leanest-path floor (issue 20, decision 0363): the invoke, written by hand with no layers.

A benchmark tool, never a product entry point. It serves the product's invoke URL with the
product's replay semantics and does the product's durable work per call, in the product's own
schema and rows, with nothing between the socket and the driver:

- the HTTP server: httptools on the event loop (uvloop), one process per worker forked on one
  listening socket, the same worker count as `mercato serve` (`--server uvicorn`: the same
  handler as a raw ASGI app on uvicorn with httptools, no Starlette or FastAPI; measured
  0.1-0.2 ms of CPU per invoke dearer, so not the default);
- the API key checked against a map built at start from `api_keys` (SHA-256 digests, as the
  product stores them; revoked keys left out); the version facts, dispatch target, attempt
  address and quota policy of every published version read once at start with the product's
  own read (`flows.facts`) and kept in memory;
- transaction 1 = the product's own accept program (`money.ACCEPT`: intent, first attempt,
  reservation, quota slot) and transaction 2 = its settle program (`money.SETTLE`: terminal
  update, charge, receipt), each compiled once at start to SQL text (`mercato.db.guarded`:
  the SQL the product sends) and then executed bare. PostgreSQL: one data-modifying CTE per
  transaction, prepared once per connection on asyncpg, from a pool of its own that sends no
  reset query; statements that wait together commit together (one WAL flush), as the
  product's group commit (decision 0370) does, since one statement per flush on the caller's
  hot rows caps any path far below this one. SQLite: the same steps one after another in one
  BEGIN IMMEDIATE transaction on the process's stdlib sqlite3 connection, on the loop with no
  await inside (one writer per process, no thread hop);
- the provider called with one long-lived aiohttp session (the product's client library and
  connector settings), with exactly the headers and body the product sends;
- the product's success body; a refusal (insufficient points 402, rate limit 429, a key
  reused with another body 422) as a bare problem+json, nothing written.

Replays: a key this process has not seen goes straight to the accept statement, so a fresh
call runs no read at all; on PostgreSQL that statement skips a taken key (`ON CONFLICT DO
NOTHING`, everything after it gated on it, so nothing is written) and returns the row holding
it, on SQLite the unique constraint refuses it and one read finds the row. A key the process
has seen is read first, so a replay is one read. An answer that is neither a success nor a
defined failure leaves the call DISPATCHING under its lease for the product's worker to
reconcile, answered 202.

What it leaves out of the product's path: request ids, metrics, logs, edge checks (head and
body limits beyond the version's, header validation), the RateLimit headers, the key's
last-use write (one per key per hour), the SSRF-guarded resolver (the bench provider is a
loopback literal) and retries of a deadlocked statement; the JSON-schema checks are
`is_valid` only. So it is a floor: no product path on this machine does the same durable
work for less.

    python -m bench.leanest --port N [--workers W] [--server raw|uvicorn]
    (the platform's MERCATO_* environment, as `mercato serve`)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import hashlib
import os
import sqlite3
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

PREFIX = b"/v1/services/"
SUFFIX = b":invoke"
SEEN_MAX = 65_536
"""How many (account, Idempotency-Key) pairs a process remembers having seen."""
POOL_SIZE = 4
GROUP_MAX = 32
"""At most this many money statements commit together (the product's `GROUP_MAX`)."""
"""asyncpg connections per worker process, at most (opened as needed; with group commit one
runs the money statements, the others the replays' reads and the statements that run alone)."""
_UTC = dt.UTC
_JSON = [(b"content-type", b"application/json")]
_PROBLEM = [(b"content-type", b"application/problem+json")]
_REFUSAL_STATUS = {"short": 402, "key-limit": 402, "quota": 429}
_SQLITE_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

_STARTS: dict[dt.date, dict[str, dt.datetime]] = {}


def _spend_starts(now: dt.datetime) -> dict[str, dt.datetime]:
    """The accept program's period starts for key spend limits (`spend.start_params`), made
    once a UTC day."""
    day = now.date()
    found = _STARTS.get(day)
    if found is None:
        from mercato.invocations import spend

        _STARTS.clear()
        found = _STARTS[day] = {f"p_{k}": v for k, v in spend.start_params(now).items()}
    return found


Row = tuple[str, str, str, Any]
"""An invocation holding a key: id, fingerprint, state, result."""
Refusal = Row | str | None
Headers = list[tuple[bytes, bytes]]
Answer = tuple[int, Headers, bytes]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Facts:
    """One published version as a call on it needs it, read once at start."""

    service_code: str
    version: str
    fixed: dict[str, Any]  # the accept program's inputs that are the same for every call
    request_max_bytes: int
    response_max_bytes: int
    request_valid: Callable[[Any], bool]
    result_valid: Callable[[Any], bool]
    url: str
    headers: dict[str, str]  # what the product sends the provider, bar the Idempotency-Key
    policy: Any  # the caller's quota policy (mercato.quotas.schemas.Policy)


class Statement:
    """One statement of a product program compiled once: its SQL, the names of its values in
    placeholder order, the constants among them, and the driver-side conversions (SQLite)."""

    __slots__ = ("consts", "names", "processors", "sql")

    def __init__(self, compiled: Any, *, convert: bool) -> None:
        self.sql: str = compiled.string
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        # The program's literal thresholds (`param_1`, `accepted_1`, …) carry their own value.
        self.consts = {
            name: by_name[name].value for name in self.names if not name.startswith(("p_", "s_"))
        }
        processors = compiled._bind_processors if convert else {}
        self.processors = tuple(
            (index, processors[name]) for index, name in enumerate(self.names) if name in processors
        )

    def values(self, given: dict[str, Any]) -> list[Any]:
        values = [given[name] for name in self.names]
        for index, process in self.processors:
            values[index] = process(values[index])
        return values


# --- the app --------------------------------------------------------------------------------


def provider_session(timeout: float) -> Any:
    """The provider calls' aiohttp session: the product's connector settings
    (`mercato.dispatch.async_client`), bar its SSRF resolver (the bench provider is a loopback
    literal, which aiohttp dials directly). Its keep-alive is the product's too, under the
    provider's own 5 s: a call sent on a connection the provider was closing at that moment
    was reset unanswered and left DISPATCHING, answered 202 (decision 0500)."""
    import aiohttp

    from mercato.dispatch.async_client import KEEPALIVE_SECONDS

    connector = aiohttp.TCPConnector(
        use_dns_cache=False, limit=100, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        trust_env=False,
        raise_for_status=False,
        timeout=aiohttp.ClientTimeout(total=timeout),
    )


class Leanest:
    """The raw ASGI app; the store is set up on lifespan startup, in the worker's own loop."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[str, str]] = {}  # SHA-256 hex of the key → (account, key id)
        self.facts: dict[tuple[str, bytes], Facts] = {}  # (account, path) → facts
        self.store: Store | None = None
        self.http: Any = None
        self.lease = dt.timedelta(seconds=60)
        self.fingerprint_of: Any = None
        self.seen: dict[tuple[str, str], None] = {}
        """Keys this process has seen: a call with one of them reads first (a replay is then
        one read); any other key goes straight to the accept statement, which answers a
        replay too when the key turns out to be taken. Only the order of work depends on it."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            body = await _body(receive) if scope["method"] == "POST" else b""
            status, headers, content = await self.handle(
                scope["method"] == "POST", scope["raw_path"], scope["headers"], body
            )
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": content})
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await self.start()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.stop()
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def start(self) -> None:
        from mercato.invocations.service import fingerprint_of
        from mercato.settings import load_settings

        settings = load_settings()
        self.fingerprint_of = fingerprint_of
        self.keys, self.facts, self.lease = load_facts(settings)
        url = settings.database_url
        if url.startswith("sqlite"):
            self.store = SqliteStore(url.split("///", 1)[1])
        else:
            dsn = "postgresql://" + url.split("://", 1)[1]
            self.store = await PostgresStore.open(dsn, POOL_SIZE)
        self.http = provider_session(float(settings.provider_timeout_seconds))

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        if self.store is not None:
            await self.store.close()

    async def handle(self, post: bool, path: bytes, headers: Headers, body: bytes) -> Answer:
        """Any request: the invoke, the liveness probe, or 404."""
        if post and path.endswith(SUFFIX):
            return await self.invoke(path, headers, body)
        if path == b"/health/live":
            return 200, _JSON, b'{"status":"ok"}'
        return _problem(404, "NOT_FOUND")

    async def invoke(self, path: bytes, headers: Headers, body: bytes) -> Answer:
        """One invoke: its answer's status, headers and body."""
        authorization = key = None
        for name, value in headers:
            if name == b"authorization":
                authorization = value
            elif name == b"idempotency-key":
                key = value
        holder = None
        if authorization is not None and authorization[:7].lower() == b"bearer ":
            holder = self.keys.get(hashlib.sha256(authorization[7:].strip()).hexdigest())
        if holder is None:
            return _problem(401, "UNAUTHENTICATED")
        account, key_id = holder
        if key is None or not 1 <= len(key) <= 191:
            return _problem(400, "IDEMPOTENCY_KEY_MISSING")
        facts = self.facts.get((account, path))
        if facts is None:
            return _problem(404, "VERSION_NOT_FOUND")
        idempotency_key = key.decode("latin-1")
        fingerprint = self.fingerprint_of(
            service_code=facts.service_code, version=facts.version, body=body
        )
        if len(body) > facts.request_max_bytes:
            return _problem(413, "REQUEST_TOO_LARGE")
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict) or not payload or not facts.request_valid(payload):
            return _problem(422, "REQUEST_SCHEMA_VIOLATION")
        assert self.store is not None
        seen = self.seen
        known = (account, idempotency_key)
        if known in seen:
            # A key this process has seen: most likely a replay, answered from one read.
            row = await self.store.find(account, idempotency_key)
            if row is not None:
                return self.replayed(row, fingerprint)
        elif len(seen) >= SEEN_MAX:
            seen.clear()
        seen[known] = None
        # Every id of the call from one draw: the product's shape (`<prefix>_<time><random>`,
        # lowercase alphanumeric, time-ordered), unique by its 64 random bits and a suffix.
        tail = f"{time.time_ns() >> 20:x}{os.urandom(8).hex()}"
        invocation_id = "inv_" + tail
        owner = "lease_" + tail
        now = dt.datetime.now(_UTC)
        window = facts.policy.window_seconds
        epoch = int(now.timestamp())
        values = {
            **facts.fixed,
            "p_inv_id": invocation_id,
            "p_inv_account_id": account,
            "p_inv_idempotency_key": idempotency_key,
            "p_inv_fingerprint": fingerprint,
            "p_inv_payload": body,
            "p_inv_provider_key": "mercato:" + invocation_id,
            "p_inv_reservation_id": "res_" + tail,
            "p_inv_next_attempt_at": now,
            "p_inv_lease_owner": owner,
            "p_inv_lease_expires_at": now + self.lease,
            "p_inv_created_at": now,
            "p_inv_updated_at": now,
            "p_now": now,
            "p_hint_generation": None,  # nothing served from the product's memory (0400)
            "p_inv_api_key_id": key_id,  # its spend limit, if it has one (decision 0590)
            **_spend_starts(now),
            "p_quota_window_start": epoch - epoch % window,
            "p_reserve_account1": "lac_" + tail + "r",
            "p_reserve_transfer": "trf_" + tail + "r",
            "p_reserve_entry0": "ent_" + tail + "r0",
            "p_reserve_entry1": "ent_" + tail + "r1",
        }
        refusal = await self.store.accept(values)
        if refusal is not None:
            if isinstance(refusal, tuple):
                return self.replayed(refusal, fingerprint)
            if refusal == "duplicate":
                return await self.replay(account, idempotency_key, fingerprint)
            return _problem(_REFUSAL_STATUS.get(refusal, 409), refusal)
        # The provider call, as the product sends it.
        outbound = dict(facts.headers)
        outbound["Idempotency-Key"] = "mercato:" + invocation_id
        try:
            async with self.http.post(
                facts.url,
                data=b'{"payload":' + body + b"}",
                headers=outbound,
                allow_redirects=False,
            ) as response:
                status = response.status
                answer = await response.content.read(facts.response_max_bytes + 1)
        except Exception:  # a transport failure: the outcome is unknown
            status, answer = 0, b""
        result = _succeeded(status, answer, facts)
        now = dt.datetime.now(_UTC)
        finish = {
            "p_id": invocation_id,
            "p_lease_owner": owner,
            "p_set_settled_at": now,
            "p_set_updated_at": now,
            "p_now": now,
        }
        if result is not None:
            finish.update(
                p_set_state="SUCCEEDED",
                p_set_settlement="SETTLED",
                p_set_result=result,
                p_set_artifacts=None,
                p_settle_account1="lac_" + tail + "s1",
                p_settle_account2="lac_" + tail + "s2",
                p_settle_transfer="trf_" + tail + "s",
                p_settle_entry0="ent_" + tail + "s0",
                p_settle_entry1="ent_" + tail + "s1",
                p_settle_entry2="ent_" + tail + "s2",
            )
            await self.store.settle(finish)
            return (
                200,
                _JSON,
                b'{"invocationId":"%s","result":%s}' % (invocation_id.encode(), result),
            )
        failure = _defined_failure(status, answer)
        if failure is None:  # unknown outcome: the product's worker reconciles it
            return 202, _JSON, orjson.dumps({"invocationId": invocation_id, "status": "PENDING"})
        finish.update(
            p_set_state="FAILED",
            p_set_settlement="RELEASED",
            p_set_error_code=failure[0],
            p_set_provider_http_status=failure[1],
            p_release_transfer="trf_" + tail + "f",
            p_release_entry0="ent_" + tail + "f0",
            p_release_entry1="ent_" + tail + "f1",
        )
        await self.store.release(finish)
        return _problem(422, "PROVIDER_DEFINED_FAILURE")

    async def replay(self, account: str, key: str, fingerprint: str) -> Answer:
        assert self.store is not None
        row = await self.store.find(account, key)
        if row is None:
            return _problem(409, "IDEMPOTENCY_KEY_IN_USE")
        return self.replayed(row, fingerprint)

    def replayed(self, row: Row, fingerprint: str) -> Answer:
        invocation_id, found, state, result = row
        if found != fingerprint:
            return _problem(422, "IDEMPOTENCY_KEY_REUSED")
        if state == "SUCCEEDED":
            return (
                200,
                _JSON,
                b'{"invocationId":"%s","result":%s}'
                % (
                    invocation_id.encode(),
                    bytes(result),
                ),
            )
        if state == "FAILED":
            return _problem(422, "PROVIDER_DEFINED_FAILURE")
        return _problem(409, "IDEMPOTENCY_KEY_IN_USE")


def _succeeded(status: int, answer: bytes, facts: Facts) -> bytes | None:
    """The result's JSON of a SUCCEEDED envelope that keeps the result schema, else None."""
    if status != 200 or len(answer) > facts.response_max_bytes:
        return None
    try:
        envelope = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    result = envelope.get("result") if isinstance(envelope, dict) else None
    if envelope.get("outcome") != "SUCCEEDED" or not isinstance(result, dict):
        return None
    if not facts.result_valid(result):
        return None
    return orjson.dumps(result)


def _defined_failure(status: int, answer: bytes) -> tuple[str, int] | None:
    try:
        envelope = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(envelope, dict) or envelope.get("outcome") != "DEFINED_FAILURE":
        return None
    code, http_status = envelope.get("errorCode"), envelope.get("httpStatus")
    if not isinstance(code, str) or http_status != status or not 400 <= status < 600:
        return None
    return code, status


async def _body(receive: Any) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):
        return body
    chunks = [body]
    while message.get("more_body"):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


def _problem(status: int, code: str) -> Answer:
    return status, _PROBLEM, orjson.dumps({"type": "about:blank", "status": status, "code": code})


# --- what is read once, at start -----------------------------------------------------------


def load_facts(
    settings: Any,
) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, bytes], Facts], Any]:
    """The API keys (digest → (account, key id)) and, per (account, invoke path), the facts of every
    published version, read with the product's own reads (`flows.facts`), once."""
    from jsonschema import validators
    from sqlalchemy import text

    from mercato.core.errors import MercatoError
    from mercato.db.runtime import Runtime
    from mercato.dispatch.async_client import _HEADERS
    from mercato.invocations import flows, service
    from mercato.protocol import AUTHORIZATION_HEADER, EXECUTIONS_PATH

    runtime = Runtime.from_settings(settings)
    try:
        with runtime.db.read() as session:
            keys = {
                digest: (account, key_id)
                for digest, account, key_id in session.execute(
                    text("SELECT digest, account_id, id FROM api_keys WHERE revoked_at IS NULL")
                )
            }
            versions = list(
                session.execute(
                    text(
                        "SELECT l.service_code, v.label FROM versions v "
                        "JOIN listings l ON l.id = v.listing_id WHERE v.state = 'PUBLISHED'"
                    )
                )
            )
            facts: dict[tuple[str, bytes], Facts] = {}
            for account in {account for account, _ in keys.values()}:
                for service_code, label in versions:
                    request = flows.InvokeRequest(
                        account_id=account,
                        channel="API_KEY",
                        service_code=service_code,
                        version=label,
                        idempotency_key="-",
                        body=b"",
                    )
                    try:
                        version, target, policy = flows.facts(
                            session, request=request, settings=settings
                        )
                    except MercatoError:  # held, unavailable: not invocable, so not served
                        continue
                    if not target.approved:
                        continue
                    facts[(account, _path(service_code, label))] = _facts(
                        version,
                        target,
                        policy,
                        runtime,
                        service,
                        flows,
                        validators,
                        {
                            **_HEADERS,
                            AUTHORIZATION_HEADER: f"Bearer {target.credential}",
                            "Content-Type": "application/json",
                        },
                        target.base_url.rstrip("/") + EXECUTIONS_PATH,
                    )
        lease = dt.timedelta(seconds=flows.lease_seconds(runtime))
    finally:
        runtime.db.dispose()
    return keys, facts, lease


def _path(service_code: str, version: str) -> bytes:
    return b"%s%s/versions/%s%s" % (PREFIX, service_code.encode(), version.encode(), SUFFIX)


def _facts(
    version: Any,
    target: Any,
    policy: Any,
    runtime: Any,
    service: Any,
    flows: Any,
    validators: Any,
    headers: dict[str, str],
    url: str,
) -> Facts:
    address = service.address_of(target, runtime.settings)

    def validator(schema: dict[str, Any]) -> Callable[[Any], bool]:
        return validators.validator_for(schema)(schema).is_valid  # type: ignore[no-any-return]

    result_schema = version.contract.get("resultSchema", {})
    fixed = {
        "p_inv_channel": "API_KEY",
        "p_inv_request_id": None,
        "p_inv_service_code": version.service_code,
        "p_inv_version": version.version,
        "p_inv_version_id": version.version_id,
        "p_inv_contract_digest": version.contract_digest,
        "p_inv_connection_id": version.connection_id,
        "p_inv_provider_account_id": version.provider_account_id,
        "p_inv_provider_share_bps": version.provider_share_bps,
        "p_inv_price": version.price,
        "p_inv_has_artifact_contract": version.has_artifact_contract,
        "p_inv_response_max_bytes": version.response_max_bytes,
        "p_inv_result_schema": result_schema,
        "p_inv_state": "DISPATCHING",
        "p_inv_settlement": "PENDING",
        "p_inv_sends": 1,
        "p_inv_reconciliations": 0,
        "p_connection_revision": address.connection_revision,
        "p_base_url": address.base_url,
        "p_credential_digest": address.credential_digest,
        "p_reserve_amount": version.price,
        "p_quota_policy": policy.name,
        "p_quota_limit": policy.limit,
    }
    return Facts(
        service_code=version.service_code,
        version=version.version,
        fixed=fixed,
        request_max_bytes=version.request_max_bytes,
        response_max_bytes=version.response_max_bytes,
        request_valid=validator(version.contract.get("requestSchema", {})),
        result_valid=validator(result_schema),
        url=url,
        headers=headers,
        policy=policy,
    )


def programs() -> tuple[Any, Any, Any]:
    """The product's accept, settle and release programs (`mercato.invocations.money`)."""
    from mercato.db.models import load_all
    from mercato.invocations import money

    load_all()
    return money.ACCEPT, money.SETTLE, money.RELEASE


# --- the stores -----------------------------------------------------------------------------


class Store:
    async def accept(self, values: dict[str, Any]) -> Refusal:
        """Transaction 1; None when accepted, else why not: the row holding the key (a
        replay), 'duplicate' (the key is taken, its row not read yet) or a refusal code."""
        raise NotImplementedError

    async def settle(self, values: dict[str, Any]) -> None:
        raise NotImplementedError

    async def release(self, values: dict[str, Any]) -> None:
        raise NotImplementedError

    async def find(self, account: str, key: str) -> Row | None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


_FIND = (
    "SELECT id, fingerprint, state, result FROM invocations "
    "WHERE account_id = {0} AND idempotency_key = {1}"
)


_INTENT_STOPPED = "WHEN (NOT (EXISTS (SELECT * \nFROM intent))) THEN 0"
_SELECT = "SELECT mercato.mercato_ok, quota.accepted AS quota__accepted \nFROM ("
_JOINED = "AS mercato LEFT OUTER JOIN quota ON true"


def replaying(sql: str, names: tuple[str, ...]) -> str:
    """The product's accept statement, made to answer a replay in the same round trip. Its
    intent already skips a taken key (`ON CONFLICT DO NOTHING`, decision 0400, so every later
    step, gated on it, writes nothing either) and the program then stops (verdict 0); here
    that verdict is 2, and the row that holds the key comes back with it (NULL when its writer
    committed after this statement's snapshot: then one read finds it). Nothing else of the
    statement changes."""
    for anchor in (_INTENT_STOPPED, _SELECT, _JOINED):
        if sql.count(anchor) != 1:
            raise RuntimeError(f"the accept statement changed shape: {anchor!r}")
    if "FROM hinted) ON CONFLICT DO NOTHING RETURNING invocations.id)" not in sql:
        raise RuntimeError("the accept statement changed shape: its intent's ON CONFLICT")
    # the placeholders the intent's account and key are bound to
    account = f"${names.index('p_inv_account_id') + 1}"
    key = f"${names.index('p_inv_idempotency_key') + 1}"
    sql = sql.replace(_INTENT_STOPPED, _INTENT_STOPPED[:-1] + "2")
    sql = sql.replace(
        _SELECT,
        "SELECT mercato.mercato_ok, quota.accepted AS quota__accepted, prior.id, "
        "prior.fingerprint, prior.state, prior.result \nFROM (",
    )
    return sql.replace(
        _JOINED,
        _JOINED + " LEFT OUTER JOIN invocations AS prior ON mercato.mercato_ok = 2 "
        f"AND prior.account_id = {account}::VARCHAR AND prior.idempotency_key = {key}::VARCHAR",
    )


class PostgresStore(Store):
    """asyncpg; each transaction one statement (autocommit), prepared once per connection."""

    def __init__(self, statements: dict[str, Statement]) -> None:
        self.statements = statements
        self.idle: asyncio.Queue[tuple[Any, dict[str, Any]]] = asyncio.Queue()
        self.all: list[Any] = []
        self.opening = 0
        self.queue: collections.deque[tuple[str, list[Any], asyncio.Future[Any]]] = (
            collections.deque()
        )
        self.draining: asyncio.Task[None] | None = None
        self.dsn = ""
        self.size = 1
        self.asyncpg: Any = None
        self.parse_refusal: Any = None
        self.exclusive: dict[str, str] = {}

    @classmethod
    async def open(cls, dsn: str, size: int) -> PostgresStore:
        import asyncpg
        from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg

        from mercato.db import guarded

        dialect = PGDialect_asyncpg(dbapi=PGDialect_asyncpg.import_dbapi())  # type: ignore[no-untyped-call]
        accept, settle, release = programs()
        statements = {
            name: Statement(guarded.compiled(program, "postgresql").sql(dialect)[0], convert=True)
            for name, program in (("accept", accept), ("settle", settle), ("release", release))
        }
        statements["accept"].sql = replaying(statements["accept"].sql, statements["accept"].names)
        store = cls(statements)
        store.exclusive = {
            name: guarded.exclusive(statement.sql) for name, statement in statements.items()
        }
        store.dsn, store.size, store.asyncpg = dsn, size, asyncpg
        store.parse_refusal = guarded.parse_refusal
        store.idle.put_nowait(await store._connect())  # fail at start, not on the first call
        return store

    async def _connect(self) -> tuple[Any, dict[str, Any]]:
        """A connection with every statement prepared on it (opened as calls need them, up to
        `size`: the database's connection slots are shared with everything else here)."""
        self.opening += 1
        try:
            conn = await self.asyncpg.connect(self.dsn, statement_cache_size=0)
        except BaseException:
            self.opening -= 1
            raise
        self.all.append(conn)
        # Named: with the statement cache off, asyncpg prepares an unnamed statement, which
        # the next statement on the connection replaces, so every execution sent the whole
        # text again (Parse) and the server parsed, analysed and planned it again each time.
        prepared = {
            name: await conn.prepare(statement.sql, name=f"leanest_{name}")
            for name, statement in self.statements.items()
        }
        for name, sql in self.exclusive.items():
            prepared[name + "_x"] = await conn.prepare(sql, name=f"leanest_{name}_x")
        prepared["find"] = await conn.prepare(_FIND.format("$1", "$2"), name="leanest_find")
        return conn, prepared

    async def _acquire(self) -> tuple[Any, dict[str, Any]]:
        if self.idle.empty() and self.opening < self.size:
            return await self._connect()
        return await self.idle.get()

    async def _run(self, name: str, values: dict[str, Any]) -> Any:
        """One money statement, committed with whichever others wait with it (group commit,
        as the product's decision 0370: on the caller's hot rows, one statement per WAL flush
        is the limit otherwise)."""
        statement = self.statements[name]
        args = statement.values({**statement.consts, **values})
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.queue.append((name, args, future))
        if self.draining is None:
            self.draining = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _alone(self, name: str, args: list[Any]) -> Any:
        item = await self._acquire()
        try:
            return await item[1][name].fetchrow(*args)
        finally:
            self.idle.put_nowait(item)

    async def _drain(self) -> None:
        """Run the queue: one statement alone in autocommit (one round trip); several: the
        executions of each statement in one round trip and one transaction (`_pipelined`)."""
        queue = self.queue
        try:
            while queue:
                batch = [queue.popleft() for _ in range(min(len(queue), GROUP_MAX))]
                if len(batch) == 1:
                    await self._settle_alone(batch[0])
                    continue
                try:
                    await self._pipelined(batch)
                except BaseException as error:  # a broken connection: no caller left waiting
                    for _name, _args, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    if not isinstance(error, Exception):
                        raise
        finally:
            self.draining = None

    async def _pipelined(self, batch: list[tuple[str, list[Any], asyncio.Future[Any]]]) -> None:
        """A group as the product's (decision 0440): the executions of one statement pipelined
        in one round trip (asyncpg `fetchmany`), one implicit transaction (one Sync: all commit,
        one flush, or none does), each taking the money lock exclusively (the `_x` texts), so
        the lock is never held across a round trip; the statements of a batch side by side.
        Any server error (a refusal aborts its statement): nothing of that group was written,
        and each of its statements runs again alone, so each caller gets the answer it would
        have had alone."""
        by_name: dict[str, list[tuple[list[Any], asyncio.Future[Any]]]] = {}
        for name, args, future in batch:
            by_name.setdefault(name, []).append((args, future))
        await asyncio.gather(*(self._group(name, calls) for name, calls in by_name.items()))

    async def _group(self, name: str, calls: list[tuple[list[Any], asyncio.Future[Any]]]) -> None:
        if len(calls) == 1:
            await self._settle_alone((name, *calls[0]))
            return
        item = await self._acquire()
        try:
            rows = await item[1][name + "_x"].fetchmany([args for args, _ in calls])
        except self.asyncpg.PostgresError:
            rows = None
        finally:
            self.idle.put_nowait(item)
        if rows is None:
            for args, future in calls:
                await self._settle_alone((name, args, future))
            return
        if len(rows) != len(calls):
            raise RuntimeError("a money statement returned other than one row")
        for (_, future), row in zip(calls, rows, strict=True):
            future.set_result(row)

    async def _settle_alone(self, entry: tuple[str, list[Any], asyncio.Future[Any]]) -> None:
        name, args, future = entry
        try:
            future.set_result(await self._alone(name, args))
        except Exception as error:
            future.set_exception(error)

    async def accept(self, values: dict[str, Any]) -> Refusal:
        asyncpg = self.asyncpg
        try:
            row = await self._run("accept", values)
        except asyncpg.UniqueViolationError:  # a same-key twin raced past ON CONFLICT's check
            return "duplicate"
        except asyncpg.InvalidTextRepresentationError as error:
            refused = self.parse_refusal(str(error))
            if refused is None:
                raise
            return refused.code or "refused"
        if row[0] == 2:
            return "duplicate" if row[2] is None else (row[2], row[3], row[4], row[5])
        return None

    async def settle(self, values: dict[str, Any]) -> None:
        await self._run("settle", values)

    async def release(self, values: dict[str, Any]) -> None:
        await self._run("release", values)

    async def find(self, account: str, key: str) -> Row | None:
        row = await self._alone("find", [account, key])
        return None if row is None else tuple(row)

    async def close(self) -> None:
        for conn in self.all:
            await conn.close()


class _SqliteStep(NamedTuple):
    step: Any
    statement: Statement
    required_if: Statement | None
    columns: tuple[str, ...]
    counted: bool
    read: Statement | None
    known: tuple[str, ...]


class SqliteStore(Store):
    """The stdlib sqlite3 on the event loop (a statement takes microseconds); each transaction
    BEGIN IMMEDIATE … COMMIT with no await inside, so the process is one writer; a write lock
    held by another process is waited for with an await, never on the loop."""

    def __init__(self, path: str) -> None:
        from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

        from mercato.db import guarded

        dialect = SQLiteDialect_pysqlite()
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in (
            "journal_mode=WAL",
            "foreign_keys=ON",
            "synchronous=NORMAL",
            "busy_timeout=0",
        ):
            self.conn.execute(f"PRAGMA {pragma}")
        accept, settle, release = programs()
        self.programs: dict[str, list[_SqliteStep]] = {}
        for name, program in (("accept", accept), ("settle", settle), ("release", release)):
            built = guarded.compiled(program, "sqlite")
            steps = []
            for item, (statement, required_if, _detail, read) in zip(
                built.steps, built.sql(dialect), strict=True
            ):
                columns = tuple(f"s_{item.step.name}_{c}" for c in item.columns)
                steps.append(
                    _SqliteStep(
                        item.step,
                        Statement(statement, convert=True),
                        None if required_if is None else Statement(required_if, convert=True),
                        columns,
                        item.counted,
                        None if read is None else Statement(read, convert=True),
                        item.known,
                    )
                )
            self.programs[name] = steps

    async def _begin(self) -> None:
        delay = 0.0005
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                code = getattr(error, "sqlite_errorcode", 0) & 0xFF
                if code not in _SQLITE_BUSY:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)

    async def _run(self, name: str, values: dict[str, Any]) -> str | None:
        """The program's steps in one transaction; a refusal's code (rolled back) or None."""
        from mercato.db.guarded import Empty

        await self._begin()
        conn = self.conn
        try:
            for step, statement, required_if, columns, counted, read, known in self.programs[name]:
                given = {**statement.consts, **values}
                cursor = conn.execute(statement.sql, statement.values(given))
                row: Any
                if not counted:  # the product's spelling (`guarded.CompiledStep.counted`)
                    row = cursor.fetchone()
                elif cursor.rowcount <= 0:
                    row = None
                elif read is not None:
                    row = conn.execute(read.sql, read.values({**read.consts, **values})).fetchone()
                else:
                    row = tuple(values[key] for key in known)
                if row is not None:
                    values.update(zip(columns, row, strict=True))
                    continue
                if step.empty is Empty.STOP:
                    if name == "accept":  # its intent skipped a taken key (0400): a replay
                        conn.execute("ROLLBACK")
                        return "duplicate"
                    break
                if step.empty is Empty.REFUSE:
                    needed = (
                        required_if is None
                        or conn.execute(
                            required_if.sql, required_if.values({**required_if.consts, **values})
                        ).fetchone()[0]
                    )
                    if needed:
                        conn.execute("ROLLBACK")
                        return step.code or "refused"
                values.update(dict.fromkeys(columns))
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK")
            return "duplicate"
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return None

    async def accept(self, values: dict[str, Any]) -> Refusal:
        return await self._run("accept", values)

    async def settle(self, values: dict[str, Any]) -> None:
        await self._run("settle", values)

    async def release(self, values: dict[str, Any]) -> None:
        await self._run("release", values)

    async def find(self, account: str, key: str) -> Row | None:
        row = self.conn.execute(_FIND.format("?", "?"), (account, key)).fetchone()
        return None if row is None else tuple(row)

    async def close(self) -> None:
        self.conn.close()


def create_app() -> Leanest:
    return Leanest()


# --- or no ASGI server at all: httptools on the event loop -----------------------------------

_REASONS = {200: b"OK", 202: b"Accepted", 404: b"Not Found", 500: b"Internal Server Error"}


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection parsed by httptools, its requests answered in order."""

    def __init__(self, app: Leanest, loop: asyncio.AbstractEventLoop) -> None:
        import httptools

        self.app = app
        self.loop = loop
        self.parser = httptools.HttpRequestParser(self)
        self.error = httptools.HttpParserError
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: Headers = []
        self.body: list[bytes] = []
        self.pending: collections.deque[tuple[bool, bytes, Headers, bytes, bool]] = (
            collections.deque()
        )
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except self.error:
            if self.transport is not None:
                self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                self.transport.close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        post = self.parser.get_method() == b"POST"
        path = self.url.split(b"?", 1)[0]
        keep = self.parser.should_keep_alive()
        self.pending.append((post, path, self.headers, b"".join(self.body), keep))
        if self.task is None:
            self.task = self.loop.create_task(self.serve())

    async def serve(self) -> None:
        try:
            while self.pending:
                post, path, headers, body, keep = self.pending.popleft()
                try:
                    status, fields, content = await self.app.handle(post, path, headers, body)
                except Exception:
                    status, fields, content = 500, _PROBLEM, b""
                if self.transport is None:
                    return
                head = b"HTTP/1.1 %d %s\r\ncontent-length: %d\r\n" % (
                    status,
                    _REASONS.get(status, b"-"),
                    len(content),
                )
                head += b"".join(b"%s: %s\r\n" % field for field in fields)
                if not keep:
                    head += b"connection: close\r\n"
                self.transport.write(head + b"\r\n" + content)
                if not keep:
                    self.transport.close()
                    return
        finally:
            self.task = None


async def _raw_worker(sock: Any) -> None:
    import signal

    app = Leanest()
    await app.start()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(app, loop), sock=sock)
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    loop.add_signal_handler(signal.SIGINT, stopped.set)
    await stopped.wait()
    server.close()
    await app.stop()


def _reuseport_socket(port: int) -> Any:
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def serve_raw(port: int, workers: int) -> None:
    """`workers` forked processes, each on uvloop and listening on a socket of its own bound
    to the port with SO_REUSEPORT, as `mercato serve --workers N` listens (decision 0465)."""
    import signal

    import uvloop

    reserved = _reuseport_socket(port)  # held, never listening, while the workers run
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                reserved.close()
                sock = _reuseport_socket(port)
                sock.listen(2048)
                sock.setblocking(False)
                uvloop.run(_raw_worker(sock))
            except BaseException:
                traceback.print_exc()  # the worker's start-up error, in the process's log
                sys.stderr.flush()
                code = 1
            os._exit(code)
        children.append(pid)

    def stop(_signum: int, _frame: Any) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed = 0
    for pid in children:
        _pid, status = os.waitpid(pid, 0)
        failed += os.waitstatus_to_exitcode(status) not in (0, -signal.SIGTERM)
    if failed:
        sys.exit(f"{failed} of {len(children)} workers failed")


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.leanest")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--server",
        choices=("raw", "uvicorn"),
        default="raw",
        help="httptools on the event loop (default), or the raw ASGI app on uvicorn",
    )
    args = parser.parse_args()
    if args.server == "raw":
        serve_raw(args.port, args.workers)
        return
    uvicorn.run(
        "bench.leanest:create_app",
        factory=True,
        host="127.0.0.1",
        port=args.port,
        workers=args.workers,
        http="httptools",
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
    )


if __name__ == "__main__":
    main()
