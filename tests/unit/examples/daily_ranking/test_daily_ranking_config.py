"""The example's own settings: DESIGN §11 names, a generated credential only in dev."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mercato_examples.daily_ranking.config import ConfigError, DailyRankingSettings, load_config


def test_the_design_names_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MERCATO_DAILY_RANKING_UPSTREAM", "http://127.0.0.1:8200/")
    monkeypatch.setenv("MERCATO_DAILY_RANKING_IMAGE_HOSTS", "i.pximg.net, 127.0.0.1:8200 ,")
    monkeypatch.setenv("MERCATO_DAILY_RANKING_CREDENTIAL", "from-the-env")
    monkeypatch.setenv("MERCATO_DATA_DIR", str(tmp_path))

    config = load_config()

    assert config.upstream == "http://127.0.0.1:8200"
    assert config.allowed_image_hosts == frozenset({"i.pximg.net", "127.0.0.1:8200"})
    assert config.resolve_credential() == "from-the-env"
    assert (
        config.snapshot_database_url == f"sqlite:///{tmp_path.resolve()}/daily-ranking/snapshots.db"
    )


def test_defaults_point_at_the_real_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("UPSTREAM", "IMAGE_HOSTS"):
        monkeypatch.delenv(f"MERCATO_DAILY_RANKING_{name}", raising=False)
    config = DailyRankingSettings()
    assert (config.upstream, config.allowed_image_hosts) == (
        "https://www.pixiv.net",
        frozenset({"i.pximg.net"}),
    )


def test_outside_dev_a_credential_is_required(tmp_path: Path) -> None:
    config = DailyRankingSettings(env="production", data_dir=tmp_path, credential=None)
    with pytest.raises(ConfigError):
        config.resolve_credential()


def test_in_dev_a_credential_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    config = DailyRankingSettings(env="dev", data_dir=tmp_path, credential=None)

    first = config.resolve_credential()

    assert len(first) >= 32
    assert config.resolve_credential() == first
    path = tmp_path / "daily-ranking" / "credential"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_non_http_upstream_is_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        DailyRankingSettings(upstream="file:///etc/passwd")
