"""The observed provider clients' per-call line and latency series (dispatch/observed.py): the
same JSON line and the same series, whether a series was looked up before or not (decision
0416: the line is written by `log_fields`, the series bound once per label values)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from mercato.core.logs import json_handler, register_secret
from mercato.dispatch import observed
from mercato.dispatch.calls import RawAnswer
from mercato.providers.schemas import DispatchTarget

SECRET = "observed-credential-0123456789"


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the `mercato.dispatch` logger writes through the product's JSON handler."""
    stream = io.StringIO()
    logger = logging.getLogger("mercato.dispatch")
    handler = json_handler(stream)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate


def _target() -> DispatchTarget:
    return DispatchTarget(
        connection_id="pcon_obs",
        base_url="http://provider.example",
        credential=SECRET,
        approved=True,
    )


def _count(operation: str, result: str) -> float:
    value = REGISTRY.get_sample_value(
        "mercato_provider_call_duration_seconds_count",
        {"operation": operation, "result": result},
    )
    return value or 0.0


def _written(stream: io.StringIO) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in stream.getvalue().splitlines()]
    for line in found:
        assert line.pop("ts")
    return found


def test_each_call_writes_its_line_and_counts_in_its_series(lines: io.StringIO) -> None:
    register_secret(SECRET)
    before = {key: _count(*key) for key in (("execute", "2xx"), ("artifact", "timeout"))}
    calls = [
        ("POST", "/v1/executions", RawAnswer(200, b"{}", None, 12.345)),
        ("POST", "/v1/executions", RawAnswer(201, b"{}", None, 3.0)),
        ("GET", "/v1/artifacts/" + "ab" * 32, RawAnswer(None, None, "timeout", 5000.04)),
    ]
    for method, path, answer in calls:
        observed._observe(_target(), method, path, answer)

    common: dict[str, Any] = {"level": "INFO", "logger": "mercato.dispatch", "msg": "provider call"}
    common |= {"request_id": None, "connection_id": "pcon_obs"}
    assert _written(lines) == [
        common
        | {"operation": "execute", "path": "/v1/executions", "provider_status": 200}
        | {"provider_error": None, "elapsed_ms": 12.3},
        common
        | {"operation": "execute", "path": "/v1/executions", "provider_status": 201}
        | {"provider_error": None, "elapsed_ms": 3.0},
        common
        | {"operation": "artifact", "path": "/v1/artifacts/{digest}", "provider_status": None}
        | {"provider_error": "timeout", "elapsed_ms": 5000.0},
    ]
    assert SECRET not in lines.getvalue()
    assert _count("execute", "2xx") == before["execute", "2xx"] + 2
    assert _count("artifact", "timeout") == before["artifact", "timeout"] + 1


def test_a_line_carries_no_caller_lookup_but_every_standard_attribute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mercato.dispatch")
    observed._observe(_target(), "POST", "/v1/reconciliations", RawAnswer(200, b"", None, 1.0))
    (record,) = [r for r in caplog.records if r.getMessage() == "provider call"]
    assert (record.name, record.levelno, record.lineno) == ("mercato.dispatch", logging.INFO, 0)
    line: Any = record
    assert (line.operation, line.path, line.provider_status) == (
        "reconcile",
        "/v1/reconciliations",
        200,
    )
