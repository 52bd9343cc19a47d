"""Browser-test helpers: constants, the platform under test, publication, screenshots."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders.platform_process import mercato
from mercato.catalog.examples import daily_ranking_examples, example_contract

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CREDENTIAL = "browser-test-credential-0123456789"
PASSWORD = "correct horse battery staple"
STAFF_EMAIL = "staff@example.com"
PROVIDER_EMAIL = "provider@example.com"
SERVICE = "pixiv.daily-ranking"
SCREENSHOTS = Path(
    os.environ.get(
        "MERCATO_SCREENSHOT_DIR", Path(__file__).parents[1] / "artifacts" / "screenshots"
    )
)


@dataclass
class Platform:
    url: str
    env: dict[str, str]
    tmp: Path

    def cli(self, *args: str) -> dict[str, Any]:
        done = mercato(*args, "--json", env=self.env)
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result


def publish_ranking(
    platform: Platform, ranking_url: str, *, publisher: str | None = None, examples: bool = False
) -> None:
    """The operator path: connection, check, approval and publication of v1 (with the demo's
    example and a publisher name when asked)."""
    added = platform.cli(
        "admin",
        "add-connection",
        "--owner",
        PROVIDER_EMAIL,
        "--name",
        "daily-ranking",
        "--base-url",
        ranking_url,
        "--credential",
        CREDENTIAL,
    )
    assert added["check"]["passed"], added
    platform.cli("admin", "approve-connection", added["connectionId"])
    contract = platform.tmp / "contract.json"
    contract.write_text(json.dumps(example_contract()))
    platform.cli(
        "admin",
        "publish",
        "--connection",
        added["connectionId"],
        "--service-code",
        SERVICE,
        "--display-name",
        "Daily ranking",
        "--version",
        "v1",
        "--price",
        "5",
        "--contract",
        str(contract),
        "--description",
        "Snapshots of three daily charts, with thumbnails.",
        *(["--publisher", publisher] if publisher is not None else []),
        *(["--examples", str(_examples_file(platform))] if examples else []),
    )


def _examples_file(platform: Platform) -> Path:
    path = platform.tmp / "examples.json"
    path.write_text(json.dumps(daily_ranking_examples()), encoding="utf-8")
    return path


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
