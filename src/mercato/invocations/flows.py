"""The invocation engine: accept (tx) → call the provider (no tx) → settle or release (tx).

Async end to end (issue 20): every read and write is a plan (`mercato.db.plans`) run on the
Runtime's async database (`runtime.adb`), the provider is called with the Runtime's client (the
running loop's own, when it is one per loop: `_provider_of`), and waiting is
`await runtime.asleep(…)`.
Used by the invoke route (on the event loop, no thread-pool hop) and by the worker loops; the
plans are the same functions the sync callers (CLI, tests) run on a Session.

Nothing here keeps state in memory that another process needs: every decision is written to
the database, and every transition is conditional on holding the row's lease. What the invoke
keeps in memory (the caller's key, the version's facts: `mercato.db.hints`) is only a hint
that the accept program proves; an attempt that diverges from it is done again uncached, at
the top of the flow (`_answer`, decision 0570). That is the one place the flow catches a
refusal (a `MercatoError`, raised where its rule is): there it is rerun uncached, answered by
a twin that took the call's key first, or given the caller's RateLimit headers and left to go
on to the edge, which renders it (`web.problems`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from random import Random
from typing import Any, NoReturn, TypeVar

import orjson
from sqlalchemy import bindparam
from sqlalchemy.exc import IntegrityError

from mercato.accounts import service as accounts
from mercato.accounts.errors import KeySpendLimitReached
from mercato.accounts.schemas import Principal
from mercato.artifacts import service as artifact_service
from mercato.catalog import service as catalog
from mercato.core import schema_engine
from mercato.core.errors import MercatoError, Unauthenticated
from mercato.core.json_depth import MAX_JSON_DEPTH, nesting_exceeds
from mercato.db import hints
from mercato.db.plans import AsyncConnection, Plan, Rows, first, query
from mercato.db.runtime import Runtime
from mercato.dispatch.outcomes import Classified, classify
from mercato.dispatch.port import AsyncProvider, PerLoopProvider
from mercato.invocations import service as invocations
from mercato.invocations import spend
from mercato.invocations.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    RequestSchemaViolation,
    RequestTooComplex,
    RequestTooLarge,
)
from mercato.invocations.failpoints import AFTER_ACCEPT, AFTER_SEND, BEFORE_ACCEPT, BEFORE_SETTLE
from mercato.invocations.schemas import (
    CONTRACT_VIOLATION,
    UNAVAILABLE,
    Address,
    InvocationView,
    State,
)
from mercato.invocations.service import Job
from mercato.ledger import service as ledger
from mercato.ledger.errors import InsufficientPoints
from mercato.protocol import Outcome
from mercato.providers import service as providers
from mercato.providers.errors import ProviderBusy, ProviderNotApproved
from mercato.providers.schemas import DispatchTarget
from mercato.quotas import service as quotas
from mercato.quotas.errors import RateLimitExceeded
from mercato.quotas.schemas import Policy, QuotaStatus
from mercato.settings import Settings

C = TypeVar("C")
_SYNC_BACKOFF_BASE = 0.05
_SYNC_BACKOFF_CAP = 0.5
_RETRY_BACKOFF_BASE = 0.5
_RETRY_BACKOFF_CAP = 60.0
_RECONCILE_BACKOFF_BASE = 0.5
_RECONCILE_BACKOFF_CAP = 300.0
BUSY_RETRY_AFTER = 1
"""Seconds a call refused PROVIDER_BUSY is told to wait (decision 0511): a slot is free as
soon as any call in flight to the connection ends, and nothing of the refused call was kept."""
BUSY_PARK_SECONDS = 1.0
"""How long a worker step that found its connection full puts its call back (decision 0513)."""


@dataclass(slots=True)
class InvokeRequest:
    # Not frozen, as InvokeResult, quotas' QuotaStatus and service's Replayed: values made for
    # one call and never shared (a frozen dataclass sets each field through
    # object.__setattr__: about 3 % of a replay's instructions for these four).
    account_id: str
    channel: str
    service_code: str
    version: str
    idempotency_key: str
    body: bytes
    request_id: str | None = None  # the accepting request's id, kept on the call (0276)
    key_id: str | None = None  # the API key that makes the call (its spend limit, §8)


@dataclass(slots=True)
class InvokeResult:
    # Not frozen: one call's value, never shared (see `InvokeRequest`).
    view: InvocationView
    quota: QuotaStatus
    replay: bool


# --- timing ------------------------------------------------------------------------------


def lease_seconds(runtime: Runtime) -> float:
    """A processing lease outlives one provider call, so a live holder is never overtaken.

    The client's whole-call deadline can reach twice the timeout (decision 0031).
    """
    settings = runtime.settings
    timeout = float(settings.provider_timeout_seconds)
    return max(float(settings.idempotency_lease_seconds), 2.0 * timeout + 2.0)


def _backoff(rng: Random, base: float, cap: float, attempt: int) -> float:
    """Exponential backoff with full-range jitter in [delay/2, delay] (the Runtime's random)."""
    delay: float = min(cap, base * 2.0 ** max(attempt - 1, 0))
    return delay / 2 + rng.random() * delay / 2


def _later(runtime: Runtime, seconds: float) -> dt.datetime:
    return runtime.clock.now() + dt.timedelta(seconds=seconds)


def max_sends(runtime: Runtime) -> int:
    """The first send plus `redispatch_attempts` redispatches (DESIGN.md §3, decision 0061)."""
    return 1 + runtime.settings.redispatch_attempts


_ADDRESSES: dict[tuple[str, str, int, str], tuple[Settings, Address]] = {}
_MAX_ADDRESSES = 256


def _address(target: DispatchTarget, settings: Settings) -> Address:
    """`invocations.address_of`, kept per (connection, revision, credential): a pure function
    of those and the settings (an HMAC under a derived key), which every invoke asks again."""
    key = (target.connection_id, target.base_url, target.revision, target.credential)
    found = _ADDRESSES.get(key)
    if found is not None and found[0] is settings:
        return found[1]
    address = invocations.address_of(target, settings)
    if len(_ADDRESSES) >= _MAX_ADDRESSES:
        _ADDRESSES.clear()
    _ADDRESSES[key] = (settings, address)
    return address


# --- validation --------------------------------------------------------------------------


async def _judged(
    runtime: Runtime, schema: dict[str, Any], instance: Any, raw: bytes | None = None
) -> list[dict[str, str]]:
    """`schema_engine.judge` under the validation deadline (`TooComplex` beyond it)."""
    deadline = runtime.settings.validation_deadline_ms
    return await schema_engine.judge(schema, instance, deadline_ms=deadline, raw=raw)


async def _check_body(runtime: Runtime, body: bytes, version: catalog.InvocableVersion) -> None:
    if len(body) > version.request_max_bytes:
        raise RequestTooLarge(
            f"The body is {len(body)} bytes; this version accepts at most "
            f"{version.request_max_bytes}.",
            requestMaxBytes=version.request_max_bytes,
        )
    if nesting_exceeds(body):
        # Parsers, canonicalisation and schema checks recurse per level; refuse before them.
        raise RequestSchemaViolation(
            f"The body nests deeper than {MAX_JSON_DEPTH} levels.",
            errors=[{"pointer": "", "detail": f"nested deeper than {MAX_JSON_DEPTH} levels"}],
        )
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestSchemaViolation(
            "The body is not JSON.", errors=[{"pointer": "", "detail": "not valid JSON"}]
        ) from None
    if not isinstance(payload, dict) or not payload:
        raise RequestSchemaViolation(
            "The body must be a non-empty JSON object.",
            errors=[{"pointer": "", "detail": "must be a non-empty object"}],
        )
    try:
        errors = await _judged(runtime, version.contract.get("requestSchema", {}), payload, body)
    except schema_engine.TooComplex:
        raise RequestTooComplex(
            "The body cannot be judged against the request schema within "
            f"{runtime.settings.validation_deadline_ms} ms.",
            errors=[{"pointer": "", "detail": "too complex to judge within the deadline"}],
        ) from None
    if errors:
        raise RequestSchemaViolation("The body does not match the request schema.", errors=errors)


# --- invoke (synchronous path) -----------------------------------------------------------


# What a fresh call needs besides its key, read in one round trip: the exact version (with its
# holds), its connection's dispatch target, and the caller's own quota policy. Each module owns
# its part of the statement and reads its own columns back.
_FACTS = quotas.with_policy(
    providers.with_dispatch_target(catalog.INVOCABLE_VERSION, catalog.INVOCABLE_VERSION_CONNECTION),
    bindparam("account_id"),
)
_TARGET_COLUMNS = slice(
    catalog.INVOCABLE_VERSION_WIDTH,
    catalog.INVOCABLE_VERSION_WIDTH + providers.DISPATCH_TARGET_WIDTH,
)


@query
def facts(
    *, request: InvokeRequest, settings: Settings
) -> Plan[tuple[catalog.InvocableVersion, DispatchTarget, Policy]]:
    """The exact version (with its holds), its connection's dispatch target and the caller's
    own quota policy, in one round trip."""
    params = catalog.invocable_version_params(
        service_code=request.service_code, version=request.version
    )
    row = None
    if params is not None:
        row = first((yield Rows(_FACTS, {**params, "account_id": request.account_id})))
    values = None if row is None else tuple(row)
    version = catalog.invocable_version_of(
        values, service_code=request.service_code, version=request.version
    )
    assert values is not None  # a missing version raised above
    target = providers.dispatch_target_of(values[_TARGET_COLUMNS], settings)
    policy = quotas.policy_of(values[-quotas.POLICY_WIDTH :], quotas.default_policy(settings))
    return version, target, policy


def _replayed(found: invocations.Replayed, fingerprint: str, now: dt.datetime) -> InvokeResult:
    """A replay's answer from what `find_replay` read: the call as it stands, with the window
    read beside it (its RateLimit headers; a refusal's too, so the route reads nothing more
    for them)."""
    view = found.view
    refused: MercatoError | None = None
    if view.fingerprint != fingerprint:
        refused = IdempotencyKeyReused(
            "This Idempotency-Key was used for a different request; use a new key."
        )
    elif view.pending and view.lease_expires_at is not None and view.lease_expires_at > now:
        wait = max(math.ceil((view.lease_expires_at - now).total_seconds()), 1)
        refused = IdempotencyKeyInUse(
            "The first request with this Idempotency-Key is still being processed.",
            retry_after=wait,
            invocationId=view.invocation_id,
        )
    if refused is not None:
        refused.headers.update(found.quota.headers())
        raise refused
    return InvokeResult(view=view, quota=found.quota, replay=True)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a fresh call needs, read (or taken from memory) before anything is written."""

    request: InvokeRequest
    fingerprint: str
    version: catalog.InvocableVersion
    target: DispatchTarget
    policy: Policy


@dataclass(slots=True)
class Call:
    """An invoke as an edge received it, before anything is read: the caller's bearer
    credential, the values of its Idempotency-Key headers, the call itself, `notes`, where
    the flow notes the caller (`"principal"`, once its credential is proven) and the call
    (`"invocation_id"`) for the request's log line."""

    credential: str
    idempotency_keys: list[str]
    service_code: str
    version: str
    body: bytes
    request_id: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)


async def invoke_call(runtime: Runtime, call: Call) -> InvokeResult:
    """Run DESIGN.md §3 for a call as the edge received it: authentication, the key checks,
    then `invoke`'s steps. A refusal made after authentication carries the caller's
    RateLimit headers."""
    result = await _answer(runtime, _call, call, call.notes)
    call.notes["invocation_id"] = result.view.invocation_id
    return result


async def invoke(runtime: Runtime, request: InvokeRequest) -> InvokeResult:
    """Run DESIGN.md §3 after authentication and the key checks; see the lifecycle doc."""
    return await _answer(runtime, _invoke, request, None)


_TWIN_MAY_ANSWER = (IntegrityError, InsufficientPoints, KeySpendLimitReached, RateLimitExceeded)
"""How the accept program refuses a call whose key a concurrent twin may have taken first."""


class _Attempt(hints.Recall):
    """One attempt of a call: what it takes from memory (`hints.Recall`) and, while its accept
    program is being written, the call that program accepts (`accepting`): a refusal of the
    program is final only when no twin took the call's key first."""

    accepting: Prepared | None = None


async def _answer(
    runtime: Runtime,
    attempt: Callable[[Runtime, C, _Attempt], Awaitable[InvokeResult]],
    call: C,
    notes: dict[str, Any] | None,
) -> InvokeResult:
    """`attempt` of `call` with what the process remembers (`mercato.db.hints`, decision 0570),
    and the one place where the flow catches a refusal. One that diverges from memory: forget
    what the attempt took and attempt again uncached (the answer of a process without memory).
    One of the accept program: the answer of a twin that took the key first, if any. Any other
    goes on to the edge, with the RateLimit headers of the caller `notes` names, if any."""
    tried = _Attempt(runtime.hints)
    while True:
        try:
            return await attempt(runtime, call, tried)
        except (hints.Diverged, MercatoError, IntegrityError) as stopped:
            if tried.recalling and tried.diverged(stopped):
                tried.forget()
                tried = _Attempt(runtime.hints, recalling=False)
                continue
            if tried.accepting is not None and isinstance(stopped, _TWIN_MAY_ANSWER):
                twin = await _twin(runtime, tried.accepting, tried)
                if twin is not None:
                    return twin
            if isinstance(stopped, MercatoError) and notes is not None:
                await _with_quota_headers(runtime, stopped, notes)
            raise


async def _call(runtime: Runtime, call: Call, recall: _Attempt) -> InvokeResult:
    """One attempt of `invoke_call`: the caller, the key checks and the call's reads share one
    read; an API key's last use, when due, is recorded once that read has ended (a unit of
    work opened inside it would wait for a second connection while holding the first)."""
    call.notes.pop("principal", None)
    due: str | None = None
    try:
        async with runtime.adb.read() as conn:
            principal, due = await _caller(runtime, conn, call.credential, recall)
            call.notes["principal"] = principal
            request = InvokeRequest(
                account_id=principal.account_id,
                channel=principal.channel,
                service_code=call.service_code,
                version=call.version,
                idempotency_key=invocations.check_idempotency_key(call.idempotency_keys),
                body=call.body,
                request_id=call.request_id,
                key_id=principal.key_id,
            )
            prepared = await prepare(runtime, conn, request, recall)
    finally:
        if due is not None:  # a refused call was still made with the key
            async with runtime.adb.transaction() as write:
                await accounts.touch_api_key.aio(write, key_id=due, now=runtime.clock.now())
    if isinstance(prepared, InvokeResult):
        return prepared
    return await run(runtime, prepared, recall)


async def _caller(
    runtime: Runtime, conn: AsyncConnection, credential: str, recall: hints.Recall
) -> tuple[Principal, str | None]:
    """The caller of `credential` (from `bearer_token_of`), and the id of its API key when
    its last use is due to be recorded. An API key comes from memory when the process has it
    (the call's accept program proves it), else is read and filed."""
    now = runtime.clock.now()
    if credential.startswith(accounts.API_KEY_PREFIX):
        digest = accounts.api_key_digest(credential)
        key = recall.key(digest)
        if key is None:
            if recall.wants_generation():
                recall.saw(await hints.generation_plan.aio(conn))
            key = hints.KeyHint(*await accounts.lookup_api_key_digest.aio(conn, digest=digest))
            recall.file_key(digest, key)
        principal: Principal = key.principal
        if principal.key_id and accounts.touch_due(key.last_used_at, now):
            key.last_used_at = now  # this process's other calls need not record it again
            return principal, principal.key_id
        return principal, None
    if credential.startswith(accounts.ACCESS_TOKEN_PREFIX):
        principal = await accounts.resolve_access_token.aio(
            conn, token=credential, settings=runtime.settings, now=now
        )
        return principal, None
    raise Unauthenticated("The credential is not valid.")


async def _with_quota_headers(
    runtime: Runtime, refusal: MercatoError, notes: dict[str, Any]
) -> None:
    """Give `refusal` the RateLimit headers of the window, as it stands, of the caller `notes`
    names (none before authentication; a replay's refusal carries its own already)."""
    caller: Principal | None = notes.get("principal")
    if caller is None or "RateLimit" in refusal.headers:
        return
    async with runtime.adb.read() as conn:
        current = await quotas.current_status.aio(
            conn, account_id=caller.account_id, settings=runtime.settings, now=runtime.clock.now()
        )
    refusal.headers.update(current.headers())


async def _invoke(runtime: Runtime, request: InvokeRequest, recall: _Attempt) -> InvokeResult:
    """One attempt of `invoke`."""
    async with runtime.adb.read() as conn:
        prepared = await prepare(runtime, conn, request, recall)
    if isinstance(prepared, InvokeResult):
        return prepared
    return await run(runtime, prepared, recall)


async def prepare(
    runtime: Runtime, conn: AsyncConnection, request: InvokeRequest, recall: hints.Recall
) -> InvokeResult | Prepared:
    """The reads of an invoke, on the caller's read connection: the answer of a replay, or
    what a fresh call needs (`run` it after the read is closed: no call holds a read open).

    With the version's facts in the process's memory it reads nothing, not even the
    Idempotency-Key: the accept program stops on a key already used, and on facts that
    changed (`Diverged`). A key the process knows to be used is looked up first."""
    facts_key = (request.service_code, request.version, request.account_id)
    hit = recall.facts(facts_key, (request.account_id, request.idempotency_key))
    if hit is not None:
        version, target, policy = hit
        fingerprint = invocations.fingerprint_of(
            service_code=request.service_code, version=request.version, body=request.body
        )
        return Prepared(request, fingerprint, version, target, policy)
    return await prepare_plan.aio(conn, runtime, request, recall=recall)


@query
def prepare_plan(
    runtime: Runtime, request: InvokeRequest, *, recall: hints.Recall
) -> Plan[InvokeResult | Prepared]:
    """`prepare`'s reads, written once: a replay's answer, or the facts (filed in the
    process's memory under the generation read first: `hints` rule 2).

    A replay is one statement (decision 0420): its call, the account's quota window as it
    stands (a replay takes nothing; its RateLimit headers show the window), and the proof of
    the API key the attempt took from memory (not proven: `Diverged`, and the uncached attempt
    answers). A replay's refusal carries those RateLimit headers."""
    settings = runtime.settings
    fingerprint = invocations.fingerprint_of(
        service_code=request.service_code, version=request.version, body=request.body
    )
    now = runtime.clock.now()
    proving = recall.proving()
    found = yield from invocations.find_replay.plan(
        account_id=request.account_id,
        idempotency_key=request.idempotency_key,
        digest=proving,
        default=quotas.default_policy(settings),
        now=now,
    )
    if found is not None:
        if proving is not None:
            if not found.key_proven:
                raise hints.Diverged
            recall.proven()
        recall.used((request.account_id, request.idempotency_key))  # the next one reads first
        return _replayed(found, fingerprint, now)
    if recall.wants_generation():
        recall.saw((yield from hints.generation_plan.plan()))
    version, target, policy = yield from facts.plan(request=request, settings=settings)
    recall.file_facts(
        (request.service_code, request.version, request.account_id), (version, target, policy)
    )
    return Prepared(request, fingerprint, version, target, policy)


async def run(runtime: Runtime, prepared: Prepared, recall: _Attempt) -> InvokeResult:
    """A fresh call `prepare` read: check, accept, send, conclude. Its accept program proves
    what the attempt took from memory (`recall`), or stops (`Diverged`)."""
    accepted = await _accept(runtime, prepared, recall)
    recall.proven()
    # Its key is used now: a replay of it looks it up first.
    recall.used((prepared.request.account_id, prepared.request.idempotency_key))
    if isinstance(accepted, InvokeResult):
        return accepted
    invocation_id, owner, quota = accepted
    version = prepared.version
    try:  # the bulkhead slot `_accept` took is this call's until its provider call is over
        if runtime.armed is not None:
            runtime.armed.hit(AFTER_ACCEPT)
        job = Job(
            invocation_id=invocation_id,
            state=State.DISPATCHING.value,
            connection_id=version.connection_id,
            provider_key=invocations.provider_key_for(invocation_id),
            payload=prepared.request.body,
            response_max_bytes=version.response_max_bytes,
            result_schema=version.contract.get("resultSchema", {}),
            has_artifact_contract=version.has_artifact_contract,
            sends=1,
            reconciliations=0,
        )
        view = await send_and_conclude(runtime, prepared.target, job, owner, synchronous=True)
    finally:
        runtime.slots.give_back(prepared.target.connection_id)
    if view is None:  # another process took over; answer with what the database says now
        async with runtime.adb.read() as conn:
            view = await invocations.get_view.aio(conn, invocation_id=invocation_id)
    return InvokeResult(view=view, quota=quota, replay=False)


async def _accept(
    runtime: Runtime, prepared: Prepared, attempt: _Attempt
) -> tuple[str, str, QuotaStatus] | InvokeResult:
    """Check and accept the call: (its id, its lease owner, the quota it took), holding a
    bulkhead slot of its connection, or the answer of the twin that took its key first."""
    target = prepared.target
    if not target.approved:
        raise ProviderNotApproved("The provider connection of this version is not approved.")
    await _check_body(runtime, prepared.request.body, prepared.version)
    # The last check before acceptance (DESIGN §3): a slot is taken here, in memory, and
    # given back if acceptance refuses (decision 0512).
    slots = runtime.slots
    if not slots.take(target.connection_id, target.max_in_flight):
        await _refuse_busy(runtime, prepared)
    kept = False  # only an accepted call keeps its slot
    try:
        accepted = await _accept_holding(runtime, prepared, attempt)
        kept = not isinstance(accepted, InvokeResult)
    finally:
        if not kept:
            slots.give_back(target.connection_id)
    return accepted


async def _refuse_busy(runtime: Runtime, prepared: Prepared) -> NoReturn:
    """Refuse a call whose connection (or process) is full: 503 PROVIDER_BUSY, unless a
    refusal DESIGN §3 orders before it applies (not enough points, the key's spend limit).
    Only this refusal reads."""
    price, key_id = prepared.version.price, prepared.request.key_id
    async with runtime.adb.read() as conn:
        available = await ledger.available_points.aio(conn, account_id=prepared.request.account_id)
        over = None
        if key_id is not None and available >= price:
            over = await spend.over_limit.aio(
                conn, key_id=key_id, price=price, now=runtime.clock.now()
            )
    if available < price:
        raise ledger.short_of_points(available, price)
    if over is not None:
        raise over
    raise ProviderBusy(
        "The provider has as many calls in flight as it may take; try again shortly.",
        retry_after=BUSY_RETRY_AFTER,
    )


async def _accept_holding(
    runtime: Runtime, prepared: Prepared, attempt: _Attempt
) -> tuple[str, str, QuotaStatus] | InvokeResult:
    """`_accept` once its checks passed and its slot is taken. What the attempt took from
    memory was filed under its `generation` (the program's guard proves it; None: nothing)."""
    generation = attempt.generation
    request, fingerprint, version = prepared.request, prepared.fingerprint, prepared.version
    target, policy = prepared.target, prepared.policy

    ids = runtime.db.ids  # the Runtime's ids are its database's
    invocation_id = ids.new("inv")
    owner = ids.new("lease")
    now = runtime.clock.now()

    def accept() -> Plan[QuotaStatus | None]:
        return invocations.accept.plan(
            invocation_id=invocation_id,
            account_id=request.account_id,
            channel=request.channel,
            request_id=request.request_id,
            idempotency_key=request.idempotency_key,
            fingerprint=fingerprint,
            version=version,
            payload=request.body,
            policy=policy,
            address=_address(target, runtime.settings),
            lease_owner=owner,
            lease_seconds=lease_seconds(runtime),
            now=now,
            hint_generation=generation,
            api_key_id=request.key_id,
        )

    if runtime.armed is not None:
        runtime.armed.hit(BEFORE_ACCEPT)
    attempt.accepting = prepared  # until the program answers: a refusal may be a twin's
    quota = await runtime.adb.write(accept)
    attempt.accepting = None
    if quota is None:
        if generation is not None:
            raise hints.Diverged  # the key was used already, or what was served changed
        # A concurrent request with the same key was accepted first (the program stopped at
        # its intent): answer as its replay.
        twin = await _twin(runtime, prepared, attempt)
        if twin is None:
            raise RuntimeError("the accept program stopped without a twin")
        return twin
    return invocation_id, owner, quota


async def _twin(runtime: Runtime, prepared: Prepared, attempt: _Attempt) -> InvokeResult | None:
    """The answer of the concurrent call with `prepared`'s key that was accepted first (as
    its replay: the call, or a replay's refusal), or None when there is none."""
    request = prepared.request
    now = runtime.clock.now()
    async with runtime.adb.read() as conn:
        found = await invocations.find_replay.aio(
            conn,
            account_id=request.account_id,
            idempotency_key=request.idempotency_key,
            digest=None,
            default=quotas.default_policy(runtime.settings),
            now=now,
        )
    if found is None:
        return None
    attempt.used((request.account_id, request.idempotency_key))  # the next one reads first
    return _replayed(found, prepared.fingerprint, now)


# --- shared by the request and the worker ------------------------------------------------


def _provider_of(runtime: Runtime) -> AsyncProvider:
    """The provider client to call: the running loop's own when the Runtime's is one per loop
    and it is open (called with no frame of `PerLoopProvider` in between), else the Runtime's."""
    provider = runtime.async_provider
    if isinstance(provider, PerLoopProvider):
        client = provider.clients.get(asyncio.get_running_loop())
        if client is not None:
            return client
    return runtime.async_provider_client()


async def send_and_conclude(
    runtime: Runtime,
    target: DispatchTarget,
    job: Job,
    owner: str,
    *,
    synchronous: bool,
) -> InvocationView | None:
    """Send the stored payload (its send already counted) and act on the classified answer.

    RETRYABLE_BEFORE_ACCEPT is redispatched within the bound: inline with a short backoff on
    the synchronous path, else parked in RETRY_WAIT for the worker. Returns the invocation as
    the deciding transaction left it (None when the lease was lost to another process).
    """
    client = _provider_of(runtime)
    sends = job.sends
    while True:
        answer = await client.execute(
            target,
            idempotency_key=job.provider_key,
            payload_bytes=job.payload,
            response_max_bytes=job.response_max_bytes,
            timeout=runtime.settings.provider_timeout_seconds,
        )
        if runtime.armed is not None:
            runtime.armed.hit(AFTER_SEND)
        classified = classify(answer)
        if classified.outcome is not Outcome.RETRYABLE_BEFORE_ACCEPT:
            return await conclude(runtime, job, owner, classified)
        if sends >= max_sends(runtime):
            return await _fail(runtime, job, owner, UNAVAILABLE, None)
        if not synchronous:
            return await _park(
                runtime, job, owner, State.RETRY_WAIT, sends, "retryable_before_accept"
            )
        await runtime.asleep(_backoff(runtime.random, _SYNC_BACKOFF_BASE, _SYNC_BACKOFF_CAP, sends))
        async with runtime.adb.transaction() as conn:
            counted = await invocations.record_send.aio(
                conn,
                invocation_id=job.invocation_id,
                lease_owner=owner,
                lease_seconds=lease_seconds(runtime),
                address=_address(target, runtime.settings),
                now=runtime.clock.now(),
            )
        if counted is None:
            return None  # lost the lease: whoever holds it now decides
        sends = counted


def is_stuck(runtime: Runtime, job: Job) -> bool:
    """Whether a call whose outcome is still unknown is now stuck (DESIGN.md §3, 0201): after
    `stuck_after_attempts` reconciliations or `stuck_after_seconds` since acceptance."""
    settings = runtime.settings
    if job.stuck or job.reconciliations >= settings.stuck_after_attempts:
        return True
    if job.created_at is None:
        return False
    age = (runtime.clock.now() - job.created_at).total_seconds()
    return age >= settings.stuck_after_seconds


@query
def _parked(
    *,
    invocation_id: str,
    lease_owner: str,
    state: State,
    next_attempt_at: dt.datetime,
    reason: str,
    now: dt.datetime,
    stuck: bool,
) -> Plan[InvocationView | None]:
    parked = yield from invocations.schedule.plan(
        invocation_id=invocation_id,
        lease_owner=lease_owner,
        state=state,
        next_attempt_at=next_attempt_at,
        reason=reason,
        now=now,
        stuck=stuck,
    )
    if not parked:
        return None
    return (yield from invocations.get_view.plan(invocation_id=invocation_id))


async def _park(
    runtime: Runtime, job: Job, owner: str, state: State, attempt: int, reason: str
) -> InvocationView | None:
    stuck = state is State.RECONCILING and is_stuck(runtime, job)
    if state is State.RETRY_WAIT:
        delay = _backoff(runtime.random, _RETRY_BACKOFF_BASE, _RETRY_BACKOFF_CAP, attempt)
    elif stuck:  # its slowest pace, in a lane of its own (the worker's stuck lane)
        delay = _backoff(runtime.random, _RECONCILE_BACKOFF_CAP, _RECONCILE_BACKOFF_CAP, 1)
    else:
        delay = _backoff(runtime.random, _RECONCILE_BACKOFF_BASE, _RECONCILE_BACKOFF_CAP, attempt)
    async with runtime.adb.transaction() as conn:
        return await _parked.aio(
            conn,
            invocation_id=job.invocation_id,
            lease_owner=owner,
            state=state,
            next_attempt_at=_later(runtime, delay),
            reason=reason,
            now=runtime.clock.now(),
            stuck=stuck,
        )


async def _fail(
    runtime: Runtime, job: Job, owner: str, error_code: str, provider_http_status: int | None
) -> InvocationView | None:

    def finish() -> Plan[InvocationView | None]:
        if runtime.armed is not None:
            runtime.armed.hit(BEFORE_SETTLE)  # nothing of the release has been sent yet
        return invocations.finish_failure.plan(
            invocation_id=job.invocation_id,
            lease_owner=owner,
            error_code=error_code,
            provider_http_status=provider_http_status,
            now=runtime.clock.now(),
        )

    return await runtime.adb.write(finish)


def _valid_manifest(result: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The result's artifact manifest and whether it keeps the artifact contract."""
    entries = result.get("artifacts", [])
    try:
        artifact_service.validate_manifest(entries)
    except MercatoError:
        return [], False
    return list(entries), True


async def conclude(
    runtime: Runtime, job: Job, owner: str, classified: Classified
) -> InvocationView | None:
    """Settle, release or park for reconciliation according to a classified answer."""
    envelope = classified.envelope
    if classified.outcome is Outcome.SUCCEEDED and envelope is not None:
        result = envelope.result or {}
        manifest: list[dict[str, Any]] | None = None
        try:
            valid = not await _judged(runtime, job.result_schema, result)
        except schema_engine.TooComplex:
            valid = False  # a result that cannot be judged in time is a contract violation
        if valid and job.has_artifact_contract:
            manifest, valid = _valid_manifest(result)
        if not valid:
            return await _fail(runtime, job, owner, CONTRACT_VIOLATION, None)

        def finish() -> Plan[InvocationView | None]:
            if runtime.armed is not None:
                runtime.armed.hit(BEFORE_SETTLE)  # nothing of the settlement has been sent yet
            return invocations.finish_success.plan(
                invocation_id=job.invocation_id,
                lease_owner=owner,
                result=orjson.dumps(result),
                artifacts=manifest,
                now=runtime.clock.now(),
            )

        return await runtime.adb.write(finish)
    if classified.outcome is Outcome.DEFINED_FAILURE and envelope is not None:
        assert envelope.error_code is not None
        return await _fail(runtime, job, owner, envelope.error_code, envelope.http_status)
    # UNKNOWN_OUTCOME (or anything else): never resend; only reconciliation may decide.
    return await _park(
        runtime, job, owner, State.RECONCILING, job.reconciliations + 1, classified.reason
    )


# --- worker steps ------------------------------------------------------------------------


async def _load_job(runtime: Runtime, invocation_id: str) -> Job:
    async with runtime.adb.read() as conn:
        return await invocations.load_job.aio(conn, invocation_id=invocation_id)


async def _target(runtime: Runtime, job: Job) -> DispatchTarget:
    async with runtime.adb.read() as conn:
        return await providers.dispatch_target.aio(
            conn, connection_id=job.connection_id, settings=runtime.settings
        )


async def redispatch(runtime: Runtime, invocation_id: str, owner: str) -> None:
    """Send a RETRY_WAIT invocation again: same provider key, same stored bytes; within its
    connection's bulkhead in this process (full: put back for a moment, nothing counted)."""
    job = await _load_job(runtime, invocation_id)
    if job.sends >= max_sends(runtime):
        await _fail(runtime, job, owner, UNAVAILABLE, None)
        return
    target = await _target(runtime, job)
    if not runtime.slots.take(target.connection_id, target.max_in_flight):
        await _put_back(runtime, job, owner, State.RETRY_WAIT)
        return
    try:
        await _count_and_send(runtime, job, owner, target)
    finally:
        runtime.slots.give_back(target.connection_id)


async def _put_back(runtime: Runtime, job: Job, owner: str, state: State) -> None:
    """Park a call whose connection this process has full, due again shortly; no send nor
    reconciliation is counted (decision 0513)."""
    async with runtime.adb.transaction() as conn:
        await invocations.schedule.aio(
            conn,
            invocation_id=job.invocation_id,
            lease_owner=owner,
            state=state,
            next_attempt_at=_later(runtime, BUSY_PARK_SECONDS),
            reason="provider_busy",
            now=runtime.clock.now(),
        )


async def _count_and_send(
    runtime: Runtime, job: Job, owner: str, target: DispatchTarget | None = None
) -> None:
    """Count a send and make it (the caller holds a bulkhead slot of the connection)."""
    if target is None:
        target = await _target(runtime, job)
    if not target.approved:
        # The connection changed (or lost approval) since the call was accepted: nothing is
        # ever sent to a connection that has not passed review. The provider has proven it
        # never accepted this key, so the call fails uncharged, as a refused send would
        # (decision 0188). Reconciliation, which sends no payload, still asks it.
        await _fail(runtime, job, owner, UNAVAILABLE, None)
        return
    async with runtime.adb.transaction() as conn:
        sends = await invocations.record_send.aio(
            conn,
            invocation_id=job.invocation_id,
            lease_owner=owner,
            lease_seconds=lease_seconds(runtime),
            address=_address(target, runtime.settings),
            now=runtime.clock.now(),
        )
    if sends is None:
        return
    counted = replace(job, sends=sends, state=State.DISPATCHING.value)
    await send_and_conclude(runtime, target, counted, owner, synchronous=False)


async def _where_sent(runtime: Runtime, job: Job) -> DispatchTarget | None:
    """Where to reconcile: the address the latest send went to, with the credential it
    carried (decision 0200). None when that credential is no longer known: the current one
    never goes to an address the connection has left, and no other address can tell."""
    current = await _target(runtime, job)
    sent = job.address
    if sent is None or sent.base_url == current.base_url:
        return current  # the same address (a credential rotated there stays with it)
    if sent.credential_digest == invocations.credential_digest(
        runtime.settings, current.credential
    ):
        return replace(current, base_url=sent.base_url, revision=sent.connection_revision)
    return None


async def reconcile(runtime: Runtime, invocation_id: str, owner: str) -> None:
    """Ask the provider what happened to a call whose outcome is unknown (or was in flight).

    Only the address that received the latest send is asked, and only its RETRYABLE_BEFORE_
    ACCEPT, the provider's proof that it never accepted the key, allows sending again, within
    the same bound as any redispatch.
    """
    job = await _load_job(runtime, invocation_id)
    target = await _where_sent(runtime, job)
    if target is None:
        await _reconcile(runtime, job, owner, None)
        return
    if not runtime.slots.take(target.connection_id, target.max_in_flight):
        await _put_back(runtime, job, owner, State.RECONCILING)
        return
    try:
        await _reconcile(runtime, job, owner, target)
    finally:
        runtime.slots.give_back(target.connection_id)


async def _reconcile(runtime: Runtime, job: Job, owner: str, target: DispatchTarget | None) -> None:
    """`reconcile` once its connection's slot is held (`target` None: no address to ask)."""
    invocation_id = job.invocation_id
    async with runtime.adb.transaction() as conn:
        counted = await invocations.record_reconciliation.aio(
            conn, invocation_id=invocation_id, lease_owner=owner, now=runtime.clock.now()
        )
    if not counted:
        return
    job = replace(job, reconciliations=job.reconciliations + 1)
    if target is None:
        reason = "original_address_credential_unknown"
        await _park(runtime, job, owner, State.RECONCILING, job.reconciliations, reason)
        return
    answer = await runtime.async_provider_client().reconcile(
        target,
        idempotency_key=job.provider_key,
        response_max_bytes=job.response_max_bytes,
        timeout=runtime.settings.provider_timeout_seconds,
    )
    classified = classify(answer)
    if classified.outcome is Outcome.RETRYABLE_BEFORE_ACCEPT:
        if job.sends >= max_sends(runtime):
            await _fail(runtime, job, owner, UNAVAILABLE, None)
        else:
            await _count_and_send(runtime, job, owner)
        return
    await conclude(runtime, job, owner, classified)


async def work_stuck(runtime: Runtime, invocation_id: str, owner: str) -> None:
    """One step for a stuck call (the worker's stuck lane): send again what the provider
    proved it never accepted, else reconcile."""
    state = (await _load_job(runtime, invocation_id)).state
    if state == State.RETRY_WAIT:
        await redispatch(runtime, invocation_id, owner)
    else:
        await reconcile(runtime, invocation_id, owner)
