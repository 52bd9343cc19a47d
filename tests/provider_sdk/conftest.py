"""Provider SDK fixtures (store URLs over SQLite and PostgreSQL); no platform import."""

from provider_sdk.support import _sdk_postgres, disposable_store_url, store_url

__all__ = ["_sdk_postgres", "disposable_store_url", "store_url"]
