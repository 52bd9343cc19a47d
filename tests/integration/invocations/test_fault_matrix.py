"""The fault matrix: every answer shape → classification → settlement, with the provider's own
count of executions and reconciliations per platform key.

After an unknown outcome there is never a second execution unless a reconciliation first
proved that the provider never accepted the key (RETRYABLE_BEFORE_ACCEPT).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from builders.invocation_world import PRICE, World, running_world
from builders.invocations import (
    Act,
    ConnectionCounter,
    ScriptedProvider,
    defined,
    envelope,
    ok,
    raw,
    retryable,
    unknown,
)

OK_BODY = envelope("SUCCEEDED", result={"echo": 1})


@dataclass
class Row:
    name: str
    acts: list[Act]
    sync_status: int
    settlement: str
    executions: int
    reconciliations: int = 0
    recon: list[Act] = field(default_factory=list)
    error_code: str | None = None


ROWS = [
    # Valid (outcome, status) pairs.
    Row("succeeded 200", [ok()], 200, "SETTLED", 1),
    Row("succeeded 201", [Act(201, OK_BODY)], 200, "SETTLED", 1),
    *[
        Row(f"defined failure {s}", [defined(s, "NOPE")], 422, "RELEASED", 1, error_code="NOPE")
        for s in (400, 404, 409, 422, 500, 502, 503, 504)
    ],
    Row("retryable once then ok", [retryable(), ok()], 200, "SETTLED", 2),
    Row("retryable up to the bound", [retryable(), retryable(), ok()], 200, "SETTLED", 3),
    Row(
        "retryable past the bound",
        [retryable(), retryable(), retryable()],
        502,
        "RELEASED",
        3,
        error_code="PROVIDER_UNAVAILABLE",
    ),
    Row(
        "result breaks resultSchema",
        [Act(200, envelope("SUCCEEDED", result={"nope": 1}))],
        502,
        "RELEASED",
        1,
        error_code="PROVIDER_CONTRACT_VIOLATION",
    ),
    # UNKNOWN_OUTCOME, accepted by the provider: reconciliation finds the stored success.
    Row("unknown 202 (accepted)", [unknown()], 202, "SETTLED", 1, 1),
    Row("read timeout (accepted)", [Act(hang=True)], 202, "SETTLED", 1, 1),
    Row("dropped connection (accepted)", [Act(drop=True)], 202, "SETTLED", 1, 1),
    Row("truncated body (accepted)", [raw(200, OK_BODY, truncate=True)], 202, "SETTLED", 1, 1),
    Row("truncated json (accepted)", [raw(200, OK_BODY[:-5])], 202, "SETTLED", 1, 1),
    Row("malformed json (accepted)", [raw(200, b"{nope")], 202, "SETTLED", 1, 1),
    Row("oversized, Content-Length", [Act(oversize=300_000)], 202, "SETTLED", 1, 1),
    Row("oversized, chunked", [Act(oversize=300_000, chunked=True)], 202, "SETTLED", 1, 1),
    Row("status mismatch", [raw(500, OK_BODY)], 202, "SETTLED", 1, 1),
    Row(
        "httpStatus mismatch",
        [raw(400, envelope("DEFINED_FAILURE", errorCode="E", httpStatus=404))],
        202,
        "SETTLED",
        1,
        1,
    ),
    Row("unknown outcome name", [raw(200, envelope("DONE", result={}))], 202, "SETTLED", 1, 1),
    Row("extra member", [raw(200, envelope("SUCCEEDED", result={}, x=1))], 202, "SETTLED", 1, 1),
    Row("missing member", [raw(200, b'{"outcome":"SUCCEEDED","result":{}}')], 202, "SETTLED", 1, 1),
    Row(
        "retryable with 500", [raw(500, envelope("RETRYABLE_BEFORE_ACCEPT"))], 202, "SETTLED", 1, 1
    ),
    # UNKNOWN_OUTCOME, never accepted: reconciliation proves it, then one redispatch.
    Row("unknown 202 (not accepted)", [unknown(accept=False)], 202, "SETTLED", 2, 1),
    Row("timeout (not accepted)", [Act(hang=True, accept=False)], 202, "SETTLED", 2, 1),
    Row("dropped (not accepted)", [Act(drop=True, accept=False)], 202, "SETTLED", 2, 1),
    # Reconciliation answers decide.
    Row(
        "reconciliation unknown, then stored", [unknown()], 202, "SETTLED", 1, 2, recon=[unknown()]
    ),
    Row(
        "reconciliation garbage, then stored",
        [unknown()],
        202,
        "SETTLED",
        1,
        2,
        recon=[raw(200, b"garbage")],
    ),
    Row(
        "reconciliation defined failure",
        [unknown()],
        202,
        "RELEASED",
        1,
        1,
        recon=[defined(404, "GONE")],
        error_code="GONE",
    ),
    Row(
        "reconciliation retryable, bound spent",
        [retryable(), retryable(), unknown(accept=False)],
        202,
        "RELEASED",
        3,
        1,
        error_code="PROVIDER_UNAVAILABLE",
    ),
]


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    """A short provider timeout: the hanging rows must time out, and quickly."""
    with running_world(db_url, tmp_path, provider, provider_timeout_seconds=2.0) as built:
        yield built


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_fault_matrix(world: World, row: Row) -> None:
    world.provider.script(*row.acts)
    world.provider.script_reconciliation(*row.recon)
    response = world.invoke({"n": 1})
    assert response.status_code == row.sync_status, response.text
    invocation_id = response.json()["invocationId"]
    key = world.provider_key(invocation_id)
    receipt_path = f"/v1/invocations/{invocation_id}"

    if row.sync_status == 202:
        assert response.headers["Location"] == receipt_path
        pending = world.get(receipt_path).json()
        assert (pending["status"], pending["settlement"], pending["actualSpend"]) == (
            "PENDING",
            "PENDING",
            None,
        )
        assert world.balances() == (100 - PRICE, PRICE)  # points stay reserved
        # An unknown outcome is never resent: only the scripted synchronous sends happened.
        assert world.provider.executions[key] == len(row.acts)
        world.work()

    receipt = world.get(receipt_path).json()
    assert receipt["settlement"] == row.settlement
    assert receipt["errorCode"] == row.error_code
    assert world.provider.executions[key] == row.executions
    assert world.provider.reconciliations[key] == row.reconciliations
    # The business logic ran at most once per key, and exactly once for a charged call.
    assert world.provider.business[key] <= 1
    assert world.provider.business[key] == 1 or row.settlement != "SETTLED"
    # Every send carried the same platform key and the same stored bytes.
    assert len(set(world.provider.payloads[key])) == 1
    if row.settlement == "SETTLED":
        assert world.balances() == (100 - PRICE, 0) and receipt["actualSpend"] == PRICE
    else:
        assert world.balances() == (100, 0) and receipt["actualSpend"] == 0
    assert world.reservations("HELD") == 0
    assert world.ledger_balanced()
    # Terminal outcomes never change again, however often the worker runs.
    assert world.work() == 0
    assert world.get(receipt_path).json() == receipt


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_unknown_and_never_followed(world: World, status: int) -> None:
    listener = ConnectionCounter()
    try:
        world.provider.script(
            raw(status, b"{}", accept=False, headers={"Location": listener.url + "/steal"})
        )
        response = world.invoke({"n": 1})
        assert response.status_code == 202
        world.work()
        key = world.provider_key(response.json()["invocationId"])
        assert world.provider.executions[key] == 2 and world.provider.reconciliations[key] == 1
        assert world.get(response.headers["Location"]).json()["settlement"] == "SETTLED"
    finally:
        listener.close()
    assert listener.count == 0


def test_defined_failure_response_shape(world: World) -> None:
    world.provider.script(defined(404, "UNKNOWN_SNAPSHOT"))
    response = world.invoke({"n": 1})
    body = response.json()
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert body["code"] == "PROVIDER_DEFINED_FAILURE"
    assert (body["errorCode"], body["providerHttpStatus"]) == ("UNKNOWN_SNAPSHOT", 404)
    assert body["invocationId"].startswith("inv_")
    # A replay of the settled (released) call answers the same body.
    again = world.invoke({"n": 1})
    assert (again.status_code, again.content) == (422, response.content)


def test_platform_failure_response_shape(world: World) -> None:
    world.provider.script(retryable(), retryable(), retryable())
    response = world.invoke({"n": 1})
    body = response.json()
    assert (response.status_code, body["code"]) == (502, "PROVIDER_UNAVAILABLE")
    assert body["invocationId"].startswith("inv_")
    assert world.invoke({"n": 1}).content == response.content
