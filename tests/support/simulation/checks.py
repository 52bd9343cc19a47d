"""The invariants, read from the platform's database and the simulated provider's records.

After every step: the ledger verifies and equals the points issued; every caller's available,
reserved and spent points equal what its invocations say; a call is charged only if the
provider holds SUCCEEDED with a contract-valid result for its key, and a released call never
has one; each quota window counts exactly the call intents accepted in it. At quiescence also:
nothing is pending, no reservation is held, and every provider success is charged.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mercato.invocations.models import Invocation
from mercato.invocations.schemas import ACTIVE_STATES
from mercato.ledger import service as ledger
from mercato.ledger.models import Reservation
from mercato.quotas import service as quotas
from mercato.quotas.models import QuotaWindow
from mercato.quotas.schemas import Policy
from support.simulation.provider import Record
from support.simulation.trace import Recorder
from support.simulation.world import World

_RESERVATION_FOR = {"PENDING": "HELD", "SETTLED": "SETTLED", "RELEASED": "RELEASED"}
_SETTLEMENT_FOR = {"SUCCEEDED": "SETTLED", "FAILED": "RELEASED"}


@dataclass(frozen=True, slots=True)
class Row:
    invocation_id: str
    account_id: str
    provider_key: str
    state: str
    settlement: str
    result: bytes | None
    reservation_state: str


class Checker:
    def __init__(self, world: World, recorder: Recorder) -> None:
        self.world = world
        self.recorder = recorder
        self._policies: list[Policy] | None = None

    def after_step(self, since: dt.datetime) -> None:
        with self.world.runtime.db.read() as session:
            self._ledger(session)
            self._accounting(session)
            self._quotas(session)
            for row in self._rows(session, since=since):
                self._row(row, final=False)

    def at_quiescence(self) -> None:
        with self.world.runtime.db.read() as session:
            self._ledger(session)
            self._accounting(session)
            self._quotas(session)
            rows = self._rows(session, since=None)
        by_key = {row.provider_key: row for row in rows}
        for row in rows:
            self._row(row, final=True)
        for key, record in self.world.provider.records.items():
            if key not in by_key:
                self.recorder.violate("provider-keys-known", f"provider holds {key} unknown", key)
            elif record.charged_ok and by_key[key].settlement != "SETTLED":
                self.recorder.violate(
                    "charged-when-provider-succeeded",
                    f"provider holds SUCCEEDED for {key} but the call is "
                    f"{by_key[key].state}/{by_key[key].settlement} at quiescence",
                    key,
                )

    # --- ledger ----------------------------------------------------------------------------

    def _ledger(self, session: Session) -> None:
        report = ledger.verify(session)
        if not report.balanced:
            self.recorder.violate("ledger-balanced", "; ".join(report.problems[:3]))
        if report.issued != self.world.issued:
            self.recorder.violate(
                "ledger-equals-issued",
                f"ledger says {report.issued} issued, the simulation granted {self.world.issued}",
            )

    def _accounting(self, session: Session) -> None:
        sums: dict[tuple[str, str], int] = defaultdict(int)
        earned = 0
        for account_id, settlement, price, bps, count in session.execute(
            select(
                Invocation.account_id,
                Invocation.settlement,
                Invocation.price,
                Invocation.provider_share_bps,
                func.count(),
            ).group_by(
                Invocation.account_id,
                Invocation.settlement,
                Invocation.price,
                Invocation.provider_share_bps,
            )
        ).tuples():
            sums[(account_id, settlement)] += price * count
            if settlement == "SETTLED":
                earned += (price * bps // 10_000) * count
        # The ledger's own exact reads: reserved is the HELD reservations, earnings are folded
        # plus not folded yet (decision 0595).
        for caller in self.world.callers:
            held = sums[(caller.account_id, "PENDING")]
            spent = sums[(caller.account_id, "SETTLED")]
            mine = ledger.balances(session, account_id=caller.account_id)
            have = (mine.available, mine.reserved)
            want = (caller.granted - held - spent, held)
            if have != want:
                self.recorder.violate(
                    "caller-points-match-calls",
                    f"{caller.name} has available/reserved {have[0]}/{have[1]}, "
                    f"its calls say {want[0]}/{want[1]}",
                    caller.name,
                )
            if min(have) < 0:
                self.recorder.violate("no-negative-balance", f"{caller.name}: {have}", caller.name)
        earnings = ledger.balances(session, account_id=self.world.provider_account_id).earnings
        if earnings != earned:
            self.recorder.violate(
                "provider-earnings-match-calls",
                f"provider earned {earnings}, settled calls say {earned}",
            )

    # --- quotas ----------------------------------------------------------------------------

    def _quotas(self, session: Session) -> None:
        now = self.world.clock.now()
        if self._policies is None:
            default = quotas.default_policy(self.world.runtime.settings)
            self._policies = [
                quotas.policy_for(session, account_id=c.account_id, default=default)
                for c in self.world.callers
            ]
        windows = {
            account_id: (start, accepted)
            for account_id, start, accepted in session.execute(
                select(QuotaWindow.account_id, QuotaWindow.window_start, QuotaWindow.accepted)
            ).tuples()
        }
        starts = [_window_start(p.window_seconds, now) for p in self._policies]
        earliest = dt.datetime.fromtimestamp(min(starts), dt.UTC)
        recent: dict[str, list[float]] = defaultdict(list)
        for account_id, created_at in session.execute(
            select(Invocation.account_id, Invocation.created_at).where(
                Invocation.created_at >= earliest
            )
        ).tuples():
            recent[account_id].append(created_at.timestamp())
        for caller, policy, start in zip(self.world.callers, self._policies, starts, strict=True):
            window = windows.get(caller.account_id)
            counted = window[1] if window is not None and window[0] == start else 0
            accepted = sum(1 for t in recent[caller.account_id] if t >= start)
            if counted != accepted or accepted > policy.limit:
                self.recorder.violate(
                    "quota-counts-accepted-intents",
                    f"{caller.name}: the window from {start} counts {counted}, "
                    f"{accepted} calls were accepted in it (limit {policy.limit})",
                    caller.name,
                )

    # --- per invocation --------------------------------------------------------------------

    def _rows(self, session: Session, *, since: dt.datetime | None) -> list[Row]:
        query = select(
            Invocation.id,
            Invocation.account_id,
            Invocation.provider_key,
            Invocation.state,
            Invocation.settlement,
            Invocation.result,
            Reservation.state,
        ).join(Reservation, Reservation.reference == Invocation.id, isouter=True)
        if since is not None:
            query = query.where(Invocation.updated_at >= since)
        return [Row(*r) for r in session.execute(query.order_by(Invocation.id)).tuples()]

    def _row(self, row: Row, *, final: bool) -> None:
        key = row.provider_key
        if row.reservation_state != _RESERVATION_FOR.get(row.settlement):
            self.recorder.violate(
                "reservation-follows-call",
                f"{key} is {row.settlement} but its reservation is {row.reservation_state}",
                key,
            )
        active = row.state in {s.value for s in ACTIVE_STATES}
        if _SETTLEMENT_FOR.get(row.state, "PENDING") != row.settlement:
            self.recorder.violate("state-matches-settlement", f"{key}: {row}", key)
        if final and active:
            self.recorder.violate(
                "reservations-resolve",
                f"{key} still {row.state} with its reservation held at quiescence",
                key,
            )
        record = self.world.provider.records.get(key)
        if row.settlement == "SETTLED":
            if record is None or not record.charged_ok:
                self.recorder.violate(
                    "charged-only-if-provider-succeeded",
                    f"{key} charged; provider holds {_describe(record)}",
                    key,
                )
            elif row.result is None or orjson.loads(row.result) != _result(record):
                self.recorder.violate(
                    "stored-result-is-providers", f"{key} stored a different result", key
                )
        elif row.settlement == "RELEASED" and record is not None and record.charged_ok:
            self.recorder.violate(
                "charged-when-provider-succeeded",
                f"{key} released although the provider holds SUCCEEDED",
                key,
            )


def _window_start(window_seconds: int, now: dt.datetime) -> int:
    epoch = int(now.timestamp())
    return epoch - epoch % window_seconds


def _result(record: Record) -> Any:
    assert record.final is not None
    return record.final[1].get("result")


def _describe(record: Record | None) -> str:
    if record is None:
        return "no record"
    if record.final is None:
        return "an accepted, unfinished record"
    return f"{record.final[0]} {record.final[1]['outcome']} {record.final[1].get('result')}"
