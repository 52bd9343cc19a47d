"""The driver: one seeded RNG picks every step, fault and interleaving; checks run after each.

Steps call the real platform on one event loop: invokes and replays go through the ASGI app
(an httpx.AsyncClient over ASGITransport, API-key auth, the invoke route, the async engine),
background work through the worker's `await run_once(runtime)`. "Concurrent" work is
interleaved deterministically at the interesting moment, while a provider call is in flight
(awaited inside the simulated provider client's call, before its answer is delivered) or just
before the acceptance transaction (the `before-accept` failpoint of the world's Runtime, run
before the accept transaction opens). Nothing runs beside the driver: every interleaving is
awaited in sequence, so the same seed always gives the same schedule.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from builders.event_loops import run_on_fresh_loop
from mercato.invocations import service as invocations
from mercato.invocations.failpoints import BEFORE_ACCEPT, CRASH_POINTS
from mercato.ledger import service as ledger
from mercato.quotas import service as quotas
from mercato.worker.loops import run_once
from support.simulation import bugs
from support.simulation.checks import Checker
from support.simulation.provider import Knobs
from support.simulation.trace import Recorder, Violation
from support.simulation.world import (
    SERVICE,
    START,
    VERSIONS,
    Crasher,
    Patcher,
    SimulatedCrash,
    build_world,
    logged_errors,
)

POINTS = CRASH_POINTS
_TERMINAL_CODES = {
    422: {"PROVIDER_DEFINED_FAILURE"},
    502: {"PROVIDER_CONTRACT_VIOLATION", "PROVIDER_UNAVAILABLE"},
}
_PRICES = {label: price for label, price, _ in VERSIONS}


@dataclass
class KeyState:
    caller: int
    key: str
    version: str
    body: bytes
    invocation_id: str | None = None
    stored: tuple[int, bytes] | None = None

    @property
    def subject(self) -> str:
        return f"mercato:{self.invocation_id}" if self.invocation_id else self.key


@dataclass
class Verdict:
    """The verdict of one run."""

    seed: int
    steps: int
    steps_run: int
    backend: str
    bug: str | None
    violations: list[Violation]
    seconds: float
    stats: dict[str, int]
    trace: list[str]
    failure_trace: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations


class Simulation:
    def __init__(
        self, *, seed: int, steps: int, database_url: str, data_dir: Path, bug: str | None
    ) -> None:
        from mercato.core.clock import FakeClock

        self.seed, self.steps, self.bug = seed, steps, bug
        self.rng = random.Random(seed)
        self.recorder = Recorder()
        self.clock = FakeClock(START)
        self.crasher = Crasher(self.recorder)
        self.patcher = Patcher()
        self.database_url, self.data_dir = database_url, data_dir
        self.keys: list[KeyState] = []
        self.stats: Counter[str] = Counter()
        self.plan: str | None = None
        self.plan_key: KeyState | None = None
        self.nesting = False
        self.counter = 0

    # --- running ---------------------------------------------------------------------------

    def run(self, *, quiesce_every: int = 250) -> Verdict:
        """Run on an event loop of its own (one loop for the whole run)."""
        return run_on_fresh_loop(self.arun(quiesce_every=quiesce_every))

    async def arun(self, *, quiesce_every: int = 250) -> Verdict:
        started = time.monotonic()
        steps_run = 0
        with logged_errors(self._logged_error):
            world = build_world(
                self.database_url,
                self.data_dir,
                self.clock,
                self.recorder,
                self.rng,
                failpoints=self.crasher,
                seed=self.seed,
            )
            self.world = world
            self.checker = Checker(world, self.recorder)
            world.provider.in_flight_hook = self._in_flight
            try:
                async with world:
                    if self.bug is not None:
                        bugs.inject(self.bug, self.patcher, world.runtime)
                    for step in range(1, self.steps + 1):
                        await self._one_step(step)
                        steps_run = step
                        if not self.recorder.violations and (
                            step % quiesce_every == 0 or step == self.steps
                        ):
                            await self.quiesce()
                        if self.recorder.violations:
                            break
            finally:
                self.patcher.undo()
        first = self.recorder.violations[0] if self.recorder.violations else None
        return Verdict(
            seed=self.seed,
            steps=self.steps,
            steps_run=steps_run,
            backend=self.database_url.split(":", 1)[0].split("+", 1)[0],
            bug=self.bug,
            violations=list(self.recorder.violations),
            seconds=round(time.monotonic() - started, 2),
            stats=dict(sorted(self.stats.items())),
            trace=self.recorder.lines(),
            failure_trace=self.recorder.minimal_trace(first) if first else [],
        )

    async def _one_step(self, step: int) -> None:
        self.recorder.step = step
        since = self.clock.now()
        self.clock.advance(self.rng.uniform(0.05, 2.0))
        provider = self.world.provider
        if provider.down and self.rng.random() < 0.4:
            provider.down = False
            self.recorder.note("provider: reachable again")
        if provider.unsure and self.rng.random() < 0.3:
            provider.unsure = False
            self.recorder.note("provider: storage usable again")
        actions: list[tuple[int, Callable[[], Awaitable[None]]]] = [
            (30, self.step_invoke),
            (4, self.step_accept_race),
            (14, self.step_replay),
            (3, self.step_reuse_key),
            (3, self.step_invalid_then_valid),
            (16, self.step_worker),
            (5, self.step_clock),
            (9, self.step_provider),
            (2, self.step_grant),
        ]
        action = self.rng.choices([a for _, a in actions], [w for w, _ in actions])[0]
        try:
            await action()
        finally:
            self.crasher.armed.clear()
            self.crasher.interleave.clear()
            self.crasher.due.clear()
            self.plan, self.plan_key = None, None
        self.checker.after_step(since)

    async def quiesce(self) -> None:
        """Heal the provider, let running jobs finish, and work until nothing is left."""
        provider = self.world.provider
        saved = provider.knobs
        provider.knobs = Knobs(0, 0, 0, 0, 0, 0, saved.invalid_result, saved.defined)
        provider.down, provider.unsure, provider.streak_503 = False, False, 0
        provider.finish_some(1.0)
        self.recorder.note("quiescence: provider healthy, running jobs finished")
        try:
            for _ in range(40):
                since = self.clock.now()
                self.clock.advance(900)
                done = await self._worker_pass()
                self.checker.after_step(since)
                if done == 0:
                    break
            self.checker.at_quiescence()
            self.stats["quiescences"] += 1
        finally:
            provider.knobs = saved

    # --- steps -----------------------------------------------------------------------------

    def _new_key(self, caller: int | None = None) -> KeyState:
        self.counter += 1
        index = self.rng.randrange(len(self.world.callers)) if caller is None else caller
        version = self.rng.choice([label for label, _, _ in VERSIONS])
        body = orjson.dumps({"n": self.rng.randrange(10_000)})
        name = f"{self.world.callers[index].name}-k{self.counter}"
        return KeyState(index, name, version, body)

    async def step_invoke(self) -> None:
        ks = self._new_key()
        if self.rng.random() < 0.1:
            point = self.rng.choice(POINTS)
            self.crasher.armed.add(point)
            self.recorder.note(f"arm crash at {point}", ks.key)
        if self.rng.random() < 0.3:
            self.plan = self.rng.choice(
                ["duplicate", "takeover", "other-call", "clock", "restart-keep", "restart-lose"]
            )
            self.plan_key = ks
        await self._fresh(ks)

    async def step_accept_race(self) -> None:
        ks = self._new_key()

        async def racing() -> None:
            self.recorder.note("race: same key arrives before the first is accepted", ks.key)
            self.nesting = True
            try:
                await self._fresh(ks)
            finally:
                self.nesting = False

        self.crasher.interleave[BEFORE_ACCEPT] = racing
        await self._send(ks, ks.body, "twin", label="twin")

    async def step_replay(self) -> None:
        known = [k for k in self.keys if k.invocation_id is not None]
        if known:
            await self._send(self.rng.choice(known), None, "replay", label="replay")

    async def step_reuse_key(self) -> None:
        known = [k for k in self.keys if k.invocation_id is not None]
        if known:
            ks = self.rng.choice(known)
            other = orjson.dumps({"n": orjson.loads(ks.body)["n"] + 1})
            await self._send(ks, other, "reuse", label="same key, other body")

    async def step_invalid_then_valid(self) -> None:
        ks = self._new_key()
        await self._send(ks, b'{"n": "not a number"}', "invalid", label="invalid body")
        await self._fresh(ks)

    async def step_worker(self) -> None:
        self.clock.advance(self.rng.uniform(0, 90))
        if self.rng.random() < 0.1:
            point = self.rng.choice(POINTS)
            self.crasher.armed.add(point)
            self.recorder.note(f"arm crash at {point} (worker)")
        if self.rng.random() < 0.2:
            self.plan = self.rng.choice(["other-call", "clock", "restart-keep", "restart-lose"])
        done = await self._worker_pass()
        self.stats["worker_items"] += done
        self.recorder.note(f"worker pass: {done} item(s)")

    async def step_clock(self) -> None:
        seconds = self.rng.choice([self.rng.uniform(30, 120), self.rng.uniform(120, 900)])
        self.clock.advance(seconds)
        self.recorder.note(f"clock jumps {seconds:.0f}s")

    async def step_provider(self) -> None:
        provider = self.world.provider
        kind = self.rng.choice(
            ["down", "unsure", "503-streak", "restart-keep", "restart-lose", "finish", "finish"]
        )
        if kind == "down":
            provider.down = True
        elif kind == "unsure":
            provider.unsure = True
        elif kind == "503-streak":
            provider.streak_503 = self.rng.randint(1, 6)
        elif kind.startswith("restart"):
            self._restart(lose=kind == "restart-lose")
            return
        else:
            done = provider.finish_some(0.5)
            self.recorder.note(f"provider: {len(done)} running job(s) finished", *done)
            return
        self.recorder.note(f"provider: {kind} (streak {provider.streak_503})")

    async def step_grant(self) -> None:
        caller = self.world.callers[self.rng.randrange(len(self.world.callers))]
        amount = self.rng.randint(20, 200)
        with self.world.runtime.db.transaction() as session:
            ledger.grant(session, account_id=caller.account_id, amount=amount, now=self.clock.now())
        caller.granted += amount
        self.world.issued += amount
        self.recorder.note(f"grant {amount} to {caller.name}", caller.name)

    def _restart(self, *, lose: bool) -> None:
        lost = self.world.provider.restart(lose_in_flight=lose)
        what = f"lost {len(lost)} unfinished record(s)" if lose else "kept every record"
        self.recorder.note(f"provider: restart, {what}", *lost)

    # --- interleaving while a provider call is in flight -----------------------------------

    async def _in_flight(self, kind: str, key: str) -> bool:
        """Run the step's planned interleaving; True breaks the in-flight connection."""
        if self.nesting or self.plan is None:
            return False
        plan, ks = self.plan, self.plan_key
        self.plan, self.nesting = None, True
        self.recorder.note(f"while {kind} {key} is in flight: {plan}", key)
        try:
            if plan == "duplicate" and ks is not None:
                await self._send(ks, ks.body, "replay", label="concurrent duplicate")
            elif plan == "takeover":
                self.clock.advance(self.rng.uniform(31, 90))
                done = await self._worker_pass()
                self.recorder.note(f"lease expired; another worker pass: {done} item(s)", key)
            elif plan == "other-call":
                await self._fresh(self._new_key())
            elif plan == "clock":
                self.clock.advance(self.rng.uniform(1, 100))
            elif plan.startswith("restart"):
                self._restart(lose=plan == "restart-lose")
                return True
        finally:
            self.nesting = False
        return False

    async def _worker_pass(self) -> int:
        """One pass of every worker loop, as `mercato worker` runs it."""
        return await run_once(self.world.runtime)

    # --- calling the platform and judging its answers --------------------------------------

    async def _fresh(self, ks: KeyState) -> None:
        self.keys.append(ks)
        await self._send(ks, ks.body, "fresh", label="invoke")

    async def _send(self, ks: KeyState, body: bytes | None, mode: str, *, label: str) -> None:
        caller = self.world.callers[ks.caller]
        sent = ks.body if body is None else body
        before = self._exchanges()
        try:
            response: httpx.Response | None = await self.world.http.post(
                f"/v1/services/{SERVICE}/versions/{ks.version}:invoke",
                content=sent,
                headers={
                    "Authorization": f"Bearer {caller.api_key}",
                    "Idempotency-Key": ks.key,
                    "Content-Type": "application/json",
                },
            )
        except SimulatedCrash:
            response = None
        except Exception as exc:
            self.recorder.violate("platform-error", f"{label} {ks.key}: {exc!r}", ks.subject)
            response = None
        self._link(ks)
        if response is None:
            self.stats["answers_lost_to_crash"] += 1
            self.recorder.note(f"{label} {ks.key} ({ks.version}): no answer", ks.subject, ks.key)
            return
        status = response.status_code
        doc = _json(response.content)
        code = doc.get("code") if isinstance(doc, dict) else None
        self.stats[f"answer_{status}"] += 1
        self.recorder.note(
            f"{label} {ks.key} ({ks.version}) → {status} {code or ''}".rstrip(),
            ks.subject,
            ks.key,
        )
        if mode in ("replay", "reuse") and self._exchanges() != before:
            self.recorder.violate("replay-sends-nothing", f"{label} {ks.key} reached the provider")
        self._judge(ks, mode, status, code, response.content, doc)

    def _judge(self, ks: KeyState, mode: str, status: int, code: Any, raw: bytes, doc: Any) -> None:
        subject = ks.subject
        terminal = status == 200 or code in _TERMINAL_CODES.get(status, set())
        if mode == "invalid":
            if (status, code) != (422, "REQUEST_SCHEMA_VIOLATION"):
                self.recorder.violate("unexpected-answer", f"invalid body → {status}", subject)
            return
        if mode == "reuse":
            if (status, code) != (422, "IDEMPOTENCY_KEY_REUSED"):
                self.recorder.violate("unexpected-answer", f"other body → {status}", subject)
            return
        if terminal:
            if ks.stored is None:
                ks.stored = (status, raw)
                self._check_truth(ks, status, doc)
            elif ks.stored != (status, raw):
                self.recorder.violate(
                    "replay-returns-stored-answer",
                    f"{ks.key} answered {status} {raw[:120]!r}, first {ks.stored[0]} "
                    f"{ks.stored[1][:120]!r}",
                    subject,
                )
            return
        if ks.stored is not None:
            self.recorder.violate(
                "replay-returns-stored-answer",
                f"{ks.key} answered {status} {code} after its stored {ks.stored[0]}",
                subject,
            )
            return
        if status == 202 or (status == 409 and code == "IDEMPOTENCY_KEY_IN_USE"):
            if status == 409 and mode == "fresh" and not self.nesting:
                self.recorder.violate("unexpected-answer", f"{ks.key}: 409 for a new key", subject)
            return
        if status == 429 and mode in ("fresh", "twin"):
            self._check_quota_full(ks)
            return
        if status == 402 and mode in ("fresh", "twin"):
            self._check_points_short(ks)
            return
        self.recorder.violate("unexpected-answer", f"{ks.key} ({mode}) → {status} {code}", subject)

    def _check_truth(self, ks: KeyState, status: int, doc: Any) -> None:
        """A first final answer agrees with what the provider holds for the call's key."""
        record = self.world.provider.records.get(ks.subject)
        if status == 200:
            if record is None or not record.charged_ok:
                self.recorder.violate(
                    "answer-matches-provider", f"{ks.key}: 200 without provider success", ks.subject
                )
            elif record.final is not None and doc.get("result") != record.final[1].get("result"):
                self.recorder.violate("answer-matches-provider", f"{ks.key}: result", ks.subject)
        elif record is not None and record.charged_ok:
            self.recorder.violate(
                "answer-matches-provider", f"{ks.key}: {status} but provider succeeded", ks.subject
            )

    def _check_quota_full(self, ks: KeyState) -> None:
        caller = self.world.callers[ks.caller]
        runtime = self.world.runtime
        with runtime.db.read() as session:
            status = quotas.current_status(
                session,
                account_id=caller.account_id,
                settings=runtime.settings,
                now=self.clock.now(),
            )
        if status.accepted < status.limit:
            self.recorder.violate(
                "quota-counts-accepted-intents",
                f"{ks.key}: 429 with {status.accepted}/{status.limit} accepted",
                caller.name,
            )

    def _check_points_short(self, ks: KeyState) -> None:
        caller = self.world.callers[ks.caller]
        with self.world.runtime.db.read() as session:
            available = ledger.balances(session, account_id=caller.account_id).available
        if available >= _PRICES[ks.version]:
            self.recorder.violate(
                "unexpected-answer", f"{ks.key}: 402 with {available} available", caller.name
            )

    def _link(self, ks: KeyState) -> None:
        if ks.invocation_id is not None:
            return
        caller = self.world.callers[ks.caller]
        with self.world.runtime.db.read() as session:
            view = invocations.find_by_key(
                session, account_id=caller.account_id, idempotency_key=ks.key
            )
        if view is not None:
            ks.invocation_id = view.invocation_id
            self.recorder.note(f"{ks.key} is mercato:{view.invocation_id}", ks.subject, ks.key)

    def _exchanges(self) -> int:
        return sum(len(v) for v in self.world.provider.exchanges.values())

    def _logged_error(self, exc: BaseException) -> None:
        if isinstance(exc, SimulatedCrash):
            return
        self.recorder.violate("platform-error", f"logged {exc!r}")


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
