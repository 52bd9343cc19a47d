"""The staff console lists the versions that keep Python's pattern engine (DESIGN.md §7)."""

from __future__ import annotations

from sqlalchemy import select

from builders.hard_schemas import publish_legacy
from builders.invocation_world import World
from builders.pages import Browser
from mercato.providers.models import ProviderConnection


def test_staff_see_the_versions_whose_patterns_re2_refuses(
    world: World, staff: Browser, person: Browser
) -> None:
    """Issue 39 item 1: a version published before patterns had to be RE2 is listed for staff
    with the pointer of each pattern RE2 refuses; a version with RE2 patterns only is not."""
    assert "acme.legacy" not in staff.get("/staff").text
    with world.runtime.db.read() as session:
        connection_id = session.scalars(select(ProviderConnection.id)).one()
    version_id = publish_legacy(
        world.runtime,
        connection_id,
        owner_id=world.provider_id,
        service_code="acme.legacy",
        request_schema={"properties": {"a": {"pattern": "^(?=x)"}, "b": {"pattern": "^x$"}}},
    )
    console = staff.get("/staff")
    assert console.status_code == 200
    section = console.text.split('id="legacy-patterns"', 1)[1].split("</section>", 1)[0]
    assert f"/staff/versions/{version_id}" in section and "acme.legacy v1" in section
    assert "/requestSchema/properties/a/pattern" in section
    assert "/properties/b/" not in section
    assert person.get("/staff").status_code in (403, 404)
