"""A real `mercato serve` that holds an API key in memory (decision 0400) refuses it with 401
first once another process has revoked it (issue 39 item 6): before the Idempotency-Key check,
with `WWW-Authenticate: Bearer` and no quota headers."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from builders.invocation_world import SERVICE, build_world
from builders.invocations import ok, scripted_provider
from builders.platform_process import Serve, platform_env
from mercato.accounts import service as accounts
from mercato.accounts.models import ApiKey
from mercato.core.clock import utcnow

pytestmark = pytest.mark.functional


def test_a_key_revoked_by_another_process_gets_401_first(db_url: str, tmp_path: Path) -> None:
    with scripted_provider() as provider:
        world = build_world(db_url, tmp_path, provider)
        provider.script(ok())
        serve = Serve(platform_env(db_url, tmp_path / "data"), tmp_path / "serve.log")
        try:
            url = f"{serve.url}/v1/services/{SERVICE}/versions/v1:invoke"
            auth = {"Authorization": f"Bearer {world.api_key}"}
            with httpx.Client(timeout=30) as http:
                first = http.post(url, json={"n": 1}, headers={**auth, "Idempotency-Key": "a"})
                assert first.status_code == 200, first.text  # serve keeps the key in memory
                live = http.post(url, json={"n": 1}, headers=auth)
                assert live.status_code == 400 and "ratelimit" in live.headers
                # This test process revokes the key: serve's memory does not know yet.
                with world.runtime.db.transaction() as session:
                    for key_id in session.scalars(select(ApiKey.id)):
                        accounts.revoke_api_key(
                            session, key_id=key_id, account_id=None, now=utcnow()
                        )
                for headers in (auth, {**auth, "Idempotency-Key": "b"}):
                    refused = http.post(url, json={"n": 1}, headers=headers)
                    assert refused.status_code == 401, refused.text
                    assert refused.json()["code"] == "UNAUTHENTICATED"
                    assert refused.headers["www-authenticate"].startswith("Bearer")
                    assert not [h for h in refused.headers if h.startswith("ratelimit")]
            assert world.balances() == (90, 0)  # one call charged, nothing since
        finally:
            serve.stop()
            world.provider_client.close()
            world.runtime.db.dispose()
