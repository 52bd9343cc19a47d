"""The provider console and the staff console: connections, checks, drafts, review, holds."""

from __future__ import annotations

import json
import re

from builders.catalog import example_contract
from builders.invocation_world import World
from builders.invocations import CREDENTIAL
from builders.pages import OTHER, PERSON, Browser, field_error, title
from mercato.catalog import service as catalog
from mercato.providers import service as providers
from mercato.providers.schemas import CheckVerdict


def _connection_id(response_location: str) -> str:
    return response_location.split("?")[0].rsplit("/", 1)[1]


def _create_connection(browser: Browser, world: World, name: str = "echo-1") -> str:
    browser.get("/provider")
    done = browser.post(
        "/provider/connections",
        {"name": name, "base_url": world.provider.url, "credential": CREDENTIAL},
    )
    assert done.status_code == 303, done.text[:2000]
    return _connection_id(done.headers["location"])


def _latest_passed(world: World, connection_id: str) -> bool:
    with world.runtime.db.read() as session:
        run = providers.latest_run(session, connection_id=connection_id)
        return run is not None and run.passed


def _all_nine_passed(world: World, connection_id: str) -> None:
    """Record a passing run on the current revision (the real check is covered elsewhere)."""
    with world.runtime.db.transaction() as session:
        revision = providers.get_connection(session, connection_id=connection_id).revision
        providers.record_run(
            session,
            connection_id=connection_id,
            connection_revision=revision,
            started_at=world.clock.now(),
            finished_at=world.clock.now(),
            checks=[CheckVerdict(i, f"check-{i}", "passed", {"status": 200}) for i in range(1, 10)],
        )


def test_provider_creates_a_connection_and_sees_nine_check_rows(
    world: World, person: Browser
) -> None:
    connection_id = _create_connection(person, world)
    page = person.get(f"/provider/connections/{connection_id}")
    assert page.status_code == 200 and title(page) == "Connection · Mercato"
    assert page.text.count('<tr class="check-row">') == 9
    assert re.search(r"badge-(passed|failed|skipped)", page.text)
    assert CREDENTIAL not in page.text  # the credential is never shown again

    rerun = person.post(f"/provider/connections/{connection_id}/check")
    assert rerun.status_code == 303
    history = person.get(f"/provider/connections/{connection_id}")
    assert history.text.count("/9 passed") == 2


def test_connection_form_errors_sit_next_to_their_field(world: World, person: Browser) -> None:
    person.get("/provider")
    bad_url = person.post(
        "/provider/connections", {"name": "x", "base_url": "ftp://nope", "credential": "secret"}
    )
    assert bad_url.status_code == 422 and field_error(bad_url, "base_url")
    bad_credential = person.post(
        "/provider/connections",
        {"name": "y", "base_url": world.provider.url, "credential": "has space"},
    )
    assert bad_credential.status_code == 422 and field_error(bad_credential, "credential")


def test_changing_the_url_lapses_approval_and_rechecks(
    world: World, person: Browser, staff: Browser
) -> None:
    connection_id = _create_connection(person, world)
    _all_nine_passed(world, connection_id)
    staff.get(f"/staff/connections/{connection_id}")
    assert staff.post(f"/staff/connections/{connection_id}/approve").status_code == 303
    assert "badge-approved" in person.get(f"/provider/connections/{connection_id}").text
    changed = person.post(
        f"/provider/connections/{connection_id}",
        {"name": "echo-1", "base_url": world.provider.url + "/", "credential": "another-secret"},
    )
    assert changed.status_code == 303 and "connection-changed" in changed.headers["location"]
    page = person.get(f"/provider/connections/{connection_id}")
    assert 'id="approval"><span class="badge badge-not_approved">' in page.text


def test_listing_draft_review_and_publish(world: World, person: Browser, staff: Browser) -> None:
    connection_id = _create_connection(person, world)
    person.get("/provider")
    bad_code = person.post(
        "/provider/listings", {"service_code": "Bad Code", "display_name": "X", "description": ""}
    )
    assert bad_code.status_code == 400 and field_error(bad_code, "service_code")
    made = person.post(
        "/provider/listings",
        {"service_code": "acme.web-echo", "display_name": "Web echo", "description": "Echoes."},
    )
    assert made.status_code == 303
    person.get("/provider/listings/acme.web-echo")

    contract = example_contract(artifactContract=None)
    broken = person.post(
        "/provider/listings/acme.web-echo/drafts",
        {"version": "v1", "connection_id": connection_id, "price": "5", "contract": "{nope"},
    )
    assert broken.status_code == 400 and "not valid JSON" in field_error(broken, "contract")
    invalid = person.post(
        "/provider/listings/acme.web-echo/drafts",
        {
            "version": "v1",
            "connection_id": connection_id,
            "price": "5",
            "contract": json.dumps({**contract, "requestSchema": "not a schema"}),
        },
    )
    assert invalid.status_code == 400 and field_error(invalid, "contract")
    drafted = person.post(
        "/provider/listings/acme.web-echo/drafts",
        {
            "version": "v1",
            "connection_id": connection_id,
            "price": "5",
            "contract": json.dumps(contract),
        },
    )
    assert drafted.status_code == 303, drafted.text[:3000]
    version_url = drafted.headers["location"].split("?")[0]
    version_id = version_url.rsplit("/", 1)[1]

    editor = person.get(version_url)
    assert "Validate and save" in editor.text
    saved = person.post(
        version_url,
        {"connection_id": connection_id, "price": "6", "contract": json.dumps(contract)},
    )
    assert saved.status_code == 303

    # Staff cannot approve or publish a draft that was never submitted; nothing changes.
    staff.get(f"/staff/versions/{version_id}")
    for step in ("approve", "publish"):
        refused = staff.post(f"/staff/versions/{version_id}/{step}")
        assert refused.status_code == 409 and field_error(refused, step)
    assert "badge-draft" in staff.get(f"/staff/versions/{version_id}").text
    if not _latest_passed(world, connection_id):  # the scripted provider may not pass all nine
        early = person.post(version_url + "/submit")
        assert early.status_code == 409 and "nine" in field_error(early, "submit")
        _all_nine_passed(world, connection_id)
    submitted = person.post(version_url + "/submit")
    assert submitted.status_code == 303 and "notice=submitted" in submitted.headers["location"]
    console = staff.get("/staff")
    assert f"/staff/versions/{version_id}" in console.text

    staff.get(f"/staff/versions/{version_id}")
    no_reason = staff.post(f"/staff/versions/{version_id}/request-changes", {"reason": ""})
    assert no_reason.status_code == 422 and field_error(no_reason, "reason")
    asked = staff.post(
        f"/staff/versions/{version_id}/request-changes", {"reason": "Name the unit."}
    )
    assert asked.status_code == 303
    page = person.get(version_url)
    assert "badge-changes_requested" in page.text and "Name the unit." in page.text
    assert person.post(version_url + "/submit").status_code == 303
    assert staff.post(f"/staff/versions/{version_id}/approve").status_code == 303
    published = staff.post(f"/staff/versions/{version_id}/publish")
    assert published.status_code == 303
    with world.runtime.db.read() as session:
        version = catalog.public_version(session, service_code="acme.web-echo", version="v1")
        assert version.price == 6
    assert "Web echo" in person.get("/").text
    history = person.get(version_url).text
    assert history.count('<tr class="transition-row">') == 6  # created, submitted, asked, ...
    review = staff.get(f"/staff/versions/{version_id}").text
    assert review.count('<tr class="transition-row">') == 6 and PERSON in review


def test_staff_pages_refuse_to_review_the_staffs_own_listing(world: World, staff: Browser) -> None:
    # The staff member runs a listing of their own through the provider pages.
    connection_id = _create_connection(staff, world, name="staff-echo")
    staff.get("/provider")
    staff.post(
        "/provider/listings",
        {"service_code": "staff.echo", "display_name": "Staff echo", "description": ""},
    )
    staff.get("/provider/listings/staff.echo")
    drafted = staff.post(
        "/provider/listings/staff.echo/drafts",
        {
            "version": "v1",
            "connection_id": connection_id,
            "price": "5",
            "contract": json.dumps(example_contract(artifactContract=None)),
        },
    )
    version_url = drafted.headers["location"].split("?")[0]
    version_id = version_url.rsplit("/", 1)[1]
    staff.get(version_url)
    if not _latest_passed(world, connection_id):
        _all_nine_passed(world, connection_id)
    assert staff.post(version_url + "/submit").status_code == 303

    staff.get(f"/staff/versions/{version_id}")
    for step, form, field in [
        ("approve", {}, "approve"),
        ("request-changes", {"reason": "Looks fine to me."}, "reason"),
        ("publish", {}, "publish"),
    ]:
        refused = staff.post(f"/staff/versions/{version_id}/{step}", form)
        assert refused.status_code == 403 and "another staff member" in field_error(refused, field)
    assert "badge-submitted" in staff.get(f"/staff/versions/{version_id}").text
    with world.runtime.db.read() as session:
        assert not providers.is_approved(session, connection_id=connection_id)


def test_a_new_draft_starts_empty_or_from_a_template(world: World, person: Browser) -> None:
    person.get("/provider")
    person.post(
        "/provider/listings",
        {"service_code": "acme.blank", "display_name": "Blank", "description": ""},
    )
    page = person.get("/provider/listings/acme.blank")
    assert "adapterRef" not in page.text  # no contract is pre-filled
    assert 'href="/provider/listings/acme.blank?template=with-artifacts"' in page.text
    for name in ("plain-json", "with-artifacts"):
        chosen = person.get(f"/provider/listings/acme.blank?template={name}").text
        assert "adapterRef" in chosen and ("artifactContract" in chosen) == (
            name == "with-artifacts"
        )
    connection_id = _create_connection(person, world)
    empty = person.post(
        "/provider/listings/acme.blank/drafts",
        {"version": "v1", "connection_id": connection_id, "price": "2", "contract": ""},
    )
    assert empty.status_code == 400 and "template" in field_error(empty, "contract")


def test_two_point_price_shows_what_the_provider_is_paid(
    world: World, person: Browser, staff: Browser
) -> None:
    connection_id = _create_connection(person, world)
    person.get("/provider")
    person.post(
        "/provider/listings",
        {"service_code": "acme.cheap", "display_name": "Cheap", "description": ""},
    )
    person.get("/provider/listings/acme.cheap")
    drafted = person.post(
        "/provider/listings/acme.cheap/drafts",
        {
            "version": "v1",
            "connection_id": connection_id,
            "price": "2",
            "contract": json.dumps(example_contract(artifactContract=None)),
        },
    )
    version_url = drafted.headers["location"].split("?")[0]
    page = person.get(version_url).text
    shown = re.search(r'id="points-per-call"><strong>(\d+)</strong>', page)
    assert shown and shown.group(1) == "1"  # 2 × 8000 / 10000 = 1.6, rounded down
    assert "80 %" not in page
    review = staff.get("/staff/versions/" + version_url.rsplit("/", 1)[1]).text
    assert "1 of 2 points per call" in review


def test_provider_pages_of_another_account_are_not_found(
    world: World, person: Browser, other: Browser
) -> None:
    connection_id = _create_connection(person, world)
    other.get("/provider")
    assert other.get(f"/provider/connections/{connection_id}").status_code == 404
    assert other.post(f"/provider/connections/{connection_id}/check").status_code == 404
    changed = other.post(
        f"/provider/connections/{connection_id}",
        {"name": "stolen", "base_url": "", "credential": ""},
    )
    assert changed.status_code == 404
    assert other.get("/provider/listings/acme.echo").status_code == 404  # the world's listing
    assert OTHER


def test_staff_hold_and_release(world: World, staff: Browser, person: Browser) -> None:
    staff.get("/staff")
    missing = staff.post("/staff/holds", {"service_code": "acme.echo", "hold_reason": ""})
    assert missing.status_code == 400 and field_error(missing, "hold_reason")
    placed = staff.post("/staff/holds", {"service_code": "acme.echo", "hold_reason": "Review"})
    assert placed.status_code == 303
    assert 'href="/listings/acme.echo"' not in person.get("/").text
    assert person.get("/listings/acme.echo").status_code == 404
    console = staff.get("/staff")
    release = re.search(r'action="(/staff/holds/[^"]+/release)"', console.text)
    assert release
    assert staff.post(release.group(1)).status_code == 303
    assert 'href="/listings/acme.echo"' in person.get("/").text


def test_staff_decides_a_report_by_upholding_it(
    world: World, staff: Browser, person: Browser
) -> None:
    person.get("/listings/acme.echo")
    sent = person.post(
        "/listings/acme.echo/report",
        {"version": "v1", "category": "MISLEADING", "text": "No echo.", "idempotency_key": "r"},
    )
    case_id = sent.headers["location"].split("?")[0].rsplit("/", 1)[1]
    page = staff.get(f"/staff/cases/{case_id}")
    assert 'value="uphold"' in page.text and 'value="approve"' not in page.text
    no_reason = staff.post(f"/staff/cases/{case_id}/decide", {"decision": "uphold", "reason": ""})
    assert no_reason.status_code == 400 and field_error(no_reason, "reason")
    upheld = staff.post(f"/staff/cases/{case_id}/decide", {"decision": "uphold", "reason": "Yes."})
    assert upheld.status_code == 303
    assert "badge-upheld" in person.get(f"/cases/{case_id}").text
    assert person.get("/listings/acme.echo").status_code == 404
