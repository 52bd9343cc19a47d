"""The listing and the account history as a caller sees them in real Chromium, on both stores
(issue 41 item 4): what the service does, who publishes it, its price and the provider's example
first, the contract folded under "Technical details"; the balance in the header; one history line
per call with its ledger entries one click away; a new key's underscores visible.
With MERCATO_SCREENSHOTS=1 the test also writes the pictures in docs/web.md."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from builders.browser import PASSWORD, Platform, publish_ranking

pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

CALLER = "reader@example.com"
SERVICE = "pixiv.daily-ranking"
DOC_SHOTS = Path(__file__).resolve().parents[3] / "docs" / "images" / "web"


def _shot(page: Any, name: str, db_url: str) -> None:
    """The picture for docs/web.md, taken once (on SQLite) when MERCATO_SCREENSHOTS=1."""
    if os.environ.get("MERCATO_SCREENSHOTS") == "1" and db_url.startswith("sqlite"):
        DOC_SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOC_SHOTS / f"{name}.png"), full_page=True)


def _log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Email").fill(CALLER)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"^(?!.*/login).*$"))


def test_the_listing_reads_as_a_product_and_the_history_as_purchases(
    platform: Platform, ranking_url: str, new_page: Any, db_url: str
) -> None:
    publish_ranking(platform, ranking_url, publisher="Mercato (run by the platform)", examples=True)
    platform.cli("admin", "create-account", CALLER, "--password", PASSWORD, "--points", "21")
    base = platform.url
    page = new_page()
    _log_in(page, base)

    # The catalog card: publisher, price, one line of description.
    page.goto(f"{base}/")
    card = page.locator("li.listing-card", has_text="Daily ranking")
    assert card.locator(".publisher").inner_text() == "Mercato (run by the platform)"
    assert "5 points per call" in card.inner_text()
    line = card.locator(".one-line")
    assert line.evaluate("el => getComputedStyle(el).whiteSpace") == "nowrap"
    _shot(page, "catalog-cards", db_url)
    assert page.locator("#header-balance").inner_text() == "Account · 21 points"

    # The listing leads with what it does, who, how much and an example; the contract waits.
    page.goto(f"{base}/listings/{SERVICE}")
    lead = page.locator("#listing-lead")
    assert "Snapshots of three daily charts" in lead.inner_text()
    assert page.locator("#publisher").inner_text() == "Mercato (run by the platform)"
    assert page.locator("#price").inner_text().startswith("5 points per successful call of v1")
    request = page.locator("#example-request-1")
    result = page.locator("#example-result-1")
    assert request.is_visible() and '"chart": "illust"' in request.inner_text()
    assert result.is_visible() and '"entries"' in result.inner_text()
    lead_top = lead.bounding_box()["y"]
    technical = page.locator("#technical")
    assert lead_top < request.bounding_box()["y"] < technical.bounding_box()["y"]
    digest = technical.locator(".digest").first
    assert not digest.is_visible()  # folded
    _shot(page, "listing-product", db_url)
    technical.locator("summary").click()
    assert digest.is_visible() and re.fullmatch(r"[0-9a-f]{64}", digest.inner_text())
    assert technical.get_by_text("vetted.http-json/v1").is_visible()
    # The report form chooses nothing for the caller.
    category = page.locator("#f-category")
    assert category.input_value() == "" and category.get_attribute("required") is not None

    # Two calls: one settles (5 points), one the provider refuses (nothing spent).
    page.get_by_label(re.compile(r"^chart")).select_option("manga")
    page.get_by_label(re.compile(r"^limit")).fill("2")
    page.get_by_role("button", name="Call it", exact=True).click()
    page.wait_for_url(re.compile(r"/receipts/inv_"))
    assert page.locator("#header-balance").inner_text() == "Account · 16 points"
    page.goto(f"{base}/listings/{SERVICE}")
    page.get_by_text("JSON mode (for experts)").click()
    page.get_by_label(re.compile("^Request body")).fill('{"chart": "manga", "snapshotId": "none"}')
    page.get_by_role("button", name="Call with this JSON").click()
    page.wait_for_url(re.compile(r"/receipts/inv_"))

    # The history: one line per call and the grant; the ledger entries one click away.
    page.goto(f"{base}/account")
    rows = page.locator("#history > tbody > tr")
    assert [r.get_attribute("class") for r in rows.all()] == [
        "history-call",
        "history-call",
        "history-grant",
    ]
    failed, settled = rows.nth(0), rows.nth(1)
    assert "failed: nothing spent" in failed.inner_text()
    assert "5 points spent" in settled.inner_text()
    entries = settled.locator("table.entries")
    assert not entries.is_visible()
    settled.locator("summary").click()
    assert entries.is_visible() and entries.locator("tbody tr").count() == 3
    _shot(page, "account-history", db_url)

    # A new key shows its underscores: a monospace font with room below the baseline.
    page.get_by_label("Key name").fill("laptop")
    page.get_by_role("button", name="Create key").click()
    key = page.locator("#new-key")
    assert key.input_value().startswith("mercato_live_")
    style = key.evaluate(
        "el => { const s = getComputedStyle(el); return [s.fontFamily, parseFloat(s.lineHeight),"
        " parseFloat(s.fontSize), el.clientHeight]; }"
    )
    family, line_height, font_size, height = style
    assert "monospace" in family and line_height >= 1.5 * font_size and height >= line_height
    _shot(page, "new-key", db_url)
