"""The refund loop: retry approved disputes whose refund could not post yet (DESIGN.md §2)."""

from __future__ import annotations

import logging

from mercato.cases import service as cases
from mercato.db.runtime import Runtime

log = logging.getLogger("mercato.worker")

BATCH = 20


def run_once(runtime: Runtime) -> int:
    """Try each due refund once, one transaction per case; return how many were tried."""
    done = 0
    for _ in range(BATCH):
        try:
            with runtime.db.transaction() as session:
                now = runtime.clock.now()
                due = cases.due_refunds(session, now=now, limit=1)
                if not due:
                    break
                result = cases.attempt_refund(session, case_id=due[0], now=now)
        except Exception:
            # Rolled back, nothing half-posted; the next pass tries again.
            log.exception("refund pass failed")
            break
        log.info("case %s: refund %s", due[0], result.value)
        done += 1
    return done
