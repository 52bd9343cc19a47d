"""Provider SDK fixtures (store URLs over SQLite and PostgreSQL)."""

from builders.provider import _sdk_postgres, disposable_store_url, store_url

__all__ = ["_sdk_postgres", "disposable_store_url", "store_url"]
