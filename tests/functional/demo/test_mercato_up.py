"""`mercato up` end to end: real processes, real HTTP on 127.0.0.1, on SQLite and PostgreSQL.

Through the platform: each chart with a cap, every thumbnail downloaded and checked against its
digest, identical results on one snapshot, a failed refresh that keeps the previous snapshot, no
image address in any result, the printed `curl` run as printed, Ctrl-C stopping every child, and
a second run on the same data reusing everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.daily_ranking import SMALL_SIZES, running_sample
from builders.demo import UpProcess, free_port, wait_gone

pytestmark = pytest.mark.functional

SERVICE = "pixiv.daily-ranking"
REQUIRED = {"url", "apiKey", "serviceCode", "version"}
ARTWORK_LINK = re.compile(r"^https://www\.pixiv\.net/artworks/\d+$")
URL_IN_TEXT = re.compile(r"https?:[^\"\s]*|//[a-z0-9.-]+\.[a-z]{2,}[^\"\s]*", re.IGNORECASE)


class Caller:
    """The demo caller, over real HTTP against the platform `mercato up` started."""

    def __init__(self, url: str, api_key: str) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60
        )

    def invoke(self, payload: dict[str, Any]) -> httpx.Response:
        return self.http.post(
            f"/v1/services/{SERVICE}/versions/v1:invoke",
            json=payload,
            headers={"Idempotency-Key": f"test-{uuid.uuid4().hex}"},
        )

    def succeeded(self, payload: dict[str, Any]) -> dict[str, Any]:
        response = self.invoke(payload)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def artifact(self, invocation_id: str, artifact_id: str) -> bytes:
        """Download one artifact, polling while the worker is still ingesting it."""
        path = f"/v1/invocations/{invocation_id}/artifacts/{artifact_id}"
        deadline = time.monotonic() + 60
        while True:
            response = self.http.get(path)
            if response.status_code == 200:
                return response.content
            assert response.status_code == 503, response.text
            assert response.json()["code"] == "ARTIFACT_NOT_READY"
            assert time.monotonic() < deadline, f"artifact {path} never became ready"
            time.sleep(0.1)

    def balance(self) -> int:
        available: int = self.http.get("/v1/balance").json()["available"]
        return available

    def close(self) -> None:
        self.http.close()


def _mercato(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _control(sample: str, **body: Any) -> None:
    httpx.post(f"{sample}/_control", json=body, timeout=10).raise_for_status()


def _refresh(env: dict[str, str], info: dict[str, Any], chart: str) -> int:
    """`mercato daily-ranking refresh` from another process, sharing the demo's data dir."""
    sample = info["sampleUpstream"]
    refresh_env = env | {
        "MERCATO_ENV": "dev",
        "MERCATO_DAILY_RANKING_UPSTREAM": sample,
        "MERCATO_DAILY_RANKING_IMAGE_HOSTS": sample.removeprefix("http://"),
        "MERCATO_DAILY_RANKING_REQUEST_DELAY_SECONDS": "0",
    }
    return _mercato(refresh_env, "daily-ranking", "refresh", "--chart", chart).returncode


def _check_no_image_address(result: dict[str, Any], sample: str) -> None:
    text = json.dumps(result, ensure_ascii=False)
    assert sample.removeprefix("http://") not in text
    assert "pximg" not in text
    for found in URL_IN_TEXT.findall(text):
        assert ARTWORK_LINK.match(found), f"unexpected address in a result: {found}"
    for entry in result["entries"]:
        assert ARTWORK_LINK.match(entry["link"])


def _check_chart(caller: Caller, chart: str, sample: str) -> dict[str, Any]:
    body = caller.succeeded({"chart": chart, "limit": 5})
    result = body["result"]
    assert result["chart"] == chart
    assert [e["rank"] for e in result["entries"]] == [1, 2, 3, 4, 5]
    manifest = body["artifacts"]
    assert len(manifest) == 5
    assert [a["digest"] for a in manifest] == [e["thumbnailDigest"] for e in result["entries"]]
    for artifact in manifest:
        data = caller.artifact(body["invocationId"], artifact["artifactId"])
        assert hashlib.sha256(data).hexdigest() == artifact["digest"]
        assert len(data) == artifact["size"]
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    _check_no_image_address(result, sample)
    return body


def _log_in(url: str, login: dict[str, str]) -> dict[str, Any] | None:
    """`/v1/me` after logging in with a printed login, or None when the login is refused."""
    answer = httpx.post(f"{url}/v1/auth/login", json=login, timeout=30)
    if answer.status_code == 401:
        return None
    assert answer.status_code == 200, answer.text
    token = answer.json()["accessToken"]
    me = httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert me.status_code == 200, me.text
    found: dict[str, Any] = me.json()
    return found


def _sign_up_on_the_web(url: str, email: str, password: str) -> int:
    """Sign up through the web page (with its CSRF token); the new account's points."""
    with httpx.Client(base_url=url, timeout=30) as browser:
        page = browser.get("/signup")
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token, page.text[:500]
        form = {"csrf_token": token.group(1), "email": email, "password": password}
        done = browser.post("/signup", data=form)
        assert done.status_code == 303, done.text[:500]
    login = httpx.post(f"{url}/v1/auth/login", json={"email": email, "password": password})
    token_of = login.json()["accessToken"]
    balance = httpx.get(f"{url}/v1/balance", headers={"Authorization": f"Bearer {token_of}"})
    available: int = balance.json()["available"]
    return available


def _check_logins(info: dict[str, Any]) -> None:
    """The printed caller, provider and staff logins work on the web address printed."""
    assert info["web"] == info["url"] + "/"
    logins = info["logins"]
    assert sorted(logins) == ["caller", "provider", "staff"]
    for role, login in logins.items():
        me = _log_in(info["url"], login)
        assert me is not None, role
        assert me["email"] == login["email"]
        assert me["isStaff"] is (role == "staff")


def _start(start_up: Callable[..., UpProcess], env: dict[str, str], port: int) -> Any:
    up = start_up(env, "--json", "--port", str(port))
    info = up.ready_json()
    return up, info


def test_mercato_up_serves_the_example_and_a_second_run_reuses_the_data(
    demo_env: dict[str, str], start_up: Callable[..., UpProcess]
) -> None:
    port = free_port()
    up, info = _start(start_up, demo_env, port)
    assert info.keys() >= REQUIRED
    assert info["url"] == f"http://127.0.0.1:{port}"
    assert (info["serviceCode"], info["version"]) == (SERVICE, "v1")
    assert info["apiKey"].startswith("mercato_live_")
    sample = info["sampleUpstream"]
    assert sample.startswith("http://127.0.0.1:")
    caller = Caller(info["url"], info["apiKey"])
    listing = caller.http.get(f"/v1/catalog/listings/{SERVICE}")
    assert listing.status_code == 200, listing.text
    _check_logins(info)
    assert info["signupPoints"] == 100  # the demo sets MERCATO_SIGNUP_POINTS
    assert _sign_up_on_the_web(info["url"], "newcomer@example.com", "a long passphrase") == 100

    # Each chart with a cap; every thumbnail through the platform's artifact endpoint.
    results = {chart: _check_chart(caller, chart, sample) for chart in ("overall", "illust")}
    results["manga"] = _check_chart(caller, "manga", sample)

    # Two invokes on one snapshot give identical results.
    snapshot = results["overall"]["result"]["snapshotId"]
    first = caller.succeeded({"chart": "overall", "limit": 7, "snapshotId": snapshot})
    second = caller.succeeded({"chart": "overall", "limit": 7, "snapshotId": snapshot})
    assert first["invocationId"] != second["invocationId"]
    assert first["result"] == second["result"]
    assert first["artifacts"] == second["artifacts"]
    assert first["result"]["entries"][:5] == results["overall"]["result"]["entries"]

    # A refresh that fails (a new chart day whose thumbnails 404) keeps the previous snapshot.
    before = results["illust"]["result"]
    _control(sample, advanceDays=1, fail="thumbnail_404")
    assert _refresh(demo_env, info, "illust") == 1
    kept = caller.succeeded({"chart": "illust", "limit": 5})["result"]
    assert kept == before
    # ...and once the upstream is healthy again, a refresh is served at once.
    _control(sample, fail=None)
    assert _refresh(demo_env, info, "illust") == 0
    fresh = caller.succeeded({"chart": "illust", "limit": 5})["result"]
    assert fresh["snapshotId"] != before["snapshotId"]
    assert fresh["date"] > before["date"]
    _check_no_image_address(fresh, sample)

    # The printed curl works as printed, in bash.
    ran = subprocess.run(
        ["bash", "-c", info["curl"]], capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    assert answer["result"]["chart"] == "manga"
    assert answer["invocationId"].startswith("inv_")
    balance = caller.balance()
    caller.close()

    # Ctrl-C stops every process `mercato up` started.
    children = list(info["pids"].values())
    assert len(children) == 4 and all(isinstance(p, int) for p in children)
    assert up.stop(signal.SIGINT) == 0
    assert wait_gone(children) == []
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{info['url']}/health/live", timeout=2)

    # A second run on the same data: same listing, same caller, a fresh key and fresh logins;
    # the first run's key and passwords no longer work. SIGTERM stops it.
    again, info2 = _start(start_up, demo_env, port)
    assert info2["apiKey"] != info["apiKey"]
    caller2 = Caller(info2["url"], info2["apiKey"])
    assert caller2.http.get(f"/v1/catalog/listings/{SERVICE}").json() == listing.json()
    assert caller2.balance() == balance
    assert caller2.succeeded({"chart": "illust", "limit": 5})["result"] == fresh
    old_key = Caller(info2["url"], info["apiKey"])
    refused = old_key.invoke({"chart": "manga", "limit": 1})
    assert refused.status_code == 401, refused.text
    assert old_key.http.get("/v1/balance").status_code == 401
    old_key.close()
    _check_logins(info2)
    for role, login in info["logins"].items():
        assert login["password"] != info2["logins"][role]["password"]
        assert _log_in(info2["url"], login) is None, role
    caller2.close()
    assert again.stop(signal.SIGTERM) == 0
    assert wait_gone(list(info2["pids"].values())) == []

    verified = _mercato(demo_env | {"MERCATO_ENV": "dev"}, "admin", "verify-ledger", "--json")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["balanced"] is True


def test_mercato_up_prints_a_working_curl_for_humans(
    demo_env: dict[str, str], start_up: Callable[..., UpProcess]
) -> None:
    up = start_up(demo_env, "--port", str(free_port()))
    lines: list[str] = []
    while not lines or not lines[-1].startswith("Press Ctrl-C"):
        lines.append(up.next_line().rstrip("\n"))
    curl = [line for line in lines if line.startswith("curl ")]
    assert len(curl) == 1
    assert any(line.strip().startswith("API key") for line in lines)
    assert any(line.strip().startswith("web") for line in lines)
    for role in ("caller", "provider", "staff"):
        assert any(re.match(rf"\s+{role}\s+\S+@\S+\s+password \S+$", line) for line in lines)
    ran = subprocess.run(
        ["bash", "-c", curl[0]], capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["result"]["chart"] == "manga"
    assert up.stop(signal.SIGINT) == 0


def test_mercato_up_uses_a_configured_upstream_instead_of_starting_the_sample(
    tmp_path: Path, start_up: Callable[..., UpProcess]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    with running_sample(SMALL_SIZES) as upstream:
        env.update(
            MERCATO_DATA_DIR=str(tmp_path / "var"),
            MERCATO_DAILY_RANKING_UPSTREAM=upstream.base,
            MERCATO_DAILY_RANKING_IMAGE_HOSTS=upstream.host_port,
            MERCATO_DAILY_RANKING_REQUEST_DELAY_SECONDS="0",
        )
        up, info = _start(start_up, env, free_port())
        assert info["sampleUpstream"] is None
        assert sorted(info["pids"]) == ["daily-ranking", "serve", "worker"]
        caller = Caller(info["url"], info["apiKey"])
        body = _check_chart(caller, "manga", upstream.base)
        assert len(body["result"]["entries"]) == 5
        assert upstream.state.requests > 0  # the provider refreshed from this upstream
        caller.close()
        assert up.stop(signal.SIGTERM) == 0
        assert wait_gone(list(info["pids"].values())) == []


def test_a_busy_port_is_refused_before_anything_starts(
    demo_env: dict[str, str], start_up: Callable[..., UpProcess], tmp_path: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        up = start_up(demo_env, "--json", "--port", str(busy.getsockname()[1]))
        assert up.process.wait(timeout=120) == 1
    assert "is in use" in up.log()
    assert not (tmp_path / "var" / "logs").exists()  # no child was ever started


def test_a_killed_mercato_up_leaves_no_orphan(
    tmp_path: Path, start_up: Callable[..., UpProcess]
) -> None:
    # SIGKILL cannot be caught: the children's parent-death signal (Linux) must stop them.
    if not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux-only")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env["MERCATO_DATA_DIR"] = str(tmp_path / "var")
    up, info = _start(start_up, env, free_port())
    up.process.kill()
    up.process.wait(30)
    assert wait_gone(list(info["pids"].values())) == []
