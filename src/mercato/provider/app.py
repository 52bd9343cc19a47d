"""The provider ASGI app: health probes, executions, reconciliations, artifacts (spec 4.2, 5.2)."""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mercato.protocol import (
    ARTIFACTS_PATH_PREFIX,
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
from mercato.provider._execution import Handler, new_correlation_id, run_handler
from mercato.provider.blobs import BlobStore, is_digest
from mercato.provider.recovery import recover_accepted_async
from mercato.provider.store import (
    IdempotencyStore,
    SqlIdempotencyStore,
    StoredRecord,
    StoreUnavailable,
    encode_envelope,
)

log = logging.getLogger("mercato.provider")

KEY_REUSED_CODE = "IDEMPOTENCY_KEY_REUSED"
ReadyCheck = Callable[[], bool | Awaitable[bool]]
DEFAULT_MAX_REQUEST_BYTES = 1_048_576


class _TooLarge(Exception):
    pass


def _problem(status: int, title: str, detail: str, **headers: str) -> Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(body, status, headers=headers, media_type="application/problem+json")


def _send(envelope: Envelope) -> Response:
    return Response(encode_envelope(envelope), envelope.status, media_type="application/json")


def _send_stored(record: StoredRecord) -> Response:
    if record.is_final and record.body is not None and record.http_status is not None:
        return Response(record.body, record.http_status, media_type="application/json")
    return _send(Envelope(Outcome.UNKNOWN_OUTCOME, record.correlation_id))


def _unknown(correlation_id: str | None = None) -> Response:
    return _send(Envelope(Outcome.UNKNOWN_OUTCOME, correlation_id or new_correlation_id("ans")))


def _valid_key(key: str | None) -> bool:
    return (
        key is not None
        and 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH
        and all("\x21" <= ch <= "\x7e" for ch in key)
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class _Provider:
    """The endpoints over one handler, credential, store and optional blob store."""

    def __init__(
        self,
        handler: Handler,
        *,
        credential: str,
        store: IdempotencyStore,
        blobs: BlobStore | None,
        ready_check: ReadyCheck | None,
        handler_idempotent: bool,
        max_request_bytes: int,
    ) -> None:
        self.handler = handler
        self._credential = credential.encode("ascii")
        self.store = store
        self.blobs = blobs
        self.ready_check = ready_check
        self.handler_idempotent = handler_idempotent
        self.max_request_bytes = max_request_bytes

    def _authorized(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        return hmac.compare_digest(given.strip().encode("latin-1"), self._credential)

    @staticmethod
    def _unauthorized() -> Response:
        return _problem(
            401, "Unauthorized", "credential missing or invalid", **{"WWW-Authenticate": "Bearer"}
        )

    async def live(self, request: Request) -> Response:
        return JSONResponse({"status": "live"})

    async def ready(self, request: Request) -> Response:
        problems: list[str] = []
        try:
            await run_in_threadpool(self.store.check)
        except Exception:
            problems.append("idempotency store unavailable")
        if self.blobs is not None:
            try:
                await run_in_threadpool(self.blobs.check)
            except Exception:
                problems.append("blob store unavailable")
        if self.ready_check is not None and not await self._run_ready_check():
            problems.append("provider dependency not ready")
        if problems:
            return JSONResponse({"status": "unready", "problems": problems}, 503)
        return JSONResponse({"status": "ready"})

    async def _run_ready_check(self) -> bool:
        assert self.ready_check is not None
        try:
            if inspect.iscoroutinefunction(self.ready_check):
                return bool(await self.ready_check())
            answer = await run_in_threadpool(self.ready_check)
            if inspect.isawaitable(answer):
                answer = await answer
            return bool(answer)
        except Exception:
            log.exception("ready_check raised")
            return False

    async def execute(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        try:
            raw = await _read_body(request, self.max_request_bytes)
        except _TooLarge:
            return _problem(413, "Content Too Large", "request body too large")
        try:
            payload, payload_bytes = parse_execution_request(raw)
        except ExecutionRequestError as exc:
            return _problem(400, "Bad Request", str(exc))
        key = request.headers.get(IDEMPOTENCY_KEY_HEADER)
        if not _valid_key(key):
            return _problem(400, "Bad Request", "Idempotency-Key must be 1-191 visible ASCII")
        assert key is not None
        fingerprint = hashlib.sha256(payload_bytes).hexdigest()
        correlation_id = new_correlation_id()
        try:
            record, created = await run_in_threadpool(
                lambda: self.store.accept(
                    key=key,
                    fingerprint=fingerprint,
                    payload=payload_bytes,
                    correlation_id=correlation_id,
                )
            )
        except Exception as exc:
            return await self._accept_failed(exc, key, fingerprint, correlation_id, payload)
        if not created:
            return self._answer_existing(record, fingerprint)
        return await self._run(record, payload)

    async def _accept_failed(
        self,
        error: Exception,
        key: str,
        fingerprint: str,
        correlation_id: str,
        payload: dict[str, Any],
    ) -> Response:
        """Answer after the accepted marker's write failed: read the key back to learn why.

        RETRYABLE_BEFORE_ACCEPT tells the platform the handler never started for this key, so
        it is sent only with proof: this write provably wrote nothing and a read after it finds
        no record (a write that wrote nothing says nothing of an earlier request with the key).
        A record that is this request's own marker (the write landed after all) runs the handler;
        another record answers as a replay; anything less certain is UNKNOWN_OUTCOME.
        """
        proved_nothing_written = isinstance(error, StoreUnavailable) and error.nothing_written
        log.warning("accepted marker not committed (%r); reading the key back", error)
        try:
            record = await run_in_threadpool(self.store.get, key)
        except Exception as exc:
            log.warning("the key cannot be read back (%r): UNKNOWN_OUTCOME", exc)
            return _unknown()
        if record is None:
            if proved_nothing_written:
                return _send(Envelope(Outcome.RETRYABLE_BEFORE_ACCEPT, new_correlation_id("ans")))
            return _unknown()
        if record.correlation_id == correlation_id and not record.is_final:
            return await self._run(record, payload)
        return self._answer_existing(record, fingerprint)

    @staticmethod
    def _answer_existing(record: StoredRecord, fingerprint: str) -> Response:
        if not hmac.compare_digest(record.fingerprint, fingerprint):
            return _send(
                Envelope(
                    Outcome.DEFINED_FAILURE,
                    new_correlation_id("ans"),
                    error_code=KEY_REUSED_CODE,
                    http_status=409,
                )
            )
        return _send_stored(record)

    async def _run(self, record: StoredRecord, payload: dict[str, Any]) -> Response:
        try:
            envelope = await run_handler(
                self.handler, payload, correlation_id=record.correlation_id, blobs=self.blobs
            )
        except Exception:
            log.exception("handler failed after acceptance; the key stays UNKNOWN_OUTCOME")
            return _unknown(record.correlation_id)
        try:
            stored = await run_in_threadpool(
                lambda: self.store.finish(key=record.key, envelope=envelope)
            )
        except Exception as exc:
            log.error("final outcome not committed (%r); the key stays UNKNOWN_OUTCOME", exc)
            return _unknown(record.correlation_id)
        return _send_stored(stored)

    async def reconcile(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        try:
            raw = await _read_body(request, 4096)
            key = parse_reconciliation_request(raw)
        except _TooLarge:
            return _problem(413, "Content Too Large", "request body too large")
        except ExecutionRequestError as exc:
            return _problem(400, "Bad Request", str(exc))
        try:
            record = await run_in_threadpool(self.store.get, key)
        except Exception as exc:
            log.warning("reconciliation could not read the store: %r", exc)
            return _unknown()
        if record is None:
            return _send(Envelope(Outcome.RETRYABLE_BEFORE_ACCEPT, new_correlation_id("ans")))
        return _send_stored(record)

    async def artifact(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        if "range" in request.headers:
            return _problem(416, "Range Not Satisfiable", "partial downloads are not supported")
        digest = request.path_params["digest"]
        assert self.blobs is not None
        if not is_digest(digest):
            return _problem(404, "Not Found", "no such artifact")
        try:
            data = await run_in_threadpool(self.blobs.get, digest)
        except OSError:
            log.exception("artifact %s could not be read", digest)
            return _problem(503, "Service Unavailable", "artifact store unavailable")
        if data is None:
            return _problem(404, "Not Found", "no such artifact")
        return Response(
            data, 200, media_type="application/octet-stream", headers={"ETag": f'"{digest}"'}
        )


def create_provider_app(
    handler: Handler,
    *,
    credential: str,
    store: IdempotencyStore | str,
    blobs: BlobStore | None = None,
    ready_check: ReadyCheck | None = None,
    handler_idempotent: bool = False,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> Starlette:
    """Build the four provider endpoints (plus artifacts when `blobs` is given) around `handler`.

    `handler(payload)` (sync or async) returns Success or DefinedFailure, or raises
    DefinedFailureError; any other exception answers UNKNOWN_OUTCOME. `store` is an
    IdempotencyStore or a URL/path for SqlIdempotencyStore. At startup, keys left accepted by a
    crash are re-run when `handler_idempotent`, else listed in the log for an operator.
    """
    if not credential or not all("\x21" <= ch <= "\x7e" for ch in credential):
        raise ValueError("credential must be a non-empty string of visible ASCII characters")
    if max_request_bytes < 1:
        raise ValueError("max_request_bytes must be positive")
    owned = isinstance(store, str)
    the_store: IdempotencyStore = SqlIdempotencyStore(store) if isinstance(store, str) else store
    provider = _Provider(
        handler,
        credential=credential,
        store=the_store,
        blobs=blobs,
        ready_check=ready_check,
        handler_idempotent=handler_idempotent,
        max_request_bytes=max_request_bytes,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await recover_accepted_async(
                the_store, handler, idempotent=handler_idempotent, blobs=blobs
            )
        except StoreUnavailable as exc:
            log.error("startup recovery skipped, store unavailable: %s", exc)
        yield
        if owned and isinstance(the_store, SqlIdempotencyStore):
            the_store.close()

    routes = [
        Route(HEALTH_LIVE_PATH, provider.live, methods=["GET"]),
        Route(HEALTH_READY_PATH, provider.ready, methods=["GET"]),
        Route(EXECUTIONS_PATH, provider.execute, methods=["POST"]),
        Route(RECONCILIATIONS_PATH, provider.reconcile, methods=["POST"]),
    ]
    if blobs is not None:
        routes.append(Route(ARTIFACTS_PATH_PREFIX + "{digest}", provider.artifact, methods=["GET"]))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.provider_store = the_store
    return app
