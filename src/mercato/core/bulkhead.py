"""Bulkheads: the provider calls one process keeps in flight, per connection and in all.

DESIGN §7 (decisions 0510-0514). A slot is taken before a call's acceptance (or before a
worker step contacts the provider) and given back when the call is concluded, parked or
refused. Taking never waits: a full connection, or a full process, is an answer at once
(`PROVIDER_BUSY` on the invoke path, a short re-park in the worker), so no call ever queues
behind a slot that another provider holds. In memory only: the counts are this process's,
a plain counter per connection (no database round trip on the invoke path).
"""

from __future__ import annotations

import threading


class Bulkhead:
    """Counts of provider calls in flight in this process, bounded per connection and in all."""

    __slots__ = ("_counts", "_lock", "_total", "per_connection", "process")

    def __init__(self, *, per_connection: int, process: int) -> None:
        self.per_connection = per_connection
        """A connection's bound when it sets none of its own (`MERCATO_PROVIDER_MAX_IN_FLIGHT`)."""
        self.process = process
        """The bound over every connection (`MERCATO_MAX_IN_FLIGHT`)."""
        self._counts: dict[str, int] = {}
        self._total = 0
        # The invoke path takes slots on one event loop; a test or the worker may share one
        # Runtime across loops in threads, and an uncontended lock costs next to nothing.
        self._lock = threading.Lock()

    def limit_of(self, own: int | None) -> int:
        """A connection's bound: its own `maxInFlight`, else the process's default."""
        return self.per_connection if own is None else own

    def take(self, connection_id: str, own: int | None) -> bool:
        """Take a slot for a call to `connection_id` (its own bound `own`); False when its
        connection or the process is full (nothing taken then)."""
        with self._lock:
            held = self._counts.get(connection_id, 0)
            if held >= self.limit_of(own) or self._total >= self.process:
                return False
            self._counts[connection_id] = held + 1
            self._total += 1
            return True

    def give_back(self, connection_id: str) -> None:
        """Give back a slot `take` gave for `connection_id`."""
        with self._lock:
            held = self._counts.get(connection_id, 0)
            if held <= 0:
                raise RuntimeError(f"no slot of {connection_id} is held")
            if held == 1:
                del self._counts[connection_id]
            else:
                self._counts[connection_id] = held - 1
            self._total -= 1

    def in_flight(self, connection_id: str | None = None) -> int:
        """Slots held now: of one connection, or (None) in all."""
        with self._lock:
            if connection_id is None:
                return self._total
            return self._counts.get(connection_id, 0)
