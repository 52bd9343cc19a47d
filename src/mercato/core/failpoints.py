"""Failpoints: named steps where a test may stop or interleave the platform.

Production code announces a step with `runtime.failpoints.hit(NAME)`; the production Runtime
carries `NO_FAILPOINTS`, which does nothing. Only a test or the simulation builds a Runtime with
another set: one that SIGKILLs the process (the crash suite's real `mercato serve`, built by
tests/support), or one that raises or runs an interleaving (the simulation). Nothing reads the
environment to switch them on.
"""

from __future__ import annotations

from typing import Protocol


class Failpoints(Protocol):
    def hit(self, point: str) -> None: ...


class NoFailpoints:
    """The production set: every point is a no-op."""

    def hit(self, point: str) -> None:
        return None


NO_FAILPOINTS = NoFailpoints()
