"""Small pure helpers of the pages: the call form's starting body and the login redirect."""

from __future__ import annotations

import json

import pytest

from mercato.catalog.examples import example_contract
from mercato.web.pages.catalog import _skeleton
from mercato.web.pages.common import safe_next


def test_the_starting_body_comes_from_schema_properties_first() -> None:
    schema = {
        "type": "object",
        "properties": {
            "chart": {"enum": ["manga", "illust"]},
            "limit": {"type": "integer", "minimum": 3},
            "note": {"type": "string", "default": "hi"},
        },
    }
    assert json.loads(_skeleton(schema, {})) == {"chart": "manga", "limit": 3, "note": "hi"}


def test_the_starting_body_falls_back_to_the_request_shape() -> None:
    contract = example_contract()
    body = json.loads(_skeleton(contract["requestSchema"], contract["requestShape"]))
    assert body == {"chart": "overall", "limit": 50}  # the optional snapshotId is left out


def test_without_any_hint_the_body_is_left_for_the_person() -> None:
    assert _skeleton({"type": "object"}, {}).strip().startswith("{")


@pytest.mark.parametrize(
    ("asked", "followed"),
    [
        ("/account", "/account"),
        ("/listings/a.b?version=v1", "/listings/a.b?version=v1"),
        ("//evil.example/x", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("", "/"),
    ],
)
def test_login_follows_only_same_site_paths(asked: str, followed: str) -> None:
    assert safe_next(asked) == followed
