"""Accounts integration fixtures: a controllable clock inside the app's runtime."""

from __future__ import annotations

import pytest

from mercato.core.clock import FakeClock, utcnow
from mercato.db.runtime import Runtime


@pytest.fixture
def clock(runtime: Runtime) -> FakeClock:
    """Replace the runtime's clock; the app holds the same runtime object."""
    fake = FakeClock(utcnow())
    runtime.clock = fake
    return fake
