"""The example provider's own configuration (`MERCATO_DAILY_RANKING_*`, `MERCATO_DATA_DIR`)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

CHARTS = ("overall", "illust", "manga")
DEFAULT_UPSTREAM = "https://www.pixiv.net"
DEFAULT_IMAGE_HOSTS = "i.pximg.net"


class ConfigError(ValueError):
    """The provider's configuration cannot be used; the process must not start."""


class DailyRankingSettings(BaseSettings):
    """Settings of the daily-ranking provider; independent of the platform's settings."""

    model_config = SettingsConfigDict(
        env_prefix="MERCATO_DAILY_RANKING_", extra="ignore", populate_by_name=True
    )

    upstream: str = DEFAULT_UPSTREAM
    image_hosts: str = DEFAULT_IMAGE_HOSTS
    credential: SecretStr | None = None
    env: Literal["production", "dev"] = Field(default="production", validation_alias="MERCATO_ENV")
    data_dir: Path = Field(default=Path("./var"), validation_alias="MERCATO_DATA_DIR")
    request_delay_seconds: float = Field(default=1.0, ge=0)
    refresh_interval_seconds: float = Field(default=1800.0, gt=0)
    rate_limit_retries: int = Field(default=3, ge=0)
    rate_limit_default_wait_seconds: float = Field(default=60.0, ge=0)
    rate_limit_max_wait_seconds: float = Field(default=600.0, ge=0)
    http_timeout_seconds: float = Field(default=30.0, gt=0)
    thumbnail_max_bytes: int = Field(default=5 * 1024 * 1024, ge=1)

    @field_validator("upstream")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("MERCATO_DAILY_RANKING_UPSTREAM must be an http(s) URL")
        return value.rstrip("/")

    @property
    def allowed_image_hosts(self) -> frozenset[str]:
        """The `host[:port]` entries thumbnails may come from, lower-cased."""
        return frozenset(h.strip().lower() for h in self.image_hosts.split(",") if h.strip())

    @property
    def home(self) -> Path:
        """The provider's own directory under the data dir (snapshots, blobs, idempotency)."""
        return self.data_dir / "daily-ranking"

    @property
    def snapshot_database_url(self) -> str:
        return f"sqlite:///{(self.home / 'snapshots.db').resolve()}"

    def resolve_credential(self) -> str:
        """Return the connection credential; in dev, generate one and keep it in the data dir."""
        if self.credential is not None and self.credential.get_secret_value():
            return self.credential.get_secret_value()
        if self.env != "dev":
            raise ConfigError("MERCATO_DAILY_RANKING_CREDENTIAL is required unless MERCATO_ENV=dev")
        path = self.home / "credential"
        if path.exists():
            return path.read_text(encoding="utf-8").strip()
        self.home.mkdir(parents=True, exist_ok=True)
        value = secrets.token_urlsafe(32)
        path.touch(mode=0o600)
        path.write_text(value + "\n", encoding="utf-8")
        return value


def load_config() -> DailyRankingSettings:
    """Read the provider's settings from the environment."""
    return DailyRankingSettings()
