"""`JsonAnswer` is Starlette's JSON `Response`, made for less (decision 0474)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.responses import Response

from mercato.web.api.invocations import JsonAnswer

_names = st.one_of(
    st.sampled_from(["RateLimit", "RateLimit-Policy", "Location", "Retry-After", "X-A"]),
    st.sampled_from(["Content-Length", "content-type", "CONTENT-TYPE", "Content-Type"]),
    st.text(alphabet=st.characters(max_codepoint=0xFF), min_size=1, max_size=6),
)
_values = st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=8)


@given(
    st.binary(max_size=20),
    st.sampled_from([100, 200, 202, 204, 304, 400, 409, 429, 502]),
    st.dictionaries(_names, _values, max_size=4),
)
def test_the_answer_is_the_response_starlette_makes(
    content: bytes, status: int, headers: dict[str, str]
) -> None:
    made = JsonAnswer(content, status, headers)
    expected = Response(content, status_code=status, headers=headers, media_type="application/json")
    assert (made.status_code, made.body, made.raw_headers) == (
        expected.status_code,
        expected.body,
        expected.raw_headers,
    )
    assert (made.media_type, made.background, made.headers) == (
        expected.media_type,
        expected.background,
        expected.headers,
    )


def test_a_value_latin_1_cannot_encode_is_refused_as_by_starlette() -> None:
    with pytest.raises(UnicodeEncodeError):
        Response(b"", headers={"X": "€"})
    with pytest.raises(UnicodeEncodeError):
        JsonAnswer(b"", 200, {"X": "€"})
