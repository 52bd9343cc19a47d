"""Failpoints: named steps where a test may stop or interleave the platform.

Production code announces a step with `runtime.armed.hit(NAME)` when the Runtime's set is armed
(`runtime.armed`: None for `NO_FAILPOINTS`, the production Runtime's, which does nothing, so its
points are skipped rather than called). Only a test or the simulation builds a Runtime with
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
