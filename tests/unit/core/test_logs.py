"""Structured logs: one JSON object per line, the request id from the contextvar, no secret."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mercato.core.logs import (
    _FOLD,
    _STANDARD,
    REDACTED,
    RedactingFilter,
    _folded,
    _scrub_value,
    about_invocation,
    invocation_id_var,
    json_handler,
    log_fields,
    register_secret,
    request_id_var,
    sane_request_id,
    scrub,
    suspect,
    timestamp,
)


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    logger = logging.getLogger("mercato.test.logs")
    handler = json_handler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_is_one_json_object_with_the_request_id_and_extra_fields(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    token = request_id_var.set("req-123")
    try:
        logger.info("served %s", "thing", extra={"status": 200, "route": "/v1/x"})
    finally:
        request_id_var.reset(token)
    logger.warning("outside")
    inside, outside = _lines(stream)
    assert inside["msg"] == "served thing"
    assert (inside["level"], inside["logger"]) == ("INFO", "mercato.test.logs")
    assert (inside["request_id"], inside["status"], inside["route"]) == ("req-123", 200, "/v1/x")
    assert inside["ts"].endswith("+00:00")
    assert outside["request_id"] is None


def test_lines_about_an_invocation_carry_its_request_id_not_the_surrounding_one(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    token = request_id_var.set("req-outer")
    try:
        with about_invocation("inv_1", "req-accepted"):
            logger.info("about the call")
        with about_invocation("inv_2"):
            logger.info("about an older call")
        logger.info("after")
    finally:
        request_id_var.reset(token)
    call, older, after = _lines(stream)
    assert (call["invocation_id"], call["request_id"]) == ("inv_1", "req-accepted")
    assert (older["invocation_id"], older["request_id"]) == ("inv_2", None)
    assert "invocation_id" not in after and after["request_id"] == "req-outer"


@pytest.mark.parametrize(
    "secret",
    [
        "mercato_live_0123456789abcdefABCDEF",
        "mercato_at_eyJhbGciOiJIUzI1NiJ9.payload.sig-_",
        "mercato_rt_abcdefghijklmnop",
    ],
)
def test_platform_tokens_are_redacted_in_messages_fields_and_tracebacks(
    capture: tuple[logging.Logger, io.StringIO], secret: str
) -> None:
    logger, stream = capture
    logger.info("got %s", secret, extra={"note": f"key={secret}", "items": [secret]})
    try:
        raise ValueError(f"bad credential {secret}")
    except ValueError:
        logger.exception("failed")
    text = stream.getvalue()
    assert secret not in text
    assert REDACTED in text
    first, second = _lines(stream)
    assert first["msg"].startswith("got mercato_")
    assert "ValueError" in second["exc"]


def test_authorization_values_and_secret_named_fields_are_redacted(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    logger.info(
        "headers %s",
        {"Authorization": "Bearer opaque-provider-token-123"},
        extra={"password": "hunter2hunter2", "credential": "c-0123456789", "count": 3},
    )
    logger.info("Authorization: Basic dXNlcjpwYXNz")
    text = stream.getvalue()
    for secret in ("opaque-provider-token-123", "hunter2hunter2", "c-0123456789", "dXNlcjpwYXNz"):
        assert secret not in text
    line = _lines(stream)[0]
    assert (line["password"], line["credential"], line["count"]) == (REDACTED, REDACTED, 3)


def test_registered_secrets_never_appear_literally(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    credential = "free-form provider credential 9f8e7d6c"
    register_secret(credential)
    logger.error("provider said: %s", f"unknown key {credential}!", extra={"detail": credential})
    assert credential not in stream.getvalue()
    assert scrub(f"x{credential}y") == f"x{REDACTED}y"


def test_short_values_are_not_registered_as_secrets() -> None:
    register_secret("abc")
    assert scrub("abc") == "abc"


@pytest.mark.parametrize(
    ("incoming", "kept"),
    [
        ("abc-123_DEF.4:5", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("has space", False),
        ("tab\there", False),
        ("", False),
        ("mercato_live_abcdef", False),
        ("ünïcode", False),
        (None, False),
    ],
)
def test_only_sane_incoming_request_ids_are_kept(incoming: str | None, kept: bool) -> None:
    assert sane_request_id(incoming) == (incoming if kept else None)


def _scrub_every_pattern(text: str) -> str:
    """`scrub` as it was before its keyword pre-check: every pattern applied to every line."""
    from mercato.core import logs

    if "mercato_" in text:
        text = logs._TOKEN.sub(lambda m: m.group(1) + REDACTED, text)
    text = logs._BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return logs._AUTH_HEADER.sub(lambda m: m.group(1) + m.group(2) + REDACTED + m.group(3), text)


_KEYWORDS = ["bearer ", "Basic ", "authorization: ", "Cookie=", "x-api-key:", "\u0131", "\u212a"]


@given(
    st.lists(
        st.one_of(st.sampled_from(_KEYWORDS), st.text(max_size=12)),
        max_size=8,
    ).map("".join)
)
def test_the_keyword_pre_check_skips_only_lines_no_pattern_matches(text: str) -> None:
    assert scrub(text) == _scrub_every_pattern(text)


@pytest.mark.parametrize(
    "text",
    [
        "AUTHOR\u0130ZATION: x",
        "author\u0131zation: secret",
        "\u212aey bearer tok",
        "BA\u017fIC abc",
    ],
)
def test_the_pre_check_folds_what_ignorecase_matches(text: str) -> None:
    assert scrub(text) == _scrub_every_pattern(text)


def test_the_fold_covers_every_character_ignorecase_takes_for_a_letter() -> None:
    everything = "".join(
        chr(code) for code in range(sys.maxunicode + 1) if code < 0xD800 or code > 0xDFFF
    )
    for letter in "abcdefghijklmnopqrstuvwxyz":
        for found in set(re.findall(f"(?i){letter}", everything)):
            assert found.translate(_FOLD) == letter, (letter, hex(ord(found)))


def test_ascii_text_folds_by_lower_as_by_the_table() -> None:
    everything = "".join(chr(code) for code in range(128))
    assert everything.lower() == everything.translate(_FOLD)


@given(st.text())
def test_the_fold_is_the_table_s_for_any_text(text: str) -> None:
    assert _folded(text) == text.translate(_FOLD)


_SECRET = "registered-secret-for-the-property-tests"
register_secret(_SECRET)
_PIECES = [*_KEYWORDS, "mercato_live_abc", _SECRET, "Bearer", "Authorization:", "\u0130", "\n"]
_texts = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=12)), max_size=8).map(
    "".join
)


@given(st.lists(_texts, min_size=1, max_size=6))
def test_what_is_not_suspect_scrub_leaves_alone_and_so_every_part_of_it(parts: list[str]) -> None:
    whole = "\n".join(parts)
    if not suspect(whole):
        assert scrub(whole) == whole
        assert all(scrub(part) == part for part in parts)
    for part in parts:
        assert suspect(part) or scrub(part) == part


def _redacted_one_by_one(record: logging.LogRecord) -> dict[str, Any]:
    """The filter's result as it was before the joined check: every field scrubbed alone."""
    fields = {"msg": scrub(record.getMessage())}
    for name, value in vars(record).items():
        if name not in _STANDARD and not name.startswith("_"):
            fields[name] = _scrub_value(name, value)
    return fields


_values = st.one_of(
    _texts,
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.lists(_texts, max_size=3),
    st.dictionaries(st.sampled_from(["a", "token", "note"]), _texts, max_size=3),
)
_names = st.sampled_from(["note", "path", "route", "client", "status", "password", "api_key", "x"])


@given(_texts, st.dictionaries(_names, _values, max_size=6))
def test_the_filter_redacts_as_when_every_field_was_scrubbed_alone(
    message: str, extra: dict[str, Any]
) -> None:
    def record() -> logging.LogRecord:
        made = logging.LogRecord("t", logging.INFO, "f", 1, "%s", (message,), None)
        for name, value in extra.items():
            setattr(made, name, value)
        return made

    expected = _redacted_one_by_one(record())
    filtered = record()
    assert RedactingFilter().filter(filtered)
    got = {"msg": filtered.msg}
    got.update({name: getattr(filtered, name) for name in extra})
    assert got == expected
    assert _SECRET not in repr(got)


def test_log_fields_writes_the_line_logger_info_writes(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    fields = {"status": 200, "route": "/v1/x", "note": "Bearer abc.def", "password": "p"}
    logger.info("request", extra=dict(fields))
    log_fields(logger, logging.INFO, "request", dict(fields))
    logger.setLevel(logging.WARNING)
    log_fields(logger, logging.INFO, "request", dict(fields))  # below the level: no line
    plain, direct = _lines(stream)
    assert plain.pop("ts") and direct.pop("ts")
    assert plain == direct
    assert (direct["note"], direct["password"]) == (f"Bearer {REDACTED}", REDACTED)


def _iso_ms(created: float) -> str:
    return dt.datetime.fromtimestamp(created, tz=dt.UTC).isoformat(timespec="milliseconds")


@given(
    st.one_of(
        st.floats(min_value=-1e9, max_value=2.5e11),
        # near the roundings: half a microsecond either side of a millisecond or second edge
        st.builds(
            lambda second, edge: second + edge,
            st.integers(min_value=0, max_value=4_000_000_000),
            st.sampled_from([0.0, 5e-7, 0.9999995, 0.9999996, 0.0004995, 0.0005, 0.001]),
        ),
    )
)
def test_the_timestamp_is_datetime_s_to_the_millisecond(created: float) -> None:
    assert timestamp(created) == _iso_ms(created)
    assert timestamp(created) == _iso_ms(created)  # once more from the second's cache


# --- log_fields writes its line directly through a JsonHandler as made (decision 0430) ------

_field_names = st.sampled_from(
    ["note", "path", "status", "password", "invocation_id", "_private", "level", "ts", "x"]
)


def _two_lines(
    msg: str, fields: dict[str, Any], invocation_id: str | None, request_id: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The line `log_fields` writes through a handler as made (directly) and through one with
    a pass-through filter added (by a LogRecord, as `logger.handle` does)."""
    lines = []
    for direct in (True, False):
        stream = io.StringIO()
        logger = logging.getLogger("mercato.test.direct")
        handler = json_handler(stream)
        if not direct:
            handler.addFilter(logging.Filter())
        logger.handlers = [handler]  # only it (pytest's capture handlers may be added too)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        tokens = (invocation_id_var.set(invocation_id), request_id_var.set(request_id))
        try:
            log_fields(logger, logging.INFO, msg, dict(fields))
        finally:
            invocation_id_var.reset(tokens[0])
            request_id_var.reset(tokens[1])
            logger.handlers = []
        # One line, or none when the formatter failed (an int beyond 64 bits: orjson refuses
        # it, and the handler reports the error instead). Split on "\n" only: JSON text may
        # hold U+2028, which `splitlines` splits on.
        written = [json.loads(line) for line in stream.getvalue().split("\n") if line]
        for line in written:
            line.pop("ts")
        lines.append(written)
    return lines[0], lines[1]


@given(
    _texts,
    st.dictionaries(_field_names, _values, max_size=7),
    st.one_of(st.none(), st.sampled_from(["inv_1", _SECRET])),
    st.one_of(st.none(), st.just("req-1")),
)
def test_the_direct_line_is_the_line_of_a_record(
    msg: str, fields: dict[str, Any], invocation_id: str | None, request_id: str | None
) -> None:
    direct, recorded = _two_lines(msg, fields, invocation_id, request_id)
    # the same fields in the same order
    assert [list(line.items()) for line in direct] == [list(line.items()) for line in recorded]
    assert _SECRET not in json.dumps(direct)


def test_log_fields_makes_no_record_for_a_handler_as_made(
    capture: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = capture

    def no_record(*_args: Any, **_kwargs: Any) -> logging.LogRecord:
        raise AssertionError("a LogRecord was made")

    monkeypatch.setattr(logger, "makeRecord", no_record)
    # pytest's own capture handlers may sit on the logger too: only the JsonHandler here
    monkeypatch.setattr(logger, "handlers", logger.handlers[:1])
    log_fields(logger, logging.INFO, "request", {"status": 200, "note": "Bearer abc"})
    (line,) = _lines(stream)
    assert (line["msg"], line["status"], line["note"]) == ("request", 200, f"Bearer {REDACTED}")


def test_log_fields_leaves_the_caller_s_fields_as_they_were(
    capture: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = capture
    monkeypatch.setattr(logger, "handlers", logger.handlers[:1])
    fields: dict[str, Any] = {"note": "Bearer abc", "password": "p", "ts": "x", "_private": 1}
    given = dict(fields)
    token = invocation_id_var.set("inv_1")
    try:
        log_fields(logger, logging.INFO, "request", fields)
    finally:
        invocation_id_var.reset(token)
    assert fields == given  # redacted and extended in the line only (decision 0471)
    (line,) = _lines(stream)
    assert (line["note"], line["password"], line["invocation_id"]) == (
        f"Bearer {REDACTED}",
        REDACTED,
        "inv_1",
    )
    assert line["ts"] != "x" and "_private" not in line


def test_log_fields_hands_a_record_to_every_handler_when_there_are_more(
    capture: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = capture
    other = io.StringIO()
    monkeypatch.setattr(logger, "handlers", [logger.handlers[0], json_handler(other)])
    log_fields(logger, logging.INFO, "request", {"status": 200})
    monkeypatch.setattr(logger, "filters", [logging.Filter("elsewhere")])  # stops the record
    log_fields(logger, logging.INFO, "request", {"status": 201})
    assert [line["status"] for line in _lines(stream)] == [200]
    assert [line["status"] for line in _lines(other)] == [200]
