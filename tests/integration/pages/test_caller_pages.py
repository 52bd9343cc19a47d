"""Catalog, listing, call, receipts, disputes, reports and the account, through the pages."""

from __future__ import annotations

import datetime as dt
import re

from builders.invocation_world import SERVICE, World
from builders.pages import PERSON, STAFF, Browser, field_error, title
from mercato.cases import service as cases
from mercato.ledger import service as ledger


def test_catalog_lists_and_searches_public_listings(world: World, person: Browser) -> None:
    page = person.get("/")
    assert page.status_code == 200 and title(page) == "Catalog · Mercato"
    assert (
        f'href="/listings/{SERVICE}"' in page.text
        and "<strong>10 points</strong> per call" in page.text
    )
    assert f'href="/listings/{SERVICE}"' in person.get("/?q=echo").text
    assert f'href="/listings/{SERVICE}"' not in person.get("/?q=nothing-like-it").text
    assert '<label for="f-q">' in page.text


def test_listing_shows_versions_prices_and_contract_digests(world: World, person: Browser) -> None:
    page = person.get(f"/listings/{SERVICE}")
    assert page.status_code == 200
    with world.runtime.db.read() as session:
        from mercato.catalog import service as catalog

        version = catalog.public_version(session, service_code=SERVICE, version="v1")
        digest = version.contract_digest
        request_digest = version.contract["requestSchemaDigest"]
    assert digest in page.text and request_digest in page.text
    assert "10 points" in page.text and "Request schema" in page.text
    assert "&#34;additionalProperties&#34;: true" in page.text  # the schema, readable


def test_calling_from_the_listing_shows_the_receipt_and_result(
    world: World, person: Browser, people: dict[str, str]
) -> None:
    page = person.get(f"/listings/{SERVICE}")
    key = re.search(r'name="idempotency_key" value="([^"]+)"', page.text)
    assert key
    form = {"idempotency_key": key.group(1), "body": '{"n": 7}'}
    done = person.post(f"/listings/{SERVICE}/versions/v1/call", form)
    assert done.status_code == 303 and done.headers["location"].startswith("/receipts/inv_")
    receipt = person.follow(done)
    assert receipt.status_code == 200
    assert 'id="receipt-status"><span class="badge badge-succeeded">SUCCEEDED' in receipt.text
    assert "badge-settled" in receipt.text and "&#34;n&#34;: 7" in receipt.text
    with world.runtime.db.read() as session:
        assert ledger.balances(session, account_id=people[PERSON]).available == 90

    # The same form sent twice (a double click) is one call, charged once.
    again = person.post(f"/listings/{SERVICE}/versions/v1/call", form)
    assert again.headers["location"] == done.headers["location"]
    with world.runtime.db.read() as session:
        assert ledger.balances(session, account_id=people[PERSON]).available == 90

    listing = person.get("/receipts")
    assert done.headers["location"].split("/")[-1] in listing.text


def test_a_body_that_breaks_the_schema_is_shown_next_to_the_body(
    world: World, person: Browser
) -> None:
    person.get(f"/listings/{SERVICE}")
    bad = person.post(
        f"/listings/{SERVICE}/versions/v1/call", {"idempotency_key": "k-1", "body": "not json"}
    )
    assert bad.status_code == 400 and "not JSON" in field_error(bad, "body")
    assert world.provider.executions.total() == 0


def test_pending_receipt_says_pending_not_zero(world: World, person: Browser) -> None:
    from builders.invocations import unknown

    world.provider.script(unknown())
    person.get(f"/listings/{SERVICE}")
    done = person.post(
        f"/listings/{SERVICE}/versions/v1/call", {"idempotency_key": "k-p", "body": '{"n": 1}'}
    )
    receipt = person.follow(done)
    assert "badge-pending" in receipt.text and "The outcome is pending" in receipt.text
    assert "Actual spend</dt><dd>pending (not yet known)" in receipt.text


def test_dispute_from_the_receipt_and_staff_refund(
    world: World, person: Browser, staff: Browser, people: dict[str, str]
) -> None:
    person.get(f"/listings/{SERVICE}")
    done = person.post(
        f"/listings/{SERVICE}/versions/v1/call", {"idempotency_key": "k-d", "body": '{"n": 2}'}
    )
    receipt_url = done.headers["location"]
    receipt = person.follow(done)
    assert 'action="' + receipt_url + '/dispute"' in receipt.text
    empty = person.post(receipt_url + "/dispute", {"idempotency_key": "d-1", "reason": " "})
    assert empty.status_code == 400 and field_error(empty, "reason")
    opened = person.post(receipt_url + "/dispute", {"idempotency_key": "d-1", "reason": "Wrong."})
    assert opened.status_code == 303
    case_url = opened.headers["location"].split("?")[0]
    case_id = case_url.rsplit("/", 1)[1]
    case_page = person.follow(opened)
    assert "badge-open" in case_page.text
    assert case_id in person.get("/cases").text

    console = staff.get("/staff")
    assert f"/staff/cases/{case_id}" in console.text
    staff.get(f"/staff/cases/{case_id}")
    decided = staff.post(
        f"/staff/cases/{case_id}/decide", {"decision": "approve", "reason": "Checked."}
    )
    assert decided.status_code == 303
    assert "badge-refunded" in person.get(case_url).text
    refunded = person.get(receipt_url)
    assert 'id="receipt-settlement"><span class="badge badge-refunded">REFUNDED' in refunded.text
    assert "Refunded" in refunded.text and "10 points" in refunded.text  # listed price stays
    with world.runtime.db.read() as session:
        assert ledger.balances(session, account_id=people[PERSON]).available == 100
    # Only the submitter sees the case; staff see it in the console, not through /cases.
    assert staff.get(case_url).status_code == 404


def test_report_this_listing_opens_a_report_case(world: World, person: Browser) -> None:
    page = person.get(f"/listings/{SERVICE}")
    assert 'action="/listings/acme.echo/report"' in page.text
    blank = person.post(
        f"/listings/{SERVICE}/report",
        {"version": "v1", "category": "MISLEADING", "text": "", "idempotency_key": "r-1"},
    )
    assert blank.status_code == 400 and field_error(blank, "text")
    sent = person.post(
        f"/listings/{SERVICE}/report",
        {"version": "v1", "category": "MISLEADING", "text": "No echo.", "idempotency_key": "r-1"},
    )
    assert sent.status_code == 303 and sent.headers["location"].startswith("/cases/case_")
    assert "Content report" in person.follow(sent).text


def _cases_of(world: World, account_id: str) -> list[str]:
    with world.runtime.db.read() as session:
        return [
            c.case_id for c in cases.list_cases(session, account_id=account_id, limit=100).items
        ]


def _form_key(page: str, action: str) -> str:
    """The Idempotency-Key the page minted into the form posting to `action`."""
    found = re.search(
        rf'action="{re.escape(action)}">.*?name="idempotency_key" value="([^"]+)"', page, re.S
    )
    assert found, action
    return found.group(1)


BAD_KEYS = [
    (None, "Idempotency-Key header"),  # the field is absent
    ("", "Idempotency-Key header"),
    ("k" * 192, "1-191 visible ASCII"),
    ("k" * 300, "1-191 visible ASCII"),
    ("two words", "1-191 visible ASCII"),
    ("clé", "1-191 visible ASCII"),
]


def test_the_report_form_keeps_the_idempotency_key_rule(
    world: World, person: Browser, people: dict[str, str]
) -> None:
    action = f"/listings/{SERVICE}/report"
    report = {"version": "v1", "category": "MISLEADING", "text": "No echo."}
    for key, said in [*BAD_KEYS, ("", "Idempotency-Key header")]:  # empty twice: still none
        person.get(f"/listings/{SERVICE}")
        form = report if key is None else {**report, "idempotency_key": key}
        refused = person.post(action, form)
        assert refused.status_code == 400 and said in field_error(refused, "text"), key
    assert _cases_of(world, people[PERSON]) == []

    # The key is minted when the form is rendered: the same form posted twice is one case.
    key = _form_key(person.get(f"/listings/{SERVICE}").text, action)
    first = person.post(action, {**report, "idempotency_key": key})
    second = person.post(action, {**report, "idempotency_key": key})
    assert first.status_code == second.status_code == 303
    assert first.headers["location"] == second.headers["location"]
    assert len(_cases_of(world, people[PERSON])) == 1
    reused = person.post(action, {**report, "text": "Something else.", "idempotency_key": key})
    assert reused.status_code == 422 and "different submission" in field_error(reused, "text")
    assert len(_cases_of(world, people[PERSON])) == 1
    fresh = _form_key(person.get(f"/listings/{SERVICE}").text, action)
    assert fresh != key


def test_the_dispute_form_keeps_the_idempotency_key_rule(
    world: World, person: Browser, people: dict[str, str]
) -> None:
    person.get(f"/listings/{SERVICE}")
    done = person.post(
        f"/listings/{SERVICE}/versions/v1/call", {"idempotency_key": "k-i", "body": '{"n": 4}'}
    )
    receipt_url = done.headers["location"]
    action = receipt_url + "/dispute"
    for key, said in BAD_KEYS:
        person.get(receipt_url)
        form = {"reason": "Wrong."} | ({} if key is None else {"idempotency_key": key})
        refused = person.post(action, form)
        assert refused.status_code == 400 and said in field_error(refused, "reason"), key
    assert _cases_of(world, people[PERSON]) == []

    key = _form_key(person.get(receipt_url).text, action)
    first = person.post(action, {"reason": "Wrong.", "idempotency_key": key})
    second = person.post(action, {"reason": "Wrong.", "idempotency_key": key})
    assert first.status_code == second.status_code == 303
    assert first.headers["location"] == second.headers["location"]
    assert len(_cases_of(world, people[PERSON])) == 1


def test_api_key_is_shown_once_listed_and_revoked_with_confirmation(
    world: World, person: Browser
) -> None:
    person.get("/account")
    created = person.post("/account/api-keys", {"name": "build server"})
    assert created.status_code == 201
    found = re.search(
        r'id="new-key" type="text" class="mono key" readonly spellcheck="false" '
        r'autocomplete="off" value="(mercato_live_[0-9A-Za-z]+)"',
        created.text,
    )
    assert found and 'data-copy="new-key"' in created.text
    api_key = found.group(1)
    auth = {"Authorization": f"Bearer {api_key}"}
    assert world.client.get("/v1/balance", headers=auth).status_code == 200

    account = person.get("/account")
    assert api_key not in account.text and "build server" in account.text
    revoke_link = re.search(r'href="(/account/api-keys/[^"]+/revoke)"', account.text)
    assert revoke_link
    confirm = person.get(revoke_link.group(1))
    assert confirm.status_code == 200 and "cannot be undone" in confirm.text
    done = person.post(revoke_link.group(1))
    assert done.status_code == 303
    assert world.client.get("/v1/balance", headers=auth).status_code == 401
    assert "badge-revoked" in person.get("/account").text


def test_a_key_created_with_a_spend_limit_shows_its_limit_use_and_reset(
    world: World, person: Browser
) -> None:
    person.get("/account")
    created = person.post(
        "/account/api-keys", {"name": "agent", "spend_limit": "25", "spend_period": "DAY"}
    )
    assert created.status_code == 201
    api_key = re.search(r'value="(mercato_live_[0-9A-Za-z]+)"', created.text)
    assert api_key
    auth = {"Authorization": f"Bearer {api_key.group(1)}", "Idempotency-Key": "page-limit"}
    called = world.client.post(
        f"/v1/services/{SERVICE}/versions/v1:invoke", json={"n": 1}, headers=auth
    )
    assert called.status_code == 200

    person.post("/account/api-keys", {"name": "unlimited"})
    page = person.get("/account").text
    now = world.clock.now()
    tomorrow = dt.datetime(now.year, now.month, now.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
    row = (
        '">25 per day</td><td class="num" data-spent="{id}">10</td>'
        f'<td><time datetime="{tomorrow.isoformat()}">'
    )
    key_id = re.search(r'data-limit="(key_[0-9a-z]+)"', page)
    assert key_id and row.format(id=key_id.group(1)) in page
    assert "<td>none</td>" in page  # the key made without a limit


def test_a_bad_spend_limit_is_refused_next_to_its_field(world: World, person: Browser) -> None:
    person.get("/account")
    refused = person.post("/account/api-keys", {"name": "agent", "spend_limit": "-3"})
    assert refused.status_code == 400 and field_error(refused, "spend_limit")
    refused = person.post(
        "/account/api-keys", {"name": "agent", "spend_limit": "3", "spend_period": "HOUR"}
    )
    assert refused.status_code == 400 and field_error(refused, "spend_period")
    assert "agent" not in person.get("/account").text


def test_api_key_name_errors_are_next_to_the_name(world: World, person: Browser) -> None:
    person.get("/account")
    refused = person.post("/account/api-keys", {"name": "  "})
    assert refused.status_code == 400 and field_error(refused, "name")


def test_account_shows_points_history_and_rate_limit(world: World, person: Browser) -> None:
    page = person.get("/account")
    assert 'id="balance-available">100<' in page.text
    assert "grant" in page.text and "+100" in page.text
    assert "calls per" in page.text and "Remaining now" in page.text


def test_another_accounts_objects_are_not_found(
    world: World, person: Browser, other: Browser
) -> None:
    person.get(f"/listings/{SERVICE}")
    done = person.post(
        f"/listings/{SERVICE}/versions/v1/call", {"idempotency_key": "k-o", "body": '{"n": 3}'}
    )
    receipt_url = done.headers["location"]
    assert other.get(receipt_url).status_code == 404
    other.get("/account")
    assert other.post(receipt_url + "/dispute", {"reason": "mine?"}).status_code == 404
    person.get("/account")
    person.post("/account/api-keys", {"name": "mine"})
    link = re.search(r'href="(/account/api-keys/[^"]+/revoke)"', person.get("/account").text)
    assert link
    assert other.get(link.group(1)).status_code == 404
    assert other.post(link.group(1)).status_code == 404


def test_signed_out_visitors_are_sent_to_login(world: World) -> None:
    browser = Browser(world)
    assert browser.get("/").status_code == 200  # the catalog is public
    for path in ("/account", "/receipts", "/cases", "/provider", "/staff"):
        response = browser.get(path)
        assert response.status_code == 303, path
        assert response.headers["location"] == f"/login?next={path}"


def test_staff_pages_refuse_non_staff(world: World, person: Browser) -> None:
    for path in ("/staff", "/staff/cases/case_x", "/staff/versions/ver_x", "/staff/connections/c"):
        response = person.get(path)
        assert response.status_code == 403, path
        assert "staff only" in response.text
    assert person.post("/staff/grants", {"email": PERSON, "amount": "5"}).status_code == 403


def test_staff_grant_points_errors_and_success(
    world: World, staff: Browser, people: dict[str, str]
) -> None:
    staff.get("/staff")
    why = {"grant_reason": "welcome"}
    unknown = staff.post("/staff/grants", {"email": "nobody@example.com", "amount": "5", **why})
    assert unknown.status_code == 422 and field_error(unknown, "email")
    not_a_number = staff.post("/staff/grants", {"email": PERSON, "amount": "lots", **why})
    assert not_a_number.status_code == 422 and field_error(not_a_number, "amount")
    granted = staff.post("/staff/grants", {"email": PERSON, "amount": "25", **why})
    assert granted.status_code == 303
    with world.runtime.db.read() as session:
        assert ledger.balances(session, account_id=people[PERSON]).available == 125
    assert STAFF


def test_unknown_pages_are_html_and_unknown_api_paths_stay_problems(world: World) -> None:
    browser = Browser(world)
    page = browser.get("/no-such-page")
    assert page.status_code == 404 and title(page) == "Page not found · Mercato"
    api = browser.get("/v1/no-such-thing")
    assert api.status_code == 404
    assert api.headers["content-type"].startswith("application/problem+json")
    missing = browser.get("/listings/no.such-listing")
    assert missing.status_code == 404 and "<title>" in missing.text
