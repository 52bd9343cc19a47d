"""DESIGN §5: every answer with a Retry-After header also carries `retryAfter` in its body."""

from __future__ import annotations

import json

import pytest

from mercato.artifacts.errors import ArtifactNotReady
from mercato.core.errors import MercatoError, RateLimited
from mercato.invocations.errors import IdempotencyKeyInUse
from mercato.providers.errors import ProviderBusy
from mercato.web.problems import from_error

WAITING = [
    RateLimited("slow down", retry_after=7),
    IdempotencyKeyInUse("still in flight", retry_after=3, invocationId="inv_1"),
    ArtifactNotReady("not pulled yet", retry_after=5),
    ProviderBusy("full", retry_after=1),
]


@pytest.mark.parametrize("error", WAITING, ids=lambda e: e.code)
def test_an_error_that_asks_to_wait_says_so_in_the_header_and_the_body(
    error: MercatoError,
) -> None:
    response = from_error(error)
    body = json.loads(bytes(response.body))
    assert body["retryAfter"] == int(response.headers["retry-after"])
    assert body["code"] == error.code


def test_a_body_member_given_by_the_error_is_kept() -> None:
    error = RateLimited("slow down", retry_after=9, retryAfter=9, limit=60)
    body = json.loads(bytes(from_error(error).body))
    assert (body["retryAfter"], body["limit"]) == (9, 60)
