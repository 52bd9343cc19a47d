"""The catalog page's search runs the API's rule in the database and pages with cursors."""

from __future__ import annotations

import re

from builders.catalog import make_provider, publish
from builders.invocation_world import SERVICE, World
from builders.pages import Browser
from mercato.web.pages.catalog import PAGE_SIZE


def _codes(html: str) -> list[str]:
    return re.findall(r'<a href="/listings/([^"]+)">', html)


def test_search_is_literal_and_pages_past_the_first(world: World) -> None:
    _, connection_id = make_provider(world.runtime, "maps@example.com")
    codes = [f"acme.map-{i:02d}" for i in range(PAGE_SIZE + 2)]
    for code in codes:
        publish(world.runtime, connection_id, service_code=code, display_name="Maps 100%")
    browser = Browser(world)
    assert _codes(browser.get("/?q=%25").text)[:1] == ["acme.map-00"]
    assert SERVICE not in _codes(browser.get("/?q=%25").text)
    first = browser.get("/?q=MAPS")
    assert first.status_code == 200 and _codes(first.text) == codes[:PAGE_SIZE]
    found = re.search(r'<a href="([^"]+)" rel="next">', first.text)
    assert found is not None
    second = browser.get(found.group(1).replace("&amp;", "&"))
    assert _codes(second.text) == codes[PAGE_SIZE:]
    assert 'rel="next"' not in second.text


def test_a_search_over_200_characters_is_refused(world: World) -> None:
    page = Browser(world).get("/", params={"q": "a" * 201})
    assert page.status_code == 400 and "at most 200 characters" in page.text
