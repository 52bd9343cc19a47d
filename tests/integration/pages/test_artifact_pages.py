"""Thumbnails and downloads come from the platform's store, for the caller only."""

from __future__ import annotations

import hashlib

from builders.artifacts import FakeFetcher, entry, fake_target, make_invocation
from builders.invocation_world import World
from builders.pages import PERSON, Browser
from mercato.artifacts.flows import ingest_once

PNG = b"\x89PNG\r\n\x1a\n" + b"thumbnail-bytes" * 20


def _call_with_thumbnail(world: World, account_id: str, settlement: str = "SETTLED") -> str:
    invocation_id = make_invocation(
        world.runtime,
        account_id=account_id,
        settlement=settlement,
        manifest=[entry(PNG, "thumb-1")],
    )
    fetcher = FakeFetcher()
    fetcher.serve(PNG)
    ingest_once(world.runtime, fetcher, resolve_target=fake_target, invocation_id=invocation_id)
    return invocation_id


def test_receipt_shows_thumbnails_served_by_the_platform(
    world: World, person: Browser, other: Browser, people: dict[str, str]
) -> None:
    invocation_id = _call_with_thumbnail(world, people[PERSON])
    url = f"/receipts/{invocation_id}/artifacts/thumb-1"
    page = person.get(f"/receipts/{invocation_id}")
    assert f'<img src="{url}"' in page.text and f'href="{url}?download=1"' in page.text
    assert hashlib.sha256(PNG).hexdigest() in page.text

    image = person.get(url)
    assert image.status_code == 200 and image.content == PNG
    assert image.headers["content-type"] == "image/png"
    assert image.headers["etag"] == f'"{hashlib.sha256(PNG).hexdigest()}"'
    download = person.get(url + "?download=1")
    assert download.headers["content-disposition"] == 'attachment; filename="thumb-1.png"'

    assert person.get(url, headers={"Range": "bytes=0-3"}).status_code == 416
    assert other.get(url).status_code == 404  # another account's call does not exist for them
    assert Browser(world).get(url).status_code == 303  # signed out: to the login page


def test_refunded_calls_show_no_thumbnails(
    world: World, person: Browser, people: dict[str, str]
) -> None:
    invocation_id = _call_with_thumbnail(world, people[PERSON], settlement="REFUNDED")
    page = person.get(f"/receipts/{invocation_id}")
    assert "<img" not in page.text and "not available (refunded)" in page.text
    refused = person.get(f"/receipts/{invocation_id}/artifacts/thumb-1")
    assert refused.status_code == 409
