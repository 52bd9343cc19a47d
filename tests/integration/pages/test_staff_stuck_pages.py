"""The staff console lists stuck calls; a staff page resolves one, once, with CSRF."""

from __future__ import annotations

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World
from builders.invocations import unknown
from builders.pages import Browser, field_error
from mercato.worker import loops


def _stuck_call(world: World) -> str:
    world.provider.script(unknown())
    response = world.invoke({"n": 1})
    invocation_id = str(response.json()["invocationId"])
    for _ in range(world.runtime.settings.stuck_after_attempts):
        world.provider.script_reconciliation(unknown())
        world.clock.advance(3600)
        run_on_fresh_loop(loops.run_once(world.runtime))
    return invocation_id


def test_staff_see_a_stuck_call_and_resolve_it_once(
    world: World, staff: Browser, person: Browser
) -> None:
    invocation_id = _stuck_call(world)
    console = staff.get("/staff")
    assert f"/staff/invocations/{invocation_id}" in console.text
    page = staff.get(f"/staff/invocations/{invocation_id}")
    assert page.status_code == 200 and world.provider.url in page.text  # where it was sent
    # A person is not staff; a post without the CSRF token is refused; nothing moves.
    assert person.get(f"/staff/invocations/{invocation_id}").status_code in (403, 404)
    forged = staff.post(
        f"/staff/invocations/{invocation_id}/resolve",
        {"decision": "FAILED", "reason": "x"},
        csrf=False,
    )
    assert forged.status_code in (400, 403)
    blank = staff.post(
        f"/staff/invocations/{invocation_id}/resolve", {"decision": "FAILED", "reason": " "}
    )
    assert blank.status_code == 400 and field_error(blank, "reason")
    assert world.balances() == (90, 10)

    done = staff.post(
        f"/staff/invocations/{invocation_id}/resolve",
        {"decision": "FAILED", "reason": "the provider says it never ran"},
    )

    assert done.status_code == 303
    assert world.balances() == (100, 0) and world.ledger_balanced()
    receipt = world.get(f"/v1/invocations/{invocation_id}").json()
    assert receipt["resolution"]["reason"] == "the provider says it never ran"
    again = staff.post(
        f"/staff/invocations/{invocation_id}/resolve", {"decision": "SUCCEEDED", "reason": "y"}
    )
    assert again.status_code == 409 and "already resolved" in again.text
    assert world.balances() == (100, 0) and world.earnings() == 0
    assert f"/staff/invocations/{invocation_id}" not in staff.get("/staff").text
