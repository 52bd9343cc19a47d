"""The caller's pages as a product (issue 41 item 4): a listing leads with what it does, its
publisher, its price and the provider's example, with the contract folded under "Technical
details"; cards, the header balance, the sign-up notice and a history of calls, not entries."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from builders.catalog import facts
from builders.invocation_world import CONTRACT, SERVICE, World, running_world
from builders.invocations import CREDENTIAL, ScriptedProvider, defined
from builders.pages import Browser, field_error
from mercato.catalog import service as catalog
from mercato.catalog.models import Listing, Version
from mercato.providers.models import ProviderConnection

EXAMPLE = {"request": {"n": 2}, "result": {"echo": {"n": 2}}}


def _republish(world: World, *, examples: object = None, publisher: str | None = None) -> None:
    """Publish acme.echo v2 with the provider's example and name its publisher."""
    with world.runtime.db.read() as session:
        connection_id = session.scalar(
            select(ProviderConnection.id).where(ProviderConnection.owner_id == world.provider_id)
        )
    assert connection_id is not None
    connection = facts(world.runtime, connection_id)
    with world.runtime.db.transaction() as session:
        catalog.publish(
            session,
            service_code=SERVICE,
            display_name="Echo",
            version="v2",
            connection=connection,
            price=1,
            contract=CONTRACT,
            description="Echoes the request back.",
            examples=examples,
            publisher_name=publisher,
            now=world.clock.now(),
        )


def test_the_listing_leads_with_what_it_does_who_publishes_it_its_price_and_an_example(
    world: World, person: Browser
) -> None:
    _republish(world, examples=[EXAMPLE], publisher="Acme  Echo Works")
    page = html.unescape(person.get(f"/listings/{SERVICE}").text)
    assert '<p class="what">Echoes the request back.</p>' in page
    assert '<dd id="publisher">Acme Echo Works</dd>' in page  # spaces folded
    assert "<strong>1 point</strong> per successful call of v2" in page  # singular
    request = re.search(r'id="example-request-1">(.*?)</pre>', page, re.S)
    result = re.search(r'id="example-result-1">(.*?)</pre>', page, re.S)
    assert request and '"n": 2' in request.group(1)
    assert result and '"echo": {\n    "n": 2\n  }' in result.group(1)
    # The contract is one click away, under "Technical details", after what a person needs.
    technical = page.index('<details class="card technical" id="technical">')
    assert page.index('id="publisher"') < page.index('id="example"') < technical
    assert page.index("Contract digest") > technical and page.index("Adapter") > technical
    assert page.index("Request schema") > technical


def test_a_listing_without_a_publisher_or_example_says_so_plainly(
    world: World, person: Browser
) -> None:
    page = person.get(f"/listings/{SERVICE}").text
    assert "not named by the provider" in page and 'id="example"' not in page
    assert "<strong>10 points</strong> per successful call of v1" in page


def test_catalog_cards_show_publisher_price_and_a_one_line_description(
    world: World, person: Browser
) -> None:
    _republish(world, examples=[EXAMPLE], publisher="Acme")
    page = person.get("/").text
    card = page[page.index(f'href="/listings/{SERVICE}"') :]
    card = card[: card.index("</li>")]
    assert 'by <span class="publisher">Acme</span>' in card
    assert '<p class="one-line" title="Echoes the request back.">' in card
    assert "<strong>1 point</strong> per call" in card and "2 versions" in card


def test_the_header_shows_the_balance_on_every_page_for_a_signed_in_person(
    world: World, person: Browser
) -> None:
    for path in ("/", f"/listings/{SERVICE}", "/receipts", "/cases", "/account", "/provider"):
        page = person.get(path).text
        assert re.search(r'id="header-balance"[^>]*>Account · <strong>100 points</strong>', page)
    assert 'id="header-balance"' not in Browser(world).get("/").text  # signed out: none


def test_history_is_one_line_per_call_with_its_ledger_entries_one_click_away(
    world: World, person: Browser
) -> None:
    world.clock.advance(1)
    person.get(f"/listings/{SERVICE}")
    first = {"idempotency_key": "h-1", "body": '{"n": 3}'}
    assert person.post(f"/listings/{SERVICE}/versions/v1/call", first).status_code == 303
    world.clock.advance(1)
    world.provider.script(defined())
    person.post(
        f"/listings/{SERVICE}/versions/v1/call", {"idempotency_key": "h-2", "body": '{"n": 1}'}
    )
    page = person.get("/account").text
    table = page[page.index('<table id="history">') :]
    rows = re.findall(r'<tr class="history-(\w+)">', table)
    assert rows == ["call", "call", "grant"]  # newest first: two calls and the grant
    assert 'header-balance"' in page and "<strong>90 points</strong>" in page
    lines = re.findall(r'<tr class="history-call">.*?</details></td>', table, re.S)
    failed, settled = lines
    assert "failed: nothing spent" in failed and ">0<" in failed
    assert "10 points spent" in settled and ">-10<" in settled
    # Each line folds its ledger entries: reserve + release (two legs each), reserve + the
    # settle's debit of the caller's reserved points (the other legs are not the caller's).
    assert "<summary>4 ledger entries</summary>" in failed
    assert "<summary>3 ledger entries</summary>" in settled
    assert failed.count("<td>release</td>") == 2 and settled.count("<td>settle</td>") == 1
    assert re.search(r'href="/receipts/inv_[^"]+">acme.echo v1</a>', settled)


@pytest.fixture
def generous(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, signup_points=40) as built:
        yield built


def test_sign_up_says_how_many_points_arrived(generous: World) -> None:
    world = generous
    browser = Browser(world)
    browser.get("/signup")
    made = browser.post("/signup", {"email": "new@example.com", "password": "long enough pw"})
    landed = browser.follow(made)
    assert "Welcome! Your account is ready, and 40 points arrived to spend." in landed.text
    one = Browser(world).get("/?notice=signed-up&points=1").text
    assert "and 1 point arrived" in one


def test_the_report_form_preselects_nothing(world: World, person: Browser) -> None:
    page = person.get(f"/listings/{SERVICE}").text
    select_tag = re.search(r'<select id="f-category"[^>]*>(.*?)</select>', page, re.S)
    assert select_tag and "required" in page[page.index('<select id="f-category"') :][:80]
    options = re.findall(r"<option[^>]*>", select_tag.group(1))
    assert options[0] == '<option value="" selected disabled>'
    assert all("selected" not in o for o in options[1:])


def test_a_person_cannot_make_the_sign_up_notice_say_anything_but_a_number(
    world: World,
) -> None:
    page = Browser(world).get("/?notice=signed-up&points=<b>9</b>").text
    assert "<b>9</b>" not in page and "Welcome! Your account is ready." in page


def test_the_provider_names_its_publisher_and_sets_an_example_on_its_pages(
    world: World, person: Browser
) -> None:
    person.get("/provider")
    made = person.post(
        "/provider/listings",
        {"service_code": "acme.web-echo", "display_name": "Web echo", "description": "Echoes."},
    )
    assert made.status_code == 303
    person.get("/provider/listings/acme.web-echo")
    path = "/provider/listings/acme.web-echo/publisher"
    too_long = person.post(path, {"publisher_name": "x" * 101})
    assert too_long.status_code == 400 and "at most 100" in field_error(too_long, "publisher_name")
    named = person.post(path, {"publisher_name": "Acme"})
    assert named.status_code == 303
    assert 'value="Acme"' in person.get("/provider/listings/acme.web-echo").text
    done = person.post(
        "/provider/connections",
        {"name": "echo-1", "base_url": world.provider.url, "credential": CREDENTIAL},
    )
    connection_id = done.headers["location"].split("?")[0].rsplit("/", 1)[1]
    form = {"connection_id": connection_id, "price": "5", "contract": json.dumps(CONTRACT)}
    drafted = person.post("/provider/listings/acme.web-echo/drafts", {**form, "version": "v1"})
    version_url = drafted.headers["location"].split("?")[0]
    person.get(version_url)
    wrong = [{"request": {"n": 1}, "result": {"no_echo": True}}]  # the schema requires "echo"
    refused = person.post(version_url, {**form, "examples": json.dumps(wrong)})
    assert refused.status_code == 400 and "/examples/0/result" in field_error(refused, "examples")
    assert "no_echo" in html.unescape(refused.text)  # the text the provider wrote stays
    hostile = [{"request": {"n": 1}, "result": {"echo": "<script>alert(1)</script>"}}]
    assert person.post(version_url, {**form, "examples": json.dumps(hostile)}).status_code == 303
    with world.runtime.db.read() as session:
        listing_id = select(Listing.id).where(Listing.service_code == "acme.web-echo")
        stored = session.scalar(select(Version.examples).where(Version.listing_id.in_(listing_id)))
    assert stored == hostile
    page = person.get(version_url).text
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
