"""The worker's queue (`invocation_dues`, migration 0023, decision 0602): it holds exactly the
calls that are not terminal, whatever ends them, and no index of `invocations` names a column
that a terminal move writes, so that on PostgreSQL a settle is a HOT update."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, select, text

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider, defined, ok, unknown
from mercato.db.migrate import alembic_config, upgrade
from mercato.invocations import money
from mercato.invocations import service as invocations
from mercato.invocations.models import InvocationDue
from mercato.invocations.schemas import Decision
from mercato.worker import loops


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, stuck_after_attempts=2) as built:
        yield built


def _dues(world: World) -> set[str]:
    with world.runtime.db.read() as session:
        return set(session.scalars(select(InvocationDue.invocation_id)))


def _call(world: World, key: str, status: int) -> str:
    response = world.invoke({"n": 1}, key=key)
    assert response.status_code == status, response.text
    return str(response.json()["invocationId"])


def test_the_queue_holds_exactly_the_calls_not_terminal(world: World) -> None:
    world.provider.script(ok())
    _call(world, "settled", 200)
    world.provider.script(defined(422, "NOPE"))
    assert world.invoke({"n": 1}, key="failed").status_code == 422
    assert _dues(world) == set()

    world.provider.script(unknown())
    pending = _call(world, "pending", 202)
    world.provider.script(unknown())
    stuck = _call(world, "stuck", 202)
    assert _dues(world) == {pending, stuck}

    # The worker finds them through the queue; the provider's stored outcome settles one.
    world.provider.script_reconciliation(ok(), unknown())
    world.clock.advance(3600)
    assert run_on_fresh_loop(loops.run_once(world.runtime)) == 2
    remaining = _dues(world)
    assert len(remaining) == 1 and remaining < {pending, stuck}

    # A staff resolution ends the other one.
    (left,) = remaining
    with world.runtime.db.transaction() as session:
        invocations.resolve(
            session,
            invocation_id=left,
            decision=Decision.FAILED,
            reason="checked",
            actor="staff-1",
            now=world.clock.now(),
        )
    assert _dues(world) == set()


def test_no_index_of_invocations_names_a_column_a_terminal_move_writes(world: World) -> None:
    written = {
        *money.SUCCESS_COLUMNS,
        *money.FAILURE_COLUMNS,
        *money.RESOLUTION_COLUMNS,
        "lease_owner",
        "lease_expires_at",
        "next_attempt_at",
    }
    with world.runtime.db.engine.connect() as conn:
        found = inspect(conn)
        indexed = {
            column for index in found.get_indexes("invocations") for column in index["column_names"]
        }
        indexed |= {
            column
            for unique in found.get_unique_constraints("invocations")
            for column in unique["column_names"]
        }
        indexed |= set(found.get_pk_constraint("invocations")["constrained_columns"])
        if conn.dialect.name == "postgresql":
            definitions = conn.execute(
                text("SELECT indexdef FROM pg_indexes WHERE tablename = 'invocations'")
            ).scalars()
            options = conn.execute(
                text("SELECT reloptions FROM pg_class WHERE relname = 'invocations'")
            ).scalar()
            assert options == ["fillfactor=50"]  # room on the page for the HOT update
        else:
            definitions = conn.execute(
                text(
                    "SELECT sql FROM sqlite_master WHERE tbl_name = 'invocations' "
                    "AND type = 'index' AND sql IS NOT NULL"
                )
            ).scalars()
        predicates = " ".join(
            str(d).split(" WHERE ", 1)[1] for d in definitions if " WHERE " in str(d)
        )
    assert indexed, "the inspector found the indexes"
    assert indexed.isdisjoint(written)
    assert not any(column in predicates for column in written)


def test_the_migration_fills_the_queue_and_its_downgrade_gives_the_indexes_back(
    world: World,
) -> None:
    world.provider.script(ok())
    _call(world, "settled", 200)
    world.provider.script(unknown())
    pending = _call(world, "pending", 202)
    engine = world.runtime.db.engine

    command.downgrade(alembic_config(engine), "0022_lean_ledger")
    with engine.connect() as conn:
        found = inspect(conn)
        assert "invocation_dues" not in found.get_table_names()
        names = {index["name"] for index in found.get_indexes("invocations")}
    assert {
        "ix_invocations_state_stuck_at_next_attempt_at",
        "ix_invocations_api_key_id_created_at",
    } <= names

    upgrade(engine)
    assert _dues(world) == {pending}
