"""Composition: the snapshot store, blob cache, refresher and the SDK provider app, from config."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterable

import httpx
from starlette.applications import Starlette

from mercato.provider import LocalBlobStore, create_provider_app
from mercato_examples.daily_ranking.config import CHARTS, DailyRankingSettings
from mercato_examples.daily_ranking.handler import RankingHandler
from mercato_examples.daily_ranking.refresh import RefreshReport, ScheduledRefresher, refresh_chart
from mercato_examples.daily_ranking.snapshots import SnapshotStore
from mercato_examples.daily_ranking.upstream import UpstreamClient


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class DailyRanking:
    """One provider instance: its stores under `<data_dir>/daily-ranking/` and its refreshes."""

    def __init__(
        self,
        config: DailyRankingSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        self.config = config
        self.snapshots = SnapshotStore(config.snapshot_database_url)
        self.blobs = LocalBlobStore(config.home / "blobs")
        self._transport = transport
        self._sleep = sleep
        self._now = now
        self._refresh_lock = threading.Lock()

    def close(self) -> None:
        self.snapshots.close()

    def refresh(self, charts: Iterable[str] = CHARTS) -> list[RefreshReport]:
        """Refresh the given charts one after another (one refresh at a time per process)."""
        with (
            self._refresh_lock,
            UpstreamClient(self.config, transport=self._transport, sleep=self._sleep) as client,
        ):
            return [
                refresh_chart(
                    chart=chart,
                    client=client,
                    store=self.snapshots,
                    blobs=self.blobs,
                    now=self._now,
                )
                for chart in charts
            ]

    def scheduler(self) -> ScheduledRefresher:
        """A background refresher of every chart, every `refresh_interval_seconds`."""
        # Smallest chart first, so a fresh install answers something within a minute or so.
        order = ("manga", "illust", "overall")
        return ScheduledRefresher(lambda: self.refresh(order), self.config.refresh_interval_seconds)

    def ready(self) -> bool:
        """Readiness: the snapshot store answers (an empty store is still ready)."""
        self.snapshots.check()
        return True

    def app(self, *, credential: str | None = None) -> Starlette:
        """The provider ASGI app: the four endpoints plus artifacts, backed by the snapshots."""
        return create_provider_app(
            RankingHandler(self.snapshots),
            credential=credential or self.config.resolve_credential(),
            store=str(self.config.home / "idempotency.db"),
            blobs=self.blobs,
            ready_check=self.ready,
            handler_idempotent=True,
        )
