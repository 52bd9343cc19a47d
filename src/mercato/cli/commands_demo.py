"""`mercato up`, `daily-ranking serve|refresh` and `sample-upstream serve` (DESIGN §1, §11)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from pydantic import ValidationError

from mercato.cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, emit
from mercato_examples.daily_ranking.config import CHARTS, ConfigError, load_config


def register(top: Any, _admin: Any) -> None:
    up = top.add_parser(
        "up", help="the one-command demo: platform, worker, example provider and sample upstream"
    )
    up.add_argument("--port", type=_port, help="the platform's port (default 8000 if free)")
    up.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object {"url", "apiKey", "serviceCode", "version"} once ready',
    )
    up.set_defaults(handler=cmd_up)

    ranking = top.add_parser("daily-ranking", help="the example provider pixiv.daily-ranking")
    ranking_sub = ranking.add_subparsers(dest="ranking_command", required=True)
    serve = ranking_sub.add_parser("serve", help="run the provider with its scheduled refresher")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8100)
    serve.set_defaults(handler=cmd_ranking_serve)
    refresh = ranking_sub.add_parser("refresh", help="refresh the snapshots now")
    refresh.add_argument("--chart", choices=CHARTS, help="one chart (default: all three)")
    refresh.add_argument("--json", action="store_true")
    refresh.set_defaults(handler=cmd_ranking_refresh)

    sample = top.add_parser("sample-upstream", help="the offline sample upstream")
    sample_sub = sample.add_subparsers(dest="sample_command", required=True)
    sample_serve = sample_sub.add_parser("serve", help="serve ranking pages and thumbnails")
    sample_serve.add_argument("--host", default="127.0.0.1")
    sample_serve.add_argument("--port", type=int, default=8200)
    sample_serve.set_defaults(handler=cmd_sample_serve)


def _port(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError("a TCP port is 1-65535")
    return number


def cmd_up(args: argparse.Namespace) -> int:
    from mercato.cli.demo_up import UpOptions, run_up

    _quiet_http_logs()
    return run_up(UpOptions(port=args.port, as_json=args.json))


def _quiet_http_logs() -> None:
    # httpx logs every request at INFO; a refresh makes hundreds. Keep warnings only.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _config_error(exc: Exception) -> int:
    """One line naming the variable and its fix, exit 2 (decision 0270)."""
    from mercato.settings import describe_settings_error
    from mercato_examples.daily_ranking.config import DailyRankingSettings

    sys.stderr.write(f"configuration error: {describe_settings_error(exc, DailyRankingSettings)}\n")
    return EXIT_USAGE


def cmd_ranking_serve(args: argparse.Namespace) -> int:
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
        serve_provider(app, host=args.host, port=args.port)
    finally:
        refresher.stop()
        provider.close()
    return EXIT_OK


def cmd_ranking_refresh(args: argparse.Namespace) -> int:
    from mercato_examples.daily_ranking.provider import DailyRanking

    _quiet_http_logs()
    try:
        provider = DailyRanking(load_config())
    except (ConfigError, ValidationError) as exc:
        return _config_error(exc)
    try:
        reports = provider.refresh([args.chart] if args.chart else CHARTS)
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
    emit(data, as_json=args.json, text="\n".join(lines))
    return EXIT_FAILURE if failed else EXIT_OK


def cmd_sample_serve(args: argparse.Namespace) -> int:
    from mercato_examples.daily_ranking.sample_upstream import SampleUpstream

    server = SampleUpstream(host=args.host, port=args.port)
    sys.stdout.write(f"sample upstream at {server.base} (image host {server.host_port})\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK
