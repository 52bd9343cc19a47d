"""Every malformed or unknown credential is a 401 problem with WWW-Authenticate, never a 500."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from builders.accounts import make_account, make_api_key
from mercato.db.uow import Database

MALFORMED: list[bytes | None] = [
    None,  # no header at all
    b"",
    b"mercato_live_" + b"a" * 43,  # no scheme
    b"Basic dXNlcjpwYXNz",
    b"Bearer",
    b"Bearer ",
    b"Bearer    ",
    b"Bearer \xff\xfe\xfd",
    b"Bearer mercato_live_\xc3\xa9" + b"a" * 42,
    b"Bearer garbage",
    b"Bearer mercato_live_short",
    b"Bearer mercato_live_" + b"a" * 43,  # well-formed but unknown
    b"Bearer mercato_live_" + b"a" * 4000,
    b"Bearer mercato_at_acct_x.sfam_y.99999999999." + b"A" * 43,
    b"Bearer mercato_at_" + b"." * 60,
    b"Bearer mercato_rt_" + b"a" * 43,  # a refresh token is not an access credential
    b"Bearer two words",
    b"Bearer \x01\x02",
]  # a NUL in any header is 400 INVALID_TEXT at the edge (tests/integration/web/test_edge.py)


@pytest.mark.parametrize("value", MALFORMED)
def test_malformed_authorization_is_401_problem(
    client: TestClient, db: Database, value: bytes | None
) -> None:
    account_id = make_account(db, password=None)  # a real key exists, but is not sent
    make_api_key(db, account_id)
    headers = [] if value is None else [(b"authorization", value)]
    response = client.get("/v1/me", headers=headers)  # type: ignore[arg-type]
    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["code"] == "UNAUTHENTICATED"


def test_scheme_is_case_insensitive(client: TestClient, db: Database) -> None:
    account_id = make_account(db)
    plaintext, _ = make_api_key(db, account_id)
    response = client.get("/v1/balance", headers={"Authorization": f"bearer {plaintext}"})
    assert response.status_code == 200
