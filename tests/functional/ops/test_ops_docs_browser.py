"""`/v1/docs` renders every operation in a real headless browser that can resolve no host but
127.0.0.1: the interactive docs need nothing from the internet."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from builders.platform_process import Serve, mercato, platform_env

pytestmark = pytest.mark.functional


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_docs_render_every_operation_offline(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless chromium installed (apt-get install -y chromium)")
    data_dir = tmp_path / "data"
    env = platform_env(f"sqlite:///{tmp_path / 'mercato.db'}", data_dir)
    assert mercato("migrate", env=env).returncode == 0
    serve = Serve(env, tmp_path / "serve.log")
    try:
        document = httpx.get(serve.url + "/v1/openapi.json").json()
        dom = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--virtual-time-budget=15000",
                "--dump-dom",
                serve.url + "/v1/docs",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    finally:
        serve.stop()
    rendered = set(re.findall(r'data-path="([^"]+)"', dom))
    assert rendered == set(document["paths"]), "Swagger UI did not render the document"
    assert "Unable to render this definition" not in dom
