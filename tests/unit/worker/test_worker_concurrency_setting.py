"""`MERCATO_WORKER_CONCURRENCY`: validated at start; how it splits between the lanes (0340)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mercato.settings import Settings
from mercato.worker import loops


def test_the_default_and_the_lanes_it_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MERCATO_WORKER_CONCURRENCY", raising=False)
    settings = Settings(env="dev")
    assert settings.worker_concurrency == 32
    assert (loops.fresh_slots(settings), loops.stuck_slots(settings)) == (32, 8)
    one = Settings(env="dev", worker_concurrency=1)
    assert (loops.fresh_slots(one), loops.stuck_slots(one)) == (1, 1)  # never a lane of none


def test_it_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERCATO_WORKER_CONCURRENCY", "7")
    assert Settings(env="dev").worker_concurrency == 7


@pytest.mark.parametrize("bad", [0, -1, 1025])
def test_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValidationError, match="worker_concurrency"):
        Settings(env="dev", worker_concurrency=bad)
