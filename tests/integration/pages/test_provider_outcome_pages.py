"""A provider sees how its version's last calls ended, by outcome and error code, on the
version's page: the platform's failures and its own defined failures, counted, never who called
or what they sent (issue 41 item 3, decision 0556; both stores)."""

from __future__ import annotations

import html
import re

from sqlalchemy import select

from builders.accounts import DEFAULT_PASSWORD
from builders.invocation_world import World
from builders.invocations import ScriptedProvider, defined, ok, retryable
from builders.pages import PERSON, Browser
from mercato.accounts import service as accounts
from mercato.catalog.models import Version
from mercato.web.pages import queries

PROVIDER = "provider@example.com"
MARKER = 73951  # in every payload sent: it must not reach the provider's page


def _provider_browser(world: World) -> Browser:
    with world.runtime.db.transaction() as session:
        accounts.set_password_hash(
            session,
            account_id=world.provider_id,
            password_hash=accounts.hash_password(DEFAULT_PASSWORD),
        )
    browser = Browser(world)
    browser.login(PROVIDER)
    return browser


def _rows(page: str) -> list[tuple[str, str, int]]:
    found = re.findall(
        r'<tr class="outcome-row"><td>(\w+)</td><td class="mono">(.*?)</td>'
        r'<td class="amount">(\d+)</td></tr>',
        page,
    )
    # Tags dropped first: the provider's own text arrives escaped, so it is not one of them.
    return [
        (outcome, html.unescape(re.sub(r"<[^>]+>", "", code)), int(calls))
        for outcome, code, calls in found
    ]


def test_the_version_page_counts_the_last_calls_by_outcome_and_code(
    world: World, provider: ScriptedProvider, people: dict[str, str]
) -> None:
    hostile = "<b>HOSTILE</b>"
    provider.script(
        ok({"echo": 1}),
        ok({"echo": 2}),
        ok({"no_echo": 3}),  # the result schema requires `echo`: a contract violation
        defined(400, "OUT_OF_STOCK"),
        defined(409, "OUT_OF_STOCK"),
        defined(422, hostile),
        retryable(),
        retryable(),
        retryable(),
    )
    for number in range(7):
        world.invoke({"n": MARKER, "tags": [f"call-{number}"]}, key=f"k{number}")
    with world.runtime.db.read() as session:
        version_id = session.scalars(select(Version.id)).one()
    browser = _provider_browser(world)

    page = browser.get(f"/provider/versions/{version_id}").text
    section = page[page.index('id="recent-outcomes"') :]
    section = section[: section.index("</section>")]
    assert sorted(_rows(section)) == sorted(
        [
            ("SUCCEEDED", "", 2),
            ("FAILED", "OUT_OF_STOCK (your defined failure)", 2),
            ("FAILED", "PROVIDER_CONTRACT_VIOLATION", 1),
            ("FAILED", "PROVIDER_UNAVAILABLE", 1),
            ("FAILED", f"{hostile} (your defined failure)", 1),
        ]
    )
    assert hostile not in page and html.escape(hostile) in page  # the provider's text, escaped
    assert "The last 7 calls of this version" in section
    assert "Run your project" in section and "test_provider.py" in section
    # Counts only: no caller's identity, no payload, no call ids in this section.
    for secret in (PERSON, world.caller_id, str(MARKER), "call-0", "inv_"):
        assert secret not in section
    assert str(MARKER) not in page


def test_only_the_last_calls_are_counted(
    world: World, provider: ScriptedProvider, people: dict[str, str]
) -> None:
    provider.script(defined(400, "OLD_FAILURE"), ok(), ok())
    for number in range(3):
        world.clock.advance(1)
        world.invoke({"n": number}, key=f"k{number}")
    with world.runtime.db.read() as session:
        version_id = session.scalars(select(Version.id)).one()
        assert queries.version_outcomes(session, version_id=version_id, limit=2) == [
            queries.OutcomeCount("SUCCEEDED", None, False, 2)
        ]
        assert queries.version_outcomes(session, version_id=version_id) == [
            queries.OutcomeCount("SUCCEEDED", None, False, 2),
            queries.OutcomeCount("FAILED", "OLD_FAILURE", True, 1),
        ]


def test_another_account_cannot_read_a_versions_outcomes(
    world: World, other: Browser, people: dict[str, str]
) -> None:
    with world.runtime.db.read() as session:
        version_id = session.scalars(select(Version.id)).one()
    assert other.get(f"/provider/versions/{version_id}").status_code == 404
