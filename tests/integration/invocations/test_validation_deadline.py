"""Bodies and results judged off the event loop under the validation deadline (issue 39 item
1; DESIGN.md §3, §7; decision 0515). Both stores.

A body that cannot be judged in time is 422 REQUEST_TOO_COMPLEX, before the points are looked
at, and consumes nothing; a result that cannot be judged in time is a contract violation: the
call is released, nothing charged. A version published before patterns had to be RE2 keeps
Python's engine, stopped at the deadline when it overruns."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from builders.catalog import example_contract, publish
from builders.hard_schemas import (
    HARD_SCHEMAS,
    TOO_COMPLEX,
    hard_instance,
    publish_legacy,
    regex_schema,
)
from builders.invocation_world import World
from builders.invocations import ok
from mercato.catalog.legacy_patterns import list_legacy_pattern_versions
from mercato.providers.models import ProviderConnection


def _publish(
    world: World, service: str, *, request: Any = None, result: Any = None, price: int = 10
) -> None:
    with world.runtime.db.read() as session:
        connection_id = session.scalars(select(ProviderConnection.id)).one()
    publish(
        world.runtime,
        connection_id,
        service_code=service,
        price=price,
        contract=example_contract(
            requestMaxBytes=65_536,
            responseMaxBytes=1_048_576,
            requestSchema=request if request is not None else {"type": "object"},
            resultSchema=result if result is not None else {"type": "object"},
            artifactContract=None,
        ),
    )


def _problem(response: Any) -> tuple[int, str]:
    return response.status_code, response.json().get("code", "")


def test_a_body_that_cannot_be_judged_in_time_is_refused_before_points_and_consumes_nothing(
    world: World,
) -> None:
    # The price is beyond the caller's 100 points: REQUEST_TOO_COMPLEX comes first (§3 step 4).
    for name in TOO_COMPLEX:
        _publish(world, f"acme.{name}", request=HARD_SCHEMAS[name](), price=1_000)
    for number, name in enumerate(TOO_COMPLEX):
        response = world.invoke(hard_instance(), service=f"acme.{name}", key=f"hard-{number}")
        assert _problem(response) == (422, "REQUEST_TOO_COMPLEX"), (name, response.text)
        assert response.json()["errors"] == [
            {"pointer": "", "detail": "too complex to judge within the deadline"}
        ]
    assert world.balances() == (100, 0)
    assert world.invocations() == [] and sum(world.provider.executions.values()) == 0
    # The same key is free: nothing of the refused call was kept.
    _publish(world, "acme.cheap", request={"type": "object", "minProperties": 1})
    world.provider.script(ok({"echo": 1}))
    again = world.invoke({"n": 1}, service="acme.cheap", key="hard-0")
    assert again.status_code == 200, again.text
    assert world.balances() == (90, 0) and world.ledger_balanced()


def test_a_catastrophic_pattern_in_a_body_is_judged_at_once(world: World) -> None:
    _publish(world, "acme.regex", request=regex_schema())
    response = world.invoke({"text": "a" * 10_000 + "!"}, service="acme.regex")
    assert _problem(response) == (422, "REQUEST_SCHEMA_VIOLATION")
    assert [e["pointer"] for e in response.json()["errors"]] == ["/text"]
    world.provider.script(ok({"echo": 1}))
    assert world.invoke({"text": "a" * 10_000}, service="acme.regex", key="k2").status_code == 200


def test_a_result_that_cannot_be_judged_in_time_is_a_contract_violation_and_released(
    world: World,
) -> None:
    for name in TOO_COMPLEX:
        _publish(world, f"acme.{name}", result=HARD_SCHEMAS[name]())
    for number, name in enumerate(TOO_COMPLEX):
        world.provider.script(ok(hard_instance()))
        response = world.invoke({"n": 1}, service=f"acme.{name}", key=f"result-{number}")
        assert _problem(response) == (502, "PROVIDER_CONTRACT_VIOLATION"), (name, response.text)
    assert world.balances() == (100, 0) and world.earnings() == 0
    assert [i.state for i in world.invocations()] == ["FAILED"] * len(TOO_COMPLEX)
    assert world.ledger_balanced()


def test_a_version_published_before_the_rule_keeps_pythons_engine_under_the_deadline(
    world: World,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^(?=[A-Z])\\w+\\d$"},
            "text": {"type": "string", "pattern": "^(a+)+(?!b)$"},
        },
    }
    with world.runtime.db.read() as session:
        connection_id = session.scalars(select(ProviderConnection.id)).one()
    publish_legacy(
        world.runtime,
        connection_id,
        owner_id=world.provider_id,
        service_code="acme.legacy",
        request_schema=schema,
    )
    world.provider.script(ok({"echo": 1}))
    accepted = world.invoke({"code": "AB\u0663"}, service="acme.legacy", key="l1")
    assert accepted.status_code == 200, accepted.text  # Python's \\d, as it was accepted with
    refused = world.invoke({"code": "ab1"}, service="acme.legacy", key="l2")
    assert _problem(refused) == (422, "REQUEST_SCHEMA_VIOLATION")
    hard = world.invoke({"text": "a" * 40 + "!"}, service="acme.legacy", key="l3")
    assert _problem(hard) == (422, "REQUEST_TOO_COMPLEX")
    assert world.balances() == (90, 0) and world.ledger_balanced()

    with world.runtime.db.read() as session:
        listed = list_legacy_pattern_versions(session)
    assert [(v.service_code, v.version, v.state, v.pointers) for v in listed] == [
        (
            "acme.legacy",
            "v1",
            "PUBLISHED",
            (
                "/requestSchema/properties/code/pattern",
                "/requestSchema/properties/text/pattern",
            ),
        )
    ]
