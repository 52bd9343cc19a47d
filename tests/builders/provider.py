"""Provider SDK test helpers, shared with the platform's tests (defined in provider_sdk.support,
which runs without the platform)."""

from provider_sdk.support import (
    AUTH,
    BACKENDS,
    CREDENTIAL,
    PG_ADMIN_URL,
    REQUIRE_POSTGRES,
    CountingHandler,
    _sdk_postgres,
    disposable_store_url,
    drop_postgres_database,
    store_url,
    throwaway_postgres,
)

__all__ = [
    "AUTH",
    "BACKENDS",
    "CREDENTIAL",
    "PG_ADMIN_URL",
    "REQUIRE_POSTGRES",
    "CountingHandler",
    "_sdk_postgres",
    "disposable_store_url",
    "drop_postgres_database",
    "store_url",
    "throwaway_postgres",
]
