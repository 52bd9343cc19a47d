"""Fixtures: a sample upstream on 127.0.0.1 and a provider instance pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.daily_ranking import SMALL_SIZES, RecordingSleep, running_sample, settings_for
from mercato_examples.daily_ranking.config import DailyRankingSettings
from mercato_examples.daily_ranking.provider import DailyRanking
from mercato_examples.daily_ranking.sample_upstream import SampleUpstream


@pytest.fixture
def sample() -> Iterator[SampleUpstream]:
    with running_sample(SMALL_SIZES) as server:
        yield server


@pytest.fixture
def config(sample: SampleUpstream, tmp_path: Path) -> DailyRankingSettings:
    return settings_for(sample, tmp_path)


@pytest.fixture
def sleeper() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def provider(config: DailyRankingSettings, sleeper: RecordingSleep) -> Iterator[DailyRanking]:
    instance = DailyRanking(config, sleep=sleeper)
    yield instance
    instance.close()
