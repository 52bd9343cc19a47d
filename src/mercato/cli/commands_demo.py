"""`mercato up`, `daily-ranking serve|refresh` and `sample-upstream serve` (DESIGN §1, §11)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
from pydantic import ValidationError

from mercato.cli.framework import MercatoCommand, MercatoGroup, WholeNumber, command, json_option
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, emit, progress, shows_progress
from mercato_examples.daily_ranking.config import CHARTS, ConfigError, load_config


def register(top: click.Group, _admin: click.Group) -> None:
    top.add_command(cmd_up)
    top.add_command(daily_ranking)
    top.add_command(sample_upstream)


class TcpPort(WholeNumber):
    """A TCP port, 1-65535."""

    name = "port"

    def __init__(self) -> None:
        super().__init__(1, 65535)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail("a TCP port is 1-65535", param, ctx)


@click.group("daily-ranking", cls=MercatoGroup, help="the example provider pixiv.daily-ranking")
def daily_ranking() -> None:
    """The example provider pixiv.daily-ranking."""


@click.group("sample-upstream", cls=MercatoGroup, help="the offline sample upstream")
def sample_upstream() -> None:
    """The offline sample upstream."""


@command("up", help="run the demo: platform, worker and the example provider")
@click.option("--port", type=TcpPort(), help="the platform's port (default 8000 if free)")
@json_option(help='print one JSON object {"url", "apiKey", "serviceCode", "version"} once ready')
def cmd_up(port: int | None, as_json: bool) -> int:
    from mercato.cli.demo_up import UpOptions, run_up

    _quiet_http_logs()
    return run_up(UpOptions(port=port, as_json=as_json))


def _quiet_http_logs() -> None:
    # httpx logs every request at INFO; a refresh makes hundreds. Keep warnings only.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _config_error(exc: Exception) -> int:
    """One line naming the variable and its fix, exit 2 (decision 0270)."""
    from mercato.settings import describe_settings_error
    from mercato_examples.daily_ranking.config import DailyRankingSettings

    sys.stderr.write(f"configuration error: {describe_settings_error(exc, DailyRankingSettings)}\n")
    return EXIT_USAGE


@daily_ranking.command(
    "serve", cls=MercatoCommand, help="run the provider with its scheduled refresher"
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=WholeNumber(0, 65535), default=8100, show_default=True)
def cmd_ranking_serve(host: str, port: int) -> int:
    from mercato.provider import serve_provider
    from mercato_examples.daily_ranking.provider import DailyRanking

    _quiet_http_logs()
    try:
        provider = DailyRanking(load_config())
        app = provider.app()
    except (ConfigError, ValidationError) as exc:
        return _config_error(exc)
    refresher = provider.scheduler()
    refresher.start()
    try:
        serve_provider(app, host=host, port=port)
    finally:
        refresher.stop()
        provider.close()
    return EXIT_OK


@daily_ranking.command("refresh", cls=MercatoCommand, help="refresh the snapshots now")
@click.option("--chart", type=click.Choice(CHARTS), help="one chart (default: all three)")
@json_option()
def cmd_ranking_refresh(chart: str | None, as_json: bool) -> int:
    from mercato_examples.daily_ranking.provider import DailyRanking

    _quiet_http_logs()
    try:
        provider = DailyRanking(load_config())
    except (ConfigError, ValidationError) as exc:
        return _config_error(exc)
    charts = [chart] if chart else list(CHARTS)
    shown = shows_progress(as_json=as_json)
    try:
        # One chart at a time, so a person at a terminal sees a bar advance per chart.
        reports = [
            report
            for each in progress(charts, lambda name: f"refreshing {name}", shown=shown)
            for report in provider.refresh([each])
        ]
    finally:
        provider.close()
    failed = any(r.failed for r in reports)
    data = {
        "ok": not failed,
        "charts": [
            {
                "chart": r.chart,
                "status": r.status,
                "snapshotId": r.snapshot_id,
                "date": r.chart_date,
                "reason": r.reason,
            }
            for r in reports
        ],
    }
    lines = [
        f"{r.chart}: {r.status}, serving {r.snapshot_id or 'nothing'}"
        + (f" ({r.reason})" if r.reason else "")
        for r in reports
    ]
    emit(data, as_json=as_json, text="\n".join(lines))
    return EXIT_FAILURE if failed else EXIT_OK


@sample_upstream.command("serve", cls=MercatoCommand, help="serve ranking pages and thumbnails")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=WholeNumber(0, 65535), default=8200, show_default=True)
def cmd_sample_serve(host: str, port: int) -> int:
    from mercato_examples.daily_ranking.sample_upstream import SampleUpstream

    server = SampleUpstream(host=host, port=port)
    sys.stdout.write(f"sample upstream at {server.base} (image host {server.host_port})\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK
