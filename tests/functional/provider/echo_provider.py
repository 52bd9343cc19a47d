"""A small SDK provider run as a real process by the functional tests.

    python echo_provider.py --port P --store URL --counter FILE [--blobs DIR] [--idempotent]
                            [--hold-until FILE] [--strict] [--crash-after-accept]

The credential comes from ECHO_PROVIDER_CREDENTIAL. Every handler run appends one line to the
counter file, so tests can count executions across processes. With `--crash-after-accept` the
process SIGKILLs itself once a new key's accepted marker is committed, before the handler runs
(the SDK reads no switch for this: the test wraps the store it hands to the SDK).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mercato.provider import (
    Artifact,
    BlobStore,
    DefinedFailure,
    LocalBlobStore,
    SqlIdempotencyStore,
    StoredRecord,
    Success,
    create_provider_app,
    serve_provider,
)


def make_handler(
    counter: Path,
    *,
    blobs: BlobStore | None = None,
    hold_until: Path | None = None,
    strict: bool = False,
) -> Callable[[dict[str, Any]], Success | DefinedFailure]:
    """Echo the payload; `{"fail": CODE}` is a defined failure; `{"artifact": text}` stores one.

    With `strict`, a payload without a `job` member is meaningless: DefinedFailure 400.
    """

    def handler(payload: dict[str, Any]) -> Success | DefinedFailure:
        with counter.open("a") as handle:
            handle.write("run\n")
            handle.flush()
            os.fsync(handle.fileno())
        if hold_until is not None:
            deadline = time.monotonic() + 60
            while not hold_until.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the test never released the handler")
                time.sleep(0.01)
        if strict and "job" not in payload:
            return DefinedFailure("MEANINGLESS_PAYLOAD", 400)
        if "fail" in payload:
            return DefinedFailure(str(payload["fail"])[:64] or "FAILED", 422)
        artifacts = []
        if blobs is not None and "artifact" in payload:
            data = str(payload["artifact"]).encode()
            artifacts.append(Artifact.put(blobs, data, media_type="text/plain", artifact_id="a1"))
        return Success({"echo": payload}, artifacts=artifacts)

    return handler


class CrashAfterAccept(SqlIdempotencyStore):
    """The SDK's store, except that committing a new accepted marker kills the process."""

    def accept(
        self, *, key: str, fingerprint: str, payload: bytes, correlation_id: str
    ) -> tuple[StoredRecord, bool]:
        record, created = super().accept(
            key=key, fingerprint=fingerprint, payload=payload, correlation_id=correlation_id
        )
        if created:
            os.kill(os.getpid(), signal.SIGKILL)
        return record, created


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--counter", type=Path, required=True)
    parser.add_argument("--blobs", type=Path)
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--hold-until", type=Path)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--crash-after-accept", action="store_true")
    args = parser.parse_args()
    blobs = LocalBlobStore(args.blobs) if args.blobs else None
    app = create_provider_app(
        make_handler(args.counter, blobs=blobs, hold_until=args.hold_until, strict=args.strict),
        credential=os.environ["ECHO_PROVIDER_CREDENTIAL"],
        store=CrashAfterAccept(args.store) if args.crash_after_accept else args.store,
        blobs=blobs,
        handler_idempotent=args.idempotent,
    )
    serve_provider(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
