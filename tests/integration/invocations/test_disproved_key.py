"""A disproved API key is refused first (DESIGN.md §3 step 1, issue 39 item 6): a key a serve
process still holds in memory (decision 0400) but that another process revoked answers 401
`UNAUTHENTICATED` with `WWW-Authenticate: Bearer` and no quota headers, whatever else is
wrong with the request (a missing, empty or malformed Idempotency-Key included), and the
answer is the one a process without memory gives."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from builders.invocation_world import World, answer
from mercato.accounts import service as accounts
from mercato.accounts.models import ApiKey
from mercato.core.clock import utcnow
from mercato.db.runtime import Runtime

# None: no header; "": an empty one; then one too long; then a good one (already used or not).
KEYS = [None, "", "k" * 300, "first", "fresh"]


def _revoke_from_another_process(world: World) -> None:
    """Revoke the caller's keys through a Database of its own, as another process would."""
    other = Runtime.from_settings(world.runtime.settings)
    try:
        with other.db.transaction() as session:
            for key_id in session.scalars(select(ApiKey.id)):
                accounts.revoke_api_key(session, key_id=key_id, account_id=None, now=utcnow())
    finally:
        other.db.dispose()


@pytest.mark.parametrize("idempotency_key", KEYS, ids=["none", "empty", "long", "used", "fresh"])
def test_a_key_revoked_elsewhere_is_refused_before_the_idempotency_key(
    world: World, memoryless: TestClient, idempotency_key: str | None
) -> None:
    assert world.invoke(key="first").status_code == 200  # this process remembers the key now
    assert world.runtime.hints is not None and world.runtime.hints.keys.get(
        accounts.api_key_digest(world.api_key)
    )
    _revoke_from_another_process(world)
    refused = world.invoke(key=idempotency_key)
    assert refused.status_code == 401, refused.text
    assert refused.json()["code"] == "UNAUTHENTICATED"
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert not [name for name in refused.headers if name.startswith("ratelimit")]
    assert answer(refused) == answer(world.invoke(key=idempotency_key, client=memoryless))
    assert world.balances() == (90, 0)
    assert len(world.invocations()) == 1


def test_a_live_key_without_an_idempotency_key_still_gets_400_with_its_quota(
    world: World,
) -> None:
    assert world.invoke(key="first").status_code == 200
    missing = world.invoke(key=None)
    assert missing.status_code == 400 and missing.json()["code"] == "IDEMPOTENCY_KEY_MISSING"
    assert "ratelimit" in missing.headers
