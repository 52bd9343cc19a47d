"""Points from the web: a staff grant with its reason, and the optional sign-up grant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider
from builders.pages import PERSON, Browser, field_error
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerTransfer
from mercato.settings import Settings


def _available(world: World, account_id: str) -> int:
    with world.runtime.db.read() as session:
        return ledger.balances(session, account_id=account_id).available


def _transfers(world: World) -> int:
    with world.runtime.db.read() as session:
        return int(session.scalar(select(func.count()).select_from(LedgerTransfer)) or 0)


def test_staff_grant_is_kept_with_its_reason_and_shown_on_the_history(
    world: World, people: dict[str, str], staff: Browser, person: Browser
) -> None:
    staff.get("/staff")
    form = {"email": PERSON, "amount": "25", "grant_reason": "Conference speaker bonus"}
    done = staff.post("/staff/grants", form)
    assert done.status_code == 303
    assert _available(world, people[PERSON]) == 125
    history = person.get("/account").text
    assert "Conference speaker bonus" in history and "+25" in history
    assert staff.get("/staff").status_code == 200


@pytest.mark.parametrize(
    ("amount", "reason", "field"),
    [
        ("0", "gift", "amount"),
        ("-5", "gift", "amount"),
        ("ten", "gift", "amount"),
        ("1_000", "gift", "amount"),
        ("", "gift", "amount"),
        (str(10**15 + 1), "gift", "amount"),
        ("9" * 40, "gift", "amount"),
        ("5", "", "grant_reason"),
        ("5", "x" * 201, "grant_reason"),
    ],
)
def test_invalid_grants_are_shown_with_422_and_write_nothing(
    world: World,
    people: dict[str, str],
    staff: Browser,
    amount: str,
    reason: str,
    field: str,
) -> None:
    before = _transfers(world)
    staff.get("/staff")
    page = staff.post("/staff/grants", {"email": PERSON, "amount": amount, "grant_reason": reason})
    assert page.status_code == 422
    assert field_error(page, field)
    assert _transfers(world) == before and _available(world, people[PERSON]) == 100


def test_grant_to_an_unknown_email_is_422(world: World, people: object, staff: Browser) -> None:
    before = _transfers(world)
    staff.get("/staff")
    form = {"email": "nobody@example.com", "amount": "5", "grant_reason": "gift"}
    page = staff.post("/staff/grants", form)
    assert page.status_code == 422 and field_error(page, "email")
    assert _transfers(world) == before


def test_the_biggest_grant_is_accepted(
    world: World, people: dict[str, str], staff: Browser
) -> None:
    staff.get("/staff")
    form = {"email": PERSON, "amount": str(10**15), "grant_reason": "max"}
    assert staff.post("/staff/grants", form).status_code == 303
    assert _available(world, people[PERSON]) == 100 + 10**15


@pytest.fixture
def generous(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, signup_points=40) as built:
        yield built


def _sign_up(world: World, email: str) -> Browser:
    browser = Browser(world)
    browser.get("/signup")
    done = browser.post("/signup", {"email": email, "password": "long enough pw"})
    assert done.status_code == 303
    return browser


def test_sign_up_grant_is_applied_once_with_its_reason(generous: World) -> None:
    browser = _sign_up(generous, "new@example.com")
    history = browser.get("/account").text
    assert "sign-up" in history and "+40" in history
    again = Browser(generous)
    again.get("/signup")
    taken = again.post("/signup", {"email": "new@example.com", "password": "long enough pw"})
    assert taken.status_code == 400
    with generous.runtime.db.read() as session:
        grants = session.scalars(select(LedgerTransfer).where(LedgerTransfer.memo == "sign-up"))
        assert len(list(grants)) == 1
        assert ledger.verify(session).balanced


def test_no_sign_up_grant_by_default(world: World) -> None:
    browser = _sign_up(world, "plain@example.com")
    assert "sign-up" not in browser.get("/account").text
    with world.runtime.db.read() as session:
        assert session.scalar(select(func.count()).where(LedgerTransfer.memo == "sign-up")) == 0


@pytest.mark.parametrize("value", ["-1", "1000000000000001", "lots"])
def test_a_bad_signup_points_setting_is_refused(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERCATO_SIGNUP_POINTS", value)
    with pytest.raises(ValueError, match="signup_points"):
        Settings(env="dev")
