"""A caller's whole way through the web in real Chromium, on a real `mercato serve`.

Sign up, get points from staff, find the service by search, call it from the form built from its
schema (the browser's checks, then the server's problem details beside the field), copy the curl
line and run it against the live server, see the ranking with its thumbnails and the result tree,
download an artifact under its right name, all keyboard-reachable and at 375 px wide, with no
off-site request. With MERCATO_SCREENSHOTS=1 the test also writes the pictures in docs/web.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.browser import PROVIDER_EMAIL, STAFF_EMAIL, Platform, publish_ranking
from builders.platform_process import Serve, platform_env

# The browser drives pages whose queries run on both stores in tests/integration/pages; here
# only the browser side is under test, on the embedded default (decision 0390).
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only, pytest.mark.timeout(900)]

CALLER = "reader@example.com"
PASSWORD = "correct horse battery staple"
DOC_SHOTS = Path(__file__).resolve().parents[3] / "docs" / "images" / "web"
UNLABELLED = """[...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
  .filter(el => !(el.id && document.querySelector(`label[for="${el.id}"]`))).length"""

WIDER_THAN_THE_WINDOW = """document.documentElement.scrollWidth <= window.innerWidth + 1 ? [] :
  [...document.querySelectorAll('body *')]
    .filter(el => el.getBoundingClientRect().right > window.innerWidth + 1)
    .map(el => el.tagName + '.' + el.className + '#' + el.id).slice(0, 8)"""


def doc_screenshot(page: Any, name: str) -> None:
    """The picture of a caller page for docs/web.md, only when MERCATO_SCREENSHOTS=1."""
    if os.environ.get("MERCATO_SCREENSHOTS") == "1":
        DOC_SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOC_SHOTS / f"{name}.png"), full_page=True)


def watch_requests(page: Any, base: str) -> list[str]:
    """Every address the page asks for that is not on the platform's own origin."""
    off_site: list[str] = []

    def seen(request: Any) -> None:
        if not request.url.startswith(base + "/") and not request.url.startswith("data:"):
            off_site.append(request.url)

    page.on("request", seen)
    return off_site


def check_page(page: Any, title: str) -> None:
    """Titled, every field labelled, nothing wider than the window."""
    assert page.title() == f"{title} · Mercato"
    assert page.evaluate(UNLABELLED) == 0
    too_wide = page.evaluate(WIDER_THAN_THE_WINDOW)
    assert too_wide == [], too_wide


@pytest.fixture
def signup_platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    """`mercato serve` granting 20 points on sign-up, with a staff and a provider account."""
    env = platform_env(db_url, tmp_path / "platform", MERCATO_SIGNUP_POINTS="20")
    serve = Serve(env, tmp_path / "serve.log")
    platform = Platform(serve.url, env, tmp_path)
    platform.cli("admin", "create-account", STAFF_EMAIL, "--password", PASSWORD, "--staff")
    platform.cli("admin", "create-account", PROVIDER_EMAIL, "--password", PASSWORD)
    try:
        yield platform
    finally:
        serve.stop()


def log_in(page: Any, base: str, email: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"^(?!.*/login).*$"))


def test_a_caller_finds_calls_copies_and_downloads_from_the_web(
    signup_platform: Platform, ranking_url: str, chromium: Any, new_page: Any
) -> None:
    platform = signup_platform
    base = platform.url
    publish_ranking(platform, ranking_url)
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(30_000)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page = context.new_page()
    off_site = watch_requests(page, base)
    try:
        # Sign up.
        page.goto(f"{base}/signup")
        check_page(page, "Sign up")
        doc_screenshot(page, "signup")
        page.get_by_label("Email").fill(CALLER)
        page.get_by_label("Password (at least 8 characters)").fill(PASSWORD)
        page.get_by_role("button", name="Create account").click()
        page.get_by_text(
            "Welcome! Your account is ready, and 20 points arrived to spend."
        ).wait_for()
        page.goto(f"{base}/account")
        assert page.locator("#balance-available").inner_text() == "20"  # MERCATO_SIGNUP_POINTS
        assert "(sign-up)" in page.locator("#main").inner_text()

        # Points from staff, seen on the account's history.
        staff = new_page()
        log_in(staff, base, STAFF_EMAIL)
        staff.goto(f"{base}/staff")
        staff.get_by_label("Account email").fill(CALLER)
        staff.get_by_label("Points").fill("50")
        staff.get_by_label("Reason for the grant").fill("welcome to the ranking")
        staff.get_by_role("button", name="Grant").click()
        staff.get_by_text("Points granted.").wait_for()
        page.goto(f"{base}/account")
        assert page.locator("#balance-available").inner_text() == "70"
        assert "(welcome to the ranking)" in page.locator("#main").inner_text()

        # Find the service by search, from the keyboard.
        page.goto(f"{base}/")
        check_page(page, "Catalog")
        search = page.get_by_label("Search listings")
        search.fill("daily ranking")
        search.press("Enter")
        page.wait_for_url(re.compile(r"\?q=daily\+ranking"))
        doc_screenshot(page, "catalog")
        page.get_by_role("link", name="Daily ranking").click()
        check_page(page, "Daily ranking v1")

        # The form from the schema: an enum select, a bounded number with its default.
        chart = page.get_by_label(re.compile(r"^chart"))
        limit = page.get_by_label(re.compile(r"^limit"))
        assert chart.evaluate("el => el.tagName") == "SELECT"
        assert chart.locator("option").all_inner_texts() == [
            "overall",
            "illust",
            "manga",
        ]
        assert limit.input_value() == "50"
        assert (limit.get_attribute("min"), limit.get_attribute("max")) == ("1", "500")
        chart.focus()
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "p-limit"
        chart.select_option("manga")
        limit.fill("3")
        doc_screenshot(page, "listing")

        # The browser refuses what the schema's bounds say before anything is sent...
        limit.fill("501")
        page.get_by_role("button", name="Call it", exact=True).click()
        assert limit.evaluate("el => el.validity.rangeOverflow") is True
        assert "/listings/" in page.url and page.locator("#p-limit-error").count() == 0
        # ...and the server's problem detail is shown beside the field when it gets through.
        limit.evaluate("el => el.removeAttribute('max')")
        page.get_by_role("button", name="Call it", exact=True).click()
        error = page.locator("#p-limit-error")
        error.wait_for()
        assert "greater than the maximum of 500" in error.inner_text()
        assert page.get_by_label(re.compile(r"^limit")).get_attribute("aria-invalid") == "true"
        doc_screenshot(page, "listing-error")
        page.get_by_label(re.compile(r"^limit")).fill("3")

        # Copy the curl line (the page's own Copy button) and run it against the live server.
        assert '"limit":3' in page.locator("#copy-curl").input_value()
        assert '"chart":"manga"' in page.locator("#copy-curl").input_value()
        page.get_by_role("button", name="Copy curl").click()
        page.get_by_role("button", name="Copied").wait_for()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == page.locator("#copy-curl").input_value()
        assert copied.startswith("curl ") and "/versions/v1:invoke" in copied
        python = page.locator("#copy-python").input_value()
        assert '"limit": 3' in python and "idempotency_key=" in python
        keys = context.new_page()
        keys.goto(f"{base}/account")
        keys.get_by_label("Key name").fill("terminal")
        keys.get_by_label("Spend limit (points)").fill("100")
        keys.get_by_label("Per").select_option("WEEK")
        keys.get_by_role("button", name="Create key").click()
        api_key = keys.locator("#new-key").input_value()
        ran = subprocess.run(
            ["bash", "-c", copied],
            env={"PATH": os.environ["PATH"], "MERCATO_API_KEY": api_key},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        answer = json.loads(ran.stdout)
        assert answer["result"]["chart"] == "manga" and len(answer["result"]["entries"]) == 3
        # The key's row shows its limit and what the call spent of it this week.
        keys.goto(f"{base}/account")
        check_page(keys, "Account")
        limited = keys.locator("tr", has_text="terminal")
        assert "100 per week" in limited.inner_text()
        assert limited.locator("[data-spent]").inner_text() == "5"  # publish_ranking's price
        keys.close()

        # The JSON mode for experts: the copies follow its text too.
        page.get_by_text("JSON mode (for experts)").click()
        page.get_by_label(re.compile("^Request body")).fill('{"chart": "illust", "limit": 2}')
        assert '"chart":"illust","limit":2' in page.locator("#copy-curl").input_value()
        page.get_by_text("JSON mode (for experts)").click()  # closed again

        # Call it from the form: the receipt shows the chart with its thumbnails.
        page.get_by_role("button", name="Call it", exact=True).click()
        page.wait_for_url(re.compile(r"/receipts/inv_"))
        check_page(page, page.title().removesuffix(" · Mercato"))
        assert "SUCCEEDED" in page.locator("#receipt-status").inner_text()
        rows = page.locator("#ranking tbody tr")
        assert rows.count() == 3
        entries = answer["result"]["entries"]
        for i, entry in enumerate(entries):
            cells = rows.nth(i).locator("td")
            assert cells.nth(0).inner_text() == str(entry["rank"])
            assert cells.nth(2).inner_text() == entry["title"]
            assert cells.nth(3).inner_text() == entry["author"]
            assert cells.nth(4).locator("a").get_attribute("href") == entry["link"]
            thumb = cells.nth(1).locator("img")
            thumb.scroll_into_view_if_needed()
            assert (thumb.get_attribute("src") or "").startswith("/receipts/")
            assert page.wait_for_function(
                "img => img.complete && img.naturalWidth > 0", arg=thumb.element_handle()
            )

        # The result as a collapsible tree, highlighted by type.
        tree = page.locator("#result .tree")
        assert tree.locator("details").first.get_attribute("open") == ""
        assert tree.locator(".j-str", has_text='"manga"').count() >= 1
        entries_node = tree.locator("summary", has_text='"entries"')
        entries_node.click()  # collapses
        assert entries_node.locator("xpath=..").get_attribute("open") is None
        entries_node.focus()
        page.keyboard.press("Enter")  # and opens again from the keyboard
        assert entries_node.locator("xpath=..").get_attribute("open") == ""
        doc_screenshot(page, "receipt")

        # Download an artifact: saved as <artifactId>.<extension>, the bytes of its digest.
        manifest = {a["artifactId"]: a for a in answer["artifacts"]}
        with page.expect_download() as info:
            page.get_by_role("link", name="Download thumb-1.png").click()
        download = info.value
        assert download.suggested_filename == "thumb-1.png"
        data = Path(download.path()).read_bytes()
        assert hashlib.sha256(data).hexdigest() == manifest["thumb-1"]["digest"]

        # The receipts list and the account page.
        page.goto(f"{base}/receipts")
        check_page(page, "Receipts")
        doc_screenshot(page, "receipts")
        page.goto(f"{base}/account")
        check_page(page, "Account")
        assert page.locator("#balance-available").inner_text() == "60"  # 70 - two 5-point calls
        doc_screenshot(page, "account")
        page.goto(f"{base}/cases")
        check_page(page, "My cases")
        assert off_site == []
    finally:
        context.close()

    # 375 px wide: every caller page reflows, titled, labelled, with no off-site request.
    phone_context = chromium.new_context(viewport={"width": 375, "height": 812})
    phone_context.set_default_timeout(30_000)
    phone = phone_context.new_page()
    phone_off_site = watch_requests(phone, base)
    try:
        phone.goto(f"{base}/login")
        check_page(phone, "Log in")
        doc_screenshot(phone, "login-phone")
        log_in(phone, base, CALLER)
        mine = httpx.get(f"{base}/v1/invocations", headers={"Authorization": f"Bearer {api_key}"})
        receipt_id = mine.json()["items"][0]["invocationId"]
        for title, path in (
            ("Catalog", "/"),
            ("Daily ranking v1", "/listings/pixiv.daily-ranking"),
            (f"Receipt {receipt_id}", f"/receipts/{receipt_id}"),
            ("Receipts", "/receipts"),
            ("Account", "/account"),
            ("My cases", "/cases"),
        ):
            phone.goto(base + path)
            check_page(phone, title)
        phone.goto(f"{base}/listings/pixiv.daily-ranking")
        doc_screenshot(phone, "listing-phone")
        assert phone_off_site == []
    finally:
        phone_context.close()
