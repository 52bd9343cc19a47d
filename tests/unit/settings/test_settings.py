"""Settings fail closed outside dev mode."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mercato.settings import Settings


def test_production_requires_a_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MERCATO_SECRET_KEY", raising=False)
    monkeypatch.delenv("MERCATO_ENV", raising=False)
    with pytest.raises(ValidationError, match="MERCATO_SECRET_KEY is required"):
        Settings()


def test_production_refuses_a_short_secret() -> None:
    with pytest.raises(ValidationError, match="at least 32"):
        Settings(env="production", secret_key="short")  # type: ignore[arg-type]


def test_dev_generates_a_secret_and_allows_private_providers() -> None:
    settings = Settings(env="dev")
    assert settings.secret_key is not None
    assert settings.private_addresses_allowed is True


def test_production_blocks_private_providers_by_default() -> None:
    settings = Settings(env="production", secret_key="x" * 40)  # type: ignore[arg-type]
    assert settings.private_addresses_allowed is False


def test_database_url_defaults_to_sqlite_under_data_dir(tmp_path: object) -> None:
    settings = Settings(env="dev", data_dir=tmp_path)  # type: ignore[arg-type]
    assert settings.resolved_database_url.startswith("sqlite:///")
    assert Settings(env="dev", database_url="postgresql://u@h/db").resolved_database_url == (
        "postgresql+psycopg://u@h/db"
    )


def test_derived_keys_are_separated_by_purpose() -> None:
    settings = Settings(env="production", secret_key="k" * 40)  # type: ignore[arg-type]
    assert settings.derived_key("a") != settings.derived_key("b")
    assert len(settings.fernet_key("a")) == 44


def test_trusted_proxies_are_addresses_or_networks() -> None:
    assert Settings(env="dev").trusted_proxy_list == ["127.0.0.1", "::1"]
    listed = Settings(env="dev", trusted_proxies=" 10.0.0.0/8, 2001:db8::1 ")
    assert listed.trusted_proxy_list == ["10.0.0.0/8", "2001:db8::1"]
    assert Settings(env="dev", trusted_proxies="").trusted_proxy_list == []
    # Networks in canonical form (the proxy-header middleware matches only that form).
    written = Settings(env="dev", trusted_proxies="10.1.2.3/8, 2001:DB8::1")
    assert written.trusted_proxy_list == ["10.0.0.0/8", "2001:db8::1"]
    with pytest.raises(ValidationError, match=r"MERCATO_TRUSTED_PROXIES: 'proxy\.internal'"):
        Settings(env="dev", trusted_proxies="10.0.0.1,proxy.internal")


def test_only_dev_may_lower_the_password_hash_memory() -> None:
    assert Settings(env="production", secret_key="k" * 40).password_hash_memory_kib == 65536  # type: ignore[arg-type]
    assert Settings(env="dev", password_hash_memory_kib=64).password_hash_memory_kib == 64
    with pytest.raises(ValidationError, match="MERCATO_PASSWORD_HASH_MEMORY_KIB below 65536"):
        Settings(env="production", secret_key="k" * 40, password_hash_memory_kib=64)  # type: ignore[arg-type]


def test_mcp_allowed_hosts_are_host_patterns_or_any() -> None:
    assert Settings(env="dev").mcp_host_list == ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    listed = Settings(env="dev", mcp_allowed_hosts=" mercato.example, api.example:443 ,")
    assert listed.mcp_host_list == ["mercato.example", "api.example:443"]
    assert Settings(env="dev", mcp_allowed_hosts="*").mcp_host_list is None
    assert Settings(env="dev", mcp_allowed_hosts="").mcp_host_list == []
    for bad in ("http://mercato.example", "a b", "*.example", "host:port"):
        with pytest.raises(ValidationError, match="MERCATO_MCP_ALLOWED_HOSTS"):
            Settings(env="dev", mcp_allowed_hosts=bad)
