"""Resolve keys a crash left accepted but not final (spec 3.2: accepted → final outcome)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool

from mercato.provider._execution import Handler, run_handler
from mercato.provider.blobs import BlobStore
from mercato.provider.store import IdempotencyStore

log = logging.getLogger("mercato.provider")


@dataclass(slots=True)
class RecoveryReport:
    """Keys finished by re-running the handler, and keys left UNKNOWN_OUTCOME for an operator."""

    resolved: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)


async def recover_accepted_async(
    store: IdempotencyStore,
    handler: Handler,
    *,
    idempotent: bool,
    blobs: BlobStore | None = None,
) -> RecoveryReport:
    """Async form of recover_accepted, for use inside a running event loop."""
    report = RecoveryReport()
    for record in await run_in_threadpool(store.list_accepted):
        if not idempotent:
            report.unresolved.append(record.key)
            continue
        try:
            payload = json.loads(record.payload)
            envelope = await run_handler(
                handler, payload, correlation_id=record.correlation_id, blobs=blobs
            )
            await run_in_threadpool(store.finish, key=record.key, envelope=envelope)
        except Exception:
            log.exception("recovery of an accepted key failed; it stays UNKNOWN_OUTCOME")
            report.unresolved.append(record.key)
        else:
            report.resolved.append(record.key)
    if report.unresolved:
        log.warning(
            "%d key(s) accepted without a final outcome need an operator: %s",
            len(report.unresolved),
            ", ".join(report.unresolved),
        )
    return report


def recover_accepted(
    store: IdempotencyStore,
    handler: Handler,
    *,
    idempotent: bool,
    blobs: BlobStore | None = None,
) -> RecoveryReport:
    """Re-run accepted keys when the handler is idempotent; otherwise only list them.

    Run it before serving (the app does so at startup) or from an operator's shell. A key that
    is still accepted answers UNKNOWN_OUTCOME, so the platform keeps reconciling until it is
    resolved here or by an operator with `store.finish(...)`.
    """
    work = recover_accepted_async(store, handler, idempotent=idempotent, blobs=blobs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    # Called from inside a running event loop (async code, a notebook): asyncio.run would refuse,
    # so run the recovery on its own loop in a helper thread and wait for it.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work).result()
