"""Random sequences of provider faults (Hypothesis): whatever the provider answers, in any order,
the platform resends only after proof of non-acceptance, never exceeds the redispatch bound,
charges exactly when the provider holds a success for the key, and leaves the ledger balanced."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders.invocation_world import PRICE, World
from builders.invocations import (
    Act,
    defined,
    envelope,
    ok,
    proves_non_acceptance,
    raw,
    retryable,
    unknown,
)
from mercato.ledger import service as ledger

EXEC_ACTS: list[Any] = [
    lambda: ok(),
    lambda: defined(404, "GONE"),
    lambda: retryable(),
    lambda: unknown(),
    lambda: unknown(accept=False),
    lambda: Act(drop=True),
    lambda: Act(drop=True, accept=False),
    lambda: raw(200, b"{broken"),
    lambda: raw(200, b"{broken", accept=False),
    lambda: raw(302, b"{}", accept=False, headers={"Location": "http://127.0.0.1:9/"}),
    lambda: raw(500, envelope("SUCCEEDED", result={"echo": 1})),
    lambda: Act(200, envelope("SUCCEEDED", result={"nope": 1})),
]
RECON_ACTS: list[Any] = [
    lambda: unknown(),
    lambda: raw(200, b"garbage"),
    lambda: Act(drop=True),
]

counter = {"n": 0}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    exec_acts=st.lists(st.sampled_from(range(len(EXEC_ACTS))), max_size=6),
    recon_acts=st.lists(st.sampled_from(range(len(RECON_ACTS))), max_size=3),
)
def test_any_fault_sequence_keeps_the_invariants(
    world: World, exec_acts: list[int], recon_acts: list[int]
) -> None:
    provider = world.provider
    provider.exec_script.clear()
    provider.recon_script.clear()
    provider.script(*[EXEC_ACTS[i]() for i in exec_acts])
    provider.script_reconciliation(*[RECON_ACTS[i]() for i in recon_acts])
    counter["n"] += 1
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=world.caller_id, amount=PRICE, now=world.clock.now())
    before = world.balances()
    response = world.invoke({"n": counter["n"]}, key=f"seq-{counter['n']}")
    assert response.status_code in {200, 202, 422, 502}, response.text
    invocation_id = response.json()["invocationId"]
    key = world.provider_key(invocation_id)
    world.work()

    receipt = world.get(f"/v1/invocations/{invocation_id}").json()
    assert receipt["settlement"] in {"SETTLED", "RELEASED"}
    events = [(kind, act) for k, kind, act in provider.events if k == key]
    sends = [act for kind, act in events if kind == "exec"]
    assert 1 <= len(sends) <= 1 + world.runtime.settings.redispatch_attempts
    for (_, previous), (kind, _) in itertools.pairwise(events):
        if kind == "exec":
            assert proves_non_acceptance(previous), events  # resent only after proof
    stored = provider.store.get(key)
    valid_success = stored is not None and stored[1] == 200 and b'"echo"' in stored[2]
    assert (receipt["settlement"] == "SETTLED") == valid_success
    assert provider.business[key] <= 1
    charged = PRICE if receipt["settlement"] == "SETTLED" else 0
    assert world.balances() == (before[0] - charged, 0)
    assert world.ledger_balanced()
