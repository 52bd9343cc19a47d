"""Provider SDK fixtures: store URLs and real provider processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.provider import _sdk_postgres, disposable_store_url, store_url
from builders.provider_process import ProviderProcess

__all__ = ["_sdk_postgres", "disposable_store_url", "provider_process", "store_url"]


@pytest.fixture
def provider_process(store_url: str, tmp_path: Path) -> Iterator[ProviderProcess]:
    """An echo provider (not yet started) over the parametrized store."""
    provider = ProviderProcess(store=store_url, workdir=tmp_path)
    yield provider
    provider.stop()
