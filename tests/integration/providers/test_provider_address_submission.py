"""A base URL naming a non-public address literally is refused when submitted (issue 19 item 12).

Outside dev (`MERCATO_ALLOW_PRIVATE_PROVIDER_ADDRESSES` false): the service raises 422
`PROVIDER_ADDRESS_FORBIDDEN` naming `baseUrl`, and the provider pages answer 422 with the error
next to the base URL input; nothing is stored and nothing is sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from builders.accounts import make_account
from builders.pages import Browser, field_error
from mercato.core.clock import utcnow
from mercato.db.runtime import Runtime
from mercato.providers import service as providers
from mercato.providers.errors import ProviderAddressForbidden
from mercato.providers.models import ConformanceRun, ProviderConnection
from mercato.settings import Settings
from mercato.web.app import create_app
from mercato.web.problems import from_error

OWNER = "owner@example.com"
CREDENTIAL = "conn-secret-0123456789abcdef"
FORBIDDEN = [
    "http://localhost:8080",
    "https://api.localhost",
    "http://127.1:9000",
    "http://2130706433/",
    "http://10.0.0.7",
    "http://169.254.169.254/latest",
    "http://[::1]:8080",
    "http://[fd00:ec2::254]",
]


@pytest.fixture
def strict(settings: Settings) -> Iterator[Runtime]:
    """A runtime that refuses private provider addresses, as production does."""
    runtime = Runtime.from_settings(
        settings.model_copy(update={"allow_private_provider_addresses": False})
    )
    yield runtime
    runtime.db.dispose()


@pytest.fixture
def owner_id(strict: Runtime) -> str:
    return make_account(strict.db, OWNER)


@pytest.fixture
def owner(strict: Runtime, owner_id: str) -> Browser:
    client = TestClient(create_app(strict), raise_server_exceptions=False)
    browser = Browser(SimpleNamespace(client=client))  # type: ignore[arg-type]
    browser.login(OWNER)
    return browser


def _create(runtime: Runtime, owner_id: str, base_url: str, name: str = "main") -> str:
    with runtime.db.transaction() as session:
        return providers.create_connection(
            session,
            owner_id=owner_id,
            name=name,
            base_url=base_url,
            credential=CREDENTIAL,
            settings=runtime.settings,
            now=utcnow(),
        ).id


def _stored(runtime: Runtime) -> tuple[list[str], int]:
    with runtime.db.read() as session:
        urls = list(session.scalars(select(ProviderConnection.base_url)))
        runs = session.scalar(select(func.count()).select_from(ConformanceRun)) or 0
    return urls, runs


@pytest.mark.parametrize("base_url", FORBIDDEN)
def test_the_service_refuses_it_with_a_problem_naming_base_url(
    strict: Runtime, owner_id: str, base_url: str
) -> None:
    with pytest.raises(ProviderAddressForbidden) as refused:
        _create(strict, owner_id, base_url)
    error = refused.value
    assert (error.code, error.status, error.extra) == (
        "PROVIDER_ADDRESS_FORBIDDEN",
        422,
        {"field": "baseUrl"},
    )
    problem = from_error(error)
    assert problem.status_code == 422 and problem.media_type == "application/problem+json"
    body = json.loads(problem.body)
    assert (body["code"], body["field"]) == ("PROVIDER_ADDRESS_FORBIDDEN", "baseUrl")
    assert _stored(strict) == ([], 0)


def test_a_change_to_such_an_address_is_refused_and_changes_nothing(
    strict: Runtime, owner_id: str
) -> None:
    connection_id = _create(strict, owner_id, "https://provider.example.com")
    for base_url in FORBIDDEN:
        with pytest.raises(ProviderAddressForbidden), strict.db.transaction() as session:
            providers.update_connection(
                session,
                connection_id=connection_id,
                settings=strict.settings,
                now=utcnow(),
                base_url=base_url,
            )
    with strict.db.read() as session:
        connection = providers.get_connection(session, connection_id=connection_id)
        assert (connection.base_url, connection.revision) == ("https://provider.example.com", 1)


def test_dev_still_accepts_loopback_providers(runtime: Runtime) -> None:
    assert runtime.settings.private_addresses_allowed
    owner_id = make_account(runtime.db, OWNER)
    _create(runtime, owner_id, "http://localhost:8080")
    assert _stored(runtime)[0] == ["http://localhost:8080"]


@pytest.mark.parametrize("base_url", ["http://localhost:8080", "http://0x7f.1", "http://10.1.2.3"])
def test_the_new_connection_form_answers_422_next_to_the_base_url(
    strict: Runtime, owner: Browser, base_url: str
) -> None:
    owner.get("/provider")
    page = owner.post(
        "/provider/connections", {"name": "main", "base_url": base_url, "credential": CREDENTIAL}
    )
    assert page.status_code == 422, page.text[:2000]
    assert "non-public address" in field_error(page, "base_url")
    assert field_error(page, "name") == "" and field_error(page, "credential") == ""
    assert f'value="{base_url}"' in page.text  # what was typed is kept for correction
    assert CREDENTIAL not in page.text
    assert _stored(strict) == ([], 0)


def test_the_change_form_answers_422_next_to_the_base_url(
    strict: Runtime, owner: Browser, owner_id: str
) -> None:
    connection_id = _create(strict, owner_id, "https://provider.example.com")
    owner.get(f"/provider/connections/{connection_id}")
    page = owner.post(
        f"/provider/connections/{connection_id}",
        {"name": "main", "base_url": "http://169.254.169.254", "credential": ""},
    )
    assert page.status_code == 422, page.text[:2000]
    assert "non-public address (link_local)" in field_error(page, "base_url")
    assert _stored(strict) == (["https://provider.example.com"], 0)
