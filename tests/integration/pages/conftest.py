"""Page tests: the invocation world (scripted provider, published acme.echo v1) plus browsers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.accounts import make_account
from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider
from builders.pages import OTHER, PERSON, STAFF, Browser
from mercato.ledger import service as ledger


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider) as built:
        yield built


@pytest.fixture
def people(world: World) -> dict[str, str]:
    """A person with 100 points, another person and a staff member (all with passwords)."""
    ids = {
        PERSON: make_account(world.runtime.db, PERSON),
        OTHER: make_account(world.runtime.db, OTHER),
        STAFF: make_account(world.runtime.db, STAFF, is_staff=True),
    }
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=ids[PERSON], amount=100, now=world.clock.now())
    return ids


@pytest.fixture
def person(world: World, people: dict[str, str]) -> Browser:
    browser = Browser(world)
    browser.login(PERSON)
    return browser


@pytest.fixture
def other(world: World, people: dict[str, str]) -> Browser:
    browser = Browser(world)
    browser.login(OTHER)
    return browser


@pytest.fixture
def staff(world: World, people: dict[str, str]) -> Browser:
    browser = Browser(world)
    browser.login(STAFF)
    return browser
