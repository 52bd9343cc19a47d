"""One typed settings object, read from `MERCATO_*` variables and validated at start."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_DEV_SECRET = "mercato-dev-secret-not-for-production"


class SettingsError(ValueError):
    """The configuration cannot be used; the process must not start."""


class Settings(BaseSettings):
    """Mercato's configuration. Secrets fail closed outside `MERCATO_ENV=dev`."""

    model_config = SettingsConfigDict(env_prefix="MERCATO_", extra="ignore")

    env: Literal["production", "dev"] = "production"
    data_dir: Path = Path("./var")
    database_url: str = ""
    secret_key: SecretStr | None = None
    allow_private_provider_addresses: bool | None = None
    blob_store: Literal["local", "database"] = "local"

    access_token_ttl_seconds: int = Field(default=900, ge=30)
    refresh_token_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    # Login throttle (decision 0220): failures per (email, address), per address, and the
    # per-email bound that only spaces out attempts from addresses that have failed.
    login_attempts_per_window: int = Field(default=10, ge=1, le=1_000_000)
    login_address_attempts_per_window: int = Field(default=30, ge=1, le=1_000_000)
    login_email_attempts_per_window: int = Field(default=20, ge=1, le=1_000_000)
    login_email_delay_seconds: int = Field(default=15, ge=1, le=3600)
    login_window_seconds: int = Field(default=300, ge=1, le=86_400)
    # Peers whose X-Forwarded-For / X-Forwarded-Proto are believed (addresses or networks).
    trusted_proxies: str = "127.0.0.1,::1"

    # Points granted once to each account made on the web sign-up page (0: none).
    signup_points: int = Field(default=0, ge=0, le=10**15)

    default_quota_policy: str = "standard"
    default_quota_limit: int = Field(default=60, ge=1)
    default_quota_window_seconds: int = Field(default=60, ge=1)

    provider_timeout_seconds: float = Field(default=10.0, gt=0)
    redispatch_attempts: int = Field(default=3, ge=1)
    idempotency_lease_seconds: int = Field(default=30, ge=1)
    # A call still unknown after this many reconciliations, or this long after acceptance, is
    # stuck: staff see it and may resolve it (decision 0201).
    stuck_after_attempts: int = Field(default=20, ge=1)
    stuck_after_seconds: int = Field(default=86400, ge=1)
    # Threads of one process working in the database at once (0: no limit); decision 0185.
    db_concurrency: int = Field(default=4, ge=0)
    # prometheus_client's own variable: set (by `serve --workers N`), /metrics aggregates the
    # series of every worker process from this directory.
    prometheus_multiproc_dir: str = Field(default="", validation_alias="PROMETHEUS_MULTIPROC_DIR")

    @model_validator(mode="after")
    def _fail_closed(self) -> Settings:
        if self.secret_key is None:
            if self.env != "dev":
                raise SettingsError("MERCATO_SECRET_KEY is required unless MERCATO_ENV=dev")
            self.secret_key = SecretStr(_DEV_SECRET)
        elif self.env != "dev" and len(self.secret_key.get_secret_value()) < 32:
            raise SettingsError("MERCATO_SECRET_KEY must be at least 32 characters")
        if self.allow_private_provider_addresses is None:
            self.allow_private_provider_addresses = self.env == "dev"
        _proxy_entries(self.trusted_proxies)  # a malformed entry fails here, at start
        return self

    @property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL: the configured one, else SQLite under the data dir."""
        url = self.database_url or f"sqlite:///{(self.data_dir / 'mercato.db').resolve()}"
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        elif url.startswith("postgres://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgres://")
        return url

    @property
    def trusted_proxy_list(self) -> list[str]:
        """The trusted proxies as address or network strings (empty: trust no peer)."""
        return _proxy_entries(self.trusted_proxies)

    @property
    def private_addresses_allowed(self) -> bool:
        return bool(self.allow_private_provider_addresses)

    def derived_key(self, purpose: str) -> bytes:
        """Derive a 32-byte key for one purpose from the secret key (domain separation)."""
        assert self.secret_key is not None
        material = self.secret_key.get_secret_value().encode()
        return hashlib.sha256(b"mercato:" + purpose.encode() + b":" + material).digest()

    def fernet_key(self, purpose: str) -> bytes:
        """Return a Fernet key (urlsafe base64) derived for `purpose`."""
        return base64.urlsafe_b64encode(self.derived_key(purpose))


def _proxy_entries(text: str) -> list[str]:
    """Split MERCATO_TRUSTED_PROXIES, refusing anything but IP addresses and networks."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise SettingsError(
                f"MERCATO_TRUSTED_PROXIES: {entry!r} is not an IP address or network; give "
                "comma-separated addresses or CIDR networks, or leave it empty"
            ) from None
    return entries


class CallerSettings(BaseSettings):
    """What the caller's commands (`mercato call`, `mercato catalog`) read: the platform's URL
    and the caller's API key. Separate from `Settings`, which a caller's machine need not have.
    """

    model_config = SettingsConfigDict(env_prefix="MERCATO_", extra="ignore")

    url: str = ""
    api_key: SecretStr | None = None


def load_settings() -> Settings:
    """Read and validate the settings from the environment."""
    return Settings()
