"""The benchmark's headline reference: a lean, contract-correct FastAPI provider.

    python -m bench.lean_provider --port P

The kind of provider a user would compare Mercato against: one FastAPI app on uvicorn (one
worker), an echo handler, and its idempotency records in process memory instead of a durable
store. It still follows the provider wire contract (`mercato.protocol`, spec 2.3-2.5, 3.1, 3.2)
so that it passes the platform's nine conformance checks and the platform accepts its answers:

- `/health/live` and `/health/ready` answer 200 without a credential;
- executions and reconciliations need `Authorization: Bearer <credential>` (401 otherwise);
- the body is `{"payload": {...}}` and nothing else (400 otherwise, before any record);
- the fingerprint is the SHA-256 of the raw payload bytes; a known key with the same fingerprint
  answers its stored envelope without running the handler again, with another fingerprint
  `DEFINED_FAILURE` 409; a new key is recorded and answered in one step of the event loop (no
  await between the check and the write, so two requests with one key cannot both run it);
- a payload without a `job` member is a defined failure (400), like the SDK bench provider;
- a reconciliation answers the stored envelope, or `RETRYABLE_BEFORE_ACCEPT` for a key never seen.

The records live as long as the process: a restart forgets them, which is what makes it lean
(and what a real provider must not do). The credential comes from BENCH_PROVIDER_CREDENTIAL.

Slow work (`bench.capacity`, `bench.neighbour`): a payload with a numeric `sleep` member (seconds,
at most `MAX_SLEEP_SECONDS`) is answered that long after it arrives, by `asyncio.sleep` on the
event loop (no thread per call, so thousands of sleeping calls cost one socket and one coroutine
each); the key is then checked and recorded in one step, as above. `GET /bench/sleeping` (no
credential, no secret in it) answers how many calls sleep now, the most that ever slept at once,
and how many have answered after a sleep; `?reset=1` starts the peak again from now.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import os
import uuid

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from mercato.protocol import (
    EXECUTIONS_PATH,
    HEALTH_LIVE_PATH,
    HEALTH_READY_PATH,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    RECONCILIATIONS_PATH,
    Envelope,
    ExecutionRequestError,
    Outcome,
    parse_execution_request,
    parse_reconciliation_request,
)

MAX_REQUEST_BYTES = 1_048_576
KEY_REUSED_CODE = "IDEMPOTENCY_KEY_REUSED"
SLEEP_MEMBER = "sleep"
MAX_SLEEP_SECONDS = 60.0
SLEEPING_PATH = "/bench/sleeping"
BACKLOG = 8192  # the kernel caps it at net.core.somaxconn; a burst of thousands connects at once
_JSON = "application/json"


def _problem(
    status: int, title: str, detail: str, headers: dict[str, str] | None = None
) -> Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return Response(orjson.dumps(body), status, headers, media_type="application/problem+json")


def _envelope(envelope: Envelope) -> tuple[int, bytes]:
    return envelope.status, orjson.dumps(envelope.to_json())


def _valid_key(key: str | None) -> bool:
    return (
        key is not None
        and 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH
        and all("\x21" <= ch <= "\x7e" for ch in key)
    )


def sleep_of(payload: dict[str, object]) -> float:
    """How long the call asks to be answered after (seconds; 0 without a usable `sleep`)."""
    value = payload.get(SLEEP_MEMBER)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return min(max(float(value), 0.0), MAX_SLEEP_SECONDS)


class Sleeping:
    """Calls asleep now, the most asleep at once since the last reset, and answered after one."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.answered = 0

    def snapshot(self, *, reset: bool = False) -> dict[str, int]:
        shown = {"now": self.now, "peak": self.peak, "answered": self.answered}
        if reset:
            self.peak = self.now
        return shown


def create_app(credential: str) -> FastAPI:
    """The provider app; `records` maps a key to (fingerprint, HTTP status, envelope bytes)."""
    expected = credential.encode("ascii")
    records: dict[str, tuple[bytes, int, bytes]] = {}
    sleeping = Sleeping()
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.records = records
    app.state.sleeping = sleeping

    def authorized(request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        return hmac.compare_digest(given.strip().encode("latin-1"), expected)

    def unauthorized() -> Response:
        return _problem(
            401, "Unauthorized", "credential missing or invalid", {"WWW-Authenticate": "Bearer"}
        )

    @app.get(HEALTH_LIVE_PATH)
    async def live() -> Response:
        return Response(b'{"status":"live"}', media_type=_JSON)

    @app.get(HEALTH_READY_PATH)
    async def ready() -> Response:
        return Response(b'{"status":"ready"}', media_type=_JSON)

    @app.get(SLEEPING_PATH)
    async def asleep(request: Request) -> Response:
        reset = request.query_params.get("reset") == "1"
        return Response(orjson.dumps(sleeping.snapshot(reset=reset)), media_type=_JSON)

    @app.post(EXECUTIONS_PATH)
    async def execute(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        raw = await request.body()
        if len(raw) > MAX_REQUEST_BYTES:
            return _problem(413, "Content Too Large", "request body too large")
        try:
            payload, payload_bytes = parse_execution_request(raw)
        except ExecutionRequestError as exc:
            return _problem(400, "Bad Request", str(exc))
        key = request.headers.get(IDEMPOTENCY_KEY_HEADER)
        if not _valid_key(key):
            return _problem(400, "Bad Request", "Idempotency-Key must be 1-191 visible ASCII")
        assert key is not None
        delay = sleep_of(payload)
        if delay:
            sleeping.now += 1
            sleeping.peak = max(sleeping.peak, sleeping.now)
            try:
                await asyncio.sleep(delay)
            finally:
                sleeping.now -= 1
            sleeping.answered += 1
        fingerprint = hashlib.sha256(payload_bytes).digest()
        known = records.get(key)
        if known is not None:
            if not hmac.compare_digest(known[0], fingerprint):
                conflict = Envelope(
                    Outcome.DEFINED_FAILURE,
                    f"ans-{uuid.uuid4().hex}",
                    error_code=KEY_REUSED_CODE,
                    http_status=409,
                )
                status, body = _envelope(conflict)
                return Response(body, status, media_type=_JSON)
            return Response(known[2], known[1], media_type=_JSON)
        correlation_id = f"job-{uuid.uuid4().hex}"
        if "job" not in payload:
            envelope = Envelope(
                Outcome.DEFINED_FAILURE,
                correlation_id,
                error_code="MEANINGLESS_PAYLOAD",
                http_status=400,
            )
        else:
            envelope = Envelope(Outcome.SUCCEEDED, correlation_id, result={"echo": payload})
        status, body = _envelope(envelope)
        records[key] = (fingerprint, status, body)
        return Response(body, status, media_type=_JSON)

    @app.post(RECONCILIATIONS_PATH)
    async def reconcile(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        raw = await request.body()
        if len(raw) > 4096:
            return _problem(413, "Content Too Large", "request body too large")
        try:
            key = parse_reconciliation_request(raw)
        except ExecutionRequestError as exc:
            return _problem(400, "Bad Request", str(exc))
        known = records.get(key)
        if known is None:
            status, body = _envelope(
                Envelope(Outcome.RETRYABLE_BEFORE_ACCEPT, f"ans-{uuid.uuid4().hex}")
            )
            return Response(body, status, media_type=_JSON)
        return Response(known[2], known[1], media_type=_JSON)

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = create_app(os.environ["BENCH_PROVIDER_CREDENTIAL"])
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        backlog=BACKLOG,
    )


if __name__ == "__main__":
    main()
