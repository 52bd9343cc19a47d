"""Run a handler and turn what it returns into an envelope; shared by the app and recovery."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from mercato.protocol import Envelope, Outcome
from mercato.provider.blobs import BlobStore
from mercato.provider.outcomes import DefinedFailure, DefinedFailureError, Success
from mercato.provider.store import encode_envelope

HandlerResult = Success | DefinedFailure
Handler = Callable[[dict[str, Any]], HandlerResult | Awaitable[HandlerResult]]


class HandlerContractError(Exception):
    """The handler returned something the SDK cannot send; treated as an unknown outcome."""


def new_correlation_id(prefix: str = "job") -> str:
    """Return a fresh provider-side identifier."""
    return f"{prefix}-{uuid.uuid4().hex}"


async def call_handler(handler: Handler, payload: dict[str, Any]) -> HandlerResult:
    """Call a sync handler in a worker thread or await an async one."""
    try:
        if inspect.iscoroutinefunction(handler):
            returned: Any = await handler(payload)
        else:
            returned = await run_in_threadpool(handler, payload)
            if inspect.isawaitable(returned):
                returned = await returned
    except DefinedFailureError as exc:
        return exc.failure
    return returned  # type: ignore[no-any-return]


async def run_handler(
    handler: Handler,
    payload: dict[str, Any],
    *,
    correlation_id: str,
    blobs: BlobStore | None,
) -> Envelope:
    """Run the handler and return the final envelope; any exception means the outcome is unknown."""
    returned = await call_handler(handler, payload)
    if isinstance(returned, DefinedFailure):
        envelope = Envelope(
            Outcome.DEFINED_FAILURE,
            correlation_id,
            error_code=returned.error_code,
            http_status=returned.http_status,
        )
    elif isinstance(returned, Success):
        for artifact in returned.artifacts:
            if blobs is None or not blobs.has(artifact.digest):
                raise HandlerContractError(
                    f"artifact {artifact.artifact_id} is not in the blob store"
                )
        envelope = Envelope(Outcome.SUCCEEDED, correlation_id, result=returned.result_json())
    else:
        raise HandlerContractError(
            f"handler returned {type(returned).__name__}, not Success or DefinedFailure"
        )
    encode_envelope(envelope)  # a result that is not JSON must fail here, before anything is stored
    return envelope
