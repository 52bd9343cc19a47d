"""A real `mercato serve` counts failed logins by the peer's address unless the peer is a
trusted proxy (decision 0221): uvicorn's own X-Forwarded-For handling is off."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from builders.accounts import make_account
from builders.platform_process import Serve, platform_env
from mercato.db.uow import Database

pytestmark = pytest.mark.functional

LIMIT = 3


def _failures_until_throttled(url: str) -> list[int]:
    """Wrong passwords, each claiming another client address, from this loopback peer."""
    statuses = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for n in range(LIMIT + 1):
            response = http.post(
                "/v1/auth/login",
                json={"email": "a@example.com", "password": "not the password"},
                headers={"X-Forwarded-For": f"198.51.100.{n + 1}"},
            )
            statuses.append(response.status_code)
    return statuses


@pytest.mark.parametrize(
    ("trusted", "expected"),
    [
        ("", [401] * LIMIT + [429]),  # loopback is not trusted: one address, throttled
        ("127.0.0.1", [401] * (LIMIT + 1)),  # a trusted proxy: four clients, one failure each
    ],
)
def test_forwarded_addresses_count_only_from_a_trusted_proxy(
    db_url: str, db: Database, tmp_path: Path, trusted: str, expected: list[int]
) -> None:
    make_account(db, "a@example.com")
    env = platform_env(
        db_url,
        tmp_path / "data",
        MERCATO_TRUSTED_PROXIES=trusted,
        MERCATO_LOGIN_ATTEMPTS_PER_WINDOW=str(LIMIT),
    )
    serve = Serve(env, tmp_path / "serve.log")
    try:
        assert _failures_until_throttled(serve.url) == expected
    finally:
        serve.stop()
