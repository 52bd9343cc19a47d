"""Page-test helpers: a cookie-keeping browser that fills in CSRF tokens, and page readers."""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi.testclient import TestClient

from builders.accounts import DEFAULT_PASSWORD
from builders.invocation_world import World

PERSON = "person@example.com"
STAFF = "staff@example.com"
OTHER = "other@example.com"

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_TITLE = re.compile(r"<title>([^<]*)</title>")


class Browser:
    """A cookie-keeping client that fills in the CSRF token the way a page's form does."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.http = TestClient(world.client.app, raise_server_exceptions=False)
        self.csrf = ""

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        response = self.http.get(path, follow_redirects=False, **kwargs)
        found = _CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    def post(
        self, path: str, data: dict[str, str] | None = None, *, csrf: bool = True
    ) -> httpx.Response:
        form = dict(data or {})
        if csrf:
            if not self.csrf:
                self.get("/login")
            form["csrf_token"] = self.csrf
        response = self.http.post(path, data=form, follow_redirects=False)
        found = _CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    def follow(self, response: httpx.Response) -> httpx.Response:
        assert response.status_code == 303, (response.status_code, response.text[:2000])
        return self.get(response.headers["location"])

    def login(self, email: str, password: str = DEFAULT_PASSWORD) -> httpx.Response:
        self.get("/login")
        response = self.post("/login", {"email": email, "password": password})
        assert response.status_code == 303, response.text[:2000]
        return response

    def cookie(self, name: str) -> str | None:
        value: str | None = self.http.cookies.get(name)
        return value


def title(response: httpx.Response) -> str:
    found = _TITLE.search(response.text)
    assert found, response.text[:500]
    return found.group(1)


def field_error(response: httpx.Response, name: str) -> str:
    """The error paragraph shown next to a form field (empty when there is none)."""
    found = re.search(
        rf'<p class="error" id="{name}-error" role="alert">([^<]*)</p>', response.text
    )
    return found.group(1) if found else ""
