"""Artifact integration fixtures: a runtime per blob store, with a clock the tests move."""

from __future__ import annotations

import pytest

from mercato.artifacts.store import BlobStore, open_blob_store
from mercato.core.clock import FakeClock
from mercato.db.runtime import Runtime


@pytest.fixture(params=["local", "database"])
def blob_runtime(request: pytest.FixtureRequest, runtime: Runtime) -> Runtime:
    """The test runtime configured for one blob store, on a controllable clock."""
    settings = runtime.settings.model_copy(update={"blob_store": request.param})
    return Runtime(settings=settings, db=runtime.db, clock=FakeClock())


@pytest.fixture
def blobs(blob_runtime: Runtime) -> BlobStore:
    return open_blob_store(blob_runtime)
