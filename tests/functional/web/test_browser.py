"""End-to-end through a real browser: callers, providers and staff on a real `mercato serve`."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from builders.browser import (
    PASSWORD,
    PROVIDER_EMAIL,
    SERVICE,
    STAFF_EMAIL,
    Platform,
    publish_ranking,
    screenshot,
)
from mercato.catalog.examples import example_contract

# The browser drives pages whose queries run on both stores in tests/integration/pages; here
# only the browser side is under test, on the embedded default (decision 0390).
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only, pytest.mark.timeout(900)]

CALLER = "caller@example.com"


def log_in(page: Any, base: str, email: str, password: str = PASSWORD) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"^(?!.*/login).*$"))


def fits_phone_width(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


def test_a_caller_calls_sees_thumbnails_manages_keys_and_gets_a_refund(
    platform: Platform, ranking_url: str, new_page: Any
) -> None:
    base = platform.url
    publish_ranking(platform, ranking_url)

    # Sign up, log out, log in again.
    page = new_page()
    page.goto(f"{base}/signup")
    assert page.title() == "Sign up · Mercato"
    page.get_by_label("Email").fill(CALLER)
    page.get_by_label("Password (at least 8 characters)").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    page.get_by_text("Welcome! Your account is ready.").wait_for()
    page.get_by_role("button", name=re.compile("Log out")).click()
    page.get_by_text("You have been signed out.").wait_for()
    log_in(page, base, CALLER)

    # Staff grant the caller points from the staff console.
    staff = new_page()
    log_in(staff, base, STAFF_EMAIL)
    staff.goto(f"{base}/staff")
    staff.get_by_label("Account email").fill(CALLER)
    staff.get_by_label("Points").fill("100")
    staff.get_by_label("Reason for the grant").fill("welcome points")
    staff.get_by_role("button", name="Grant").click()
    staff.get_by_text("Points granted.").wait_for()

    # The catalog and the listing, then a call from the listing page.
    page.goto(f"{base}/")
    page.get_by_role("link", name="Daily ranking").wait_for()
    screenshot(page, "catalog")
    page.get_by_role("link", name="Daily ranking").click()
    assert page.title() == "Daily ranking v1 · Mercato"
    page.get_by_text("Technical details").click()  # the contract is folded (decision 0561)
    page.get_by_text("Contract digest").wait_for()
    screenshot(page, "listing")
    page.get_by_text("JSON mode (for experts)").click()  # the expert's way
    page.get_by_label(re.compile("Request body")).fill(json.dumps({"chart": "manga", "limit": 3}))
    page.get_by_role("button", name="Call with this JSON").click()
    page.wait_for_url(re.compile(r"/receipts/inv_"))
    receipt_url = page.url
    assert "SUCCEEDED" in page.locator("#receipt-status").inner_text()
    thumbs = page.locator("img.thumb")
    thumbs.nth(2).wait_for()
    assert thumbs.count() == 3
    for i in range(3):
        thumbs.nth(i).scroll_into_view_if_needed()
        src = thumbs.nth(i).get_attribute("src")
        assert src is not None and src.startswith("/receipts/")  # from the platform only
        loaded = page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=thumbs.nth(i).element_handle()
        )
        assert loaded
    screenshot(page, "receipt")

    # Phone width: the pages reflow instead of scrolling sideways.
    phone = new_page(phone=True)
    log_in(phone, base, CALLER)
    for name, path in (
        ("catalog", "/"),
        ("listing", f"/listings/{SERVICE}"),
        ("receipt", receipt_url.removeprefix(base)),
        ("account", "/account"),
    ):
        phone.goto(base + path)
        assert fits_phone_width(phone), path
        screenshot(phone, f"{name}-phone")

    # An API key: shown once, works on /v1, revoked with confirmation, then 401.
    page.goto(f"{base}/account")
    page.get_by_label("Key name").fill("e2e")
    page.get_by_role("button", name="Create key").click()
    api_key = page.locator("#new-key").input_value()
    assert api_key.startswith("mercato_live_")
    headers = {"Authorization": f"Bearer {api_key}"}
    assert httpx.get(f"{base}/v1/balance", headers=headers).status_code == 200
    page.goto(f"{base}/account")
    assert api_key not in page.content()
    page.get_by_role("link", name="Revoke…").click()
    page.get_by_role("button", name="Yes, revoke it").click()
    page.get_by_text("The API key was revoked.").wait_for()
    assert httpx.get(f"{base}/v1/balance", headers=headers).status_code == 401

    # Open a dispute from the receipt; staff approve it; the receipt becomes REFUNDED.
    page.goto(receipt_url)
    page.get_by_label("Why should this call be refunded?").fill("The thumbnails were wrong.")
    page.get_by_role("button", name="Open a dispute").click()
    page.get_by_text("Dispute opened.").wait_for()
    assert "OPEN" in page.locator("#case-state").inner_text()

    staff.goto(f"{base}/staff")
    staff.get_by_role("link", name=re.compile("^Dispute case_")).click()
    staff.get_by_label("Approve and refund").check()
    staff.get_by_label("Reason").fill("Confirmed with the provider.")
    staff.get_by_role("button", name="Record decision").click()
    staff.get_by_text("Decision recorded.").wait_for()
    screenshot(staff, "staff-case")

    page.goto(receipt_url)
    assert "REFUNDED" in page.locator("#receipt-settlement").inner_text()
    page.goto(f"{base}/account")
    assert page.locator("#balance-available").inner_text() == "100"


def test_a_provider_connects_checks_and_staff_approve_and_publish(
    platform: Platform, ranking_url: str, new_page: Any
) -> None:
    base = platform.url
    provider = new_page()
    log_in(provider, base, PROVIDER_EMAIL)
    provider.goto(f"{base}/provider")
    provider.get_by_label("Name", exact=True).fill("my ranking")
    provider.get_by_label("Base URL").fill(ranking_url)
    provider.get_by_label(re.compile("^Credential")).fill("browser-test-credential-0123456789")
    provider.get_by_role("button", name="Create and check").click()
    provider.get_by_text("the conformance check has run").wait_for()
    rows = provider.locator("tr.check-row")
    assert rows.count() == 9
    assert provider.locator("tr.check-row .badge-passed").count() == 9
    screenshot(provider, "provider-check")

    # A listing and a draft version: the editor starts empty, a template link fills it.
    provider.goto(f"{base}/provider")
    provider.get_by_label("Service code").fill("acme.browser-ranking")
    provider.get_by_label("Display name").fill("Browser ranking")
    provider.get_by_role("button", name="Create listing").click()
    provider.get_by_text("Listing created.").wait_for()
    contract = provider.get_by_label(re.compile("^Contract"))
    assert contract.input_value() == ""
    provider.get_by_role("link", name="with-artifacts").click()
    assert "artifactContract" in provider.get_by_label(re.compile("^Contract")).input_value()
    provider.get_by_label(re.compile("^Contract")).fill(json.dumps(example_contract()))
    provider.get_by_label("Price (points)").fill("7")
    provider.get_by_role("button", name="Create draft").click()
    provider.get_by_text("Draft version created.").wait_for()
    provider.get_by_role("button", name="Submit for review").click()
    provider.get_by_text("Submitted for review with").wait_for()
    assert "SUBMITTED" in provider.locator("#state").inner_text()

    # Staff ask for a change; the provider reads the reason and submits again.
    staff = new_page()
    log_in(staff, base, STAFF_EMAIL)
    staff.goto(f"{base}/staff")
    screenshot(staff, "staff")
    staff.get_by_role("link", name="acme.browser-ranking v1").click()
    assert "SUBMITTED" in staff.locator("#state").inner_text()
    staff.get_by_label("What should change").fill("Say what limit means.")
    staff.get_by_role("button", name="Request changes").click()
    staff.get_by_text("Changes requested").wait_for()
    provider.reload()
    assert "Say what limit means." in provider.locator("#review-reason").inner_text()
    provider.get_by_role("button", name="Submit for review").click()
    provider.get_by_text("Submitted for review with").wait_for()

    staff.reload()
    staff.get_by_role("button", name="Approve v1").click()
    staff.get_by_text("Version approved").wait_for()
    staff.get_by_role("button", name="Publish v1").click()
    staff.get_by_text("Version published.").wait_for()
    assert staff.locator("tr.transition-row").count() == 6
    screenshot(staff, "staff-version")

    provider.reload()
    assert "PUBLISHED" in provider.locator("#state").inner_text()
    assert provider.locator("tr.transition-row").count() == 6
    assert provider.locator("#points-per-call strong").inner_text() == "5"  # 7 × 0.8, rounded down
    provider.goto(f"{base}/?q=browser")
    provider.get_by_role("link", name="Browser ranking").click()
    assert provider.title() == "Browser ranking v1 · Mercato"
    assert "7 points" in provider.content()


def test_replaying_a_rotated_refresh_token_logs_out_the_whole_family(
    platform: Platform, new_page: Any
) -> None:
    base = platform.url
    page = new_page()
    log_in(page, base, PROVIDER_EMAIL)
    context = page.context
    stolen = next(c for c in context.cookies() if c["name"] == "mercato_refresh")
    assert stolen["httpOnly"] and stolen["sameSite"] == "Lax"

    # The access cookie is gone (as when it expires): the page layer rotates the refresh token.
    context.clear_cookies(name="mercato_session")
    page.goto(f"{base}/account")
    assert page.title() == "Account · Mercato"
    rotated = next(c for c in context.cookies() if c["name"] == "mercato_refresh")
    assert rotated["value"] != stolen["value"]

    # Someone replays the spent refresh token: the whole family ends.
    thief = new_page()
    thief.context.add_cookies([{**stolen, "url": base} | {"domain": None, "path": None}])
    thief.goto(f"{base}/account")
    assert "/login" in thief.url

    page.goto(f"{base}/account")
    assert "/login" in page.url
    assert page.title() == "Log in · Mercato"


def test_keyboard_focus_is_visible_and_fields_are_labelled(
    platform: Platform, new_page: Any
) -> None:
    page = new_page()
    page.goto(f"{platform.url}/login")
    page.get_by_label("Email").focus()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")
    unlabelled = page.evaluate(
        """[...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
           .filter(el => !(el.id && document.querySelector(`label[for="${el.id}"]`))).length"""
    )
    assert unlabelled == 0
