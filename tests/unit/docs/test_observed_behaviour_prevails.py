"""Spec 9.5, said where newcomers read (issue 41 item 5): where the documented protocol and the
platform's observed behaviour disagree, the observed behaviour prevails."""

from __future__ import annotations

from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.mark.parametrize("name", ["provider-guide.md", "client.md"])
def test_the_document_says_observed_behaviour_prevails(name: str) -> None:
    text = " ".join((DOCS / name).read_text(encoding="utf-8").split())
    assert "observed behaviour prevails (spec 9.5)" in text, name
