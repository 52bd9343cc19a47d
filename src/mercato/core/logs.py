"""Structured JSON logs: one object per line, a request id from a contextvar, never a secret.

`configure_logging()` replaces the root handlers with one stderr handler carrying the
`RequestIdFilter`, the `RedactingFilter` and the `JsonFormatter`. Every line has `ts`, `level`,
`logger`, `msg` and `request_id` (null outside a request), plus the record's `extra` fields.

Redaction (decision 0152) scrubs the formatted message, every string field and tracebacks:
`Authorization`/`Bearer` values, `mercato_live_…`/`mercato_at_…`/`mercato_rt_…` tokens, values
of fields whose name looks secret (password, credential, token, secret, authorization, cookie,
api_key), and every literal registered with `register_secret` (the secret key, each provider
credential the dispatcher decrypts).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import IO, Any

import orjson

REDACTED = "[REDACTED]"
request_id_var: ContextVar[str | None] = ContextVar("mercato_request_id", default=None)
# The invocation a line is about, when known: the worker sets it for each call it works on, so
# its lines join the invoke request's line, which names the same invocation (decision 0274).
invocation_id_var: ContextVar[str | None] = ContextVar("mercato_invocation_id", default=None)

_TOKEN = re.compile(r"\b(mercato_(?:live|at|rt)_)[A-Za-z0-9._~+/=-]+")
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s,;\"'}\]]+")
_AUTH_HEADER = re.compile(
    r"(?i)(['\"]?(?:authorization|proxy-authorization|cookie|set-cookie|x-api-key)['\"]?"
    r"\s*[:=]\s*)(['\"]?)[^'\"\n]+(['\"]?)"
)
_SECRET_FIELD = re.compile(
    r"(?i)(password|passwd|secret|credential|token|authorization|cookie|api_?key)"
)
# Every character IGNORECASE takes for an ASCII letter, as that letter (ASCII capitals, and
# U+0130/U+0131 for "i", U+017F for "s", U+212A for "k"; tests check the list is whole).
_FOLD = {
    **{code: code + 32 for code in range(ord("A"), ord("Z") + 1)},
    0x130: ord("i"),
    0x131: ord("i"),
    0x17F: ord("s"),
    0x212A: ord("k"),
}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_MAX_SECRETS = 4096
_MIN_SECRET_LENGTH = 8

# LogRecord attributes that are not `extra` fields.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()
    | {"message", "asctime", "request_id", "taskName", "color_message"}
)


class _SecretRegistry:
    """Literal secret values to scrub from every line (bounded, most recent kept)."""

    def __init__(self) -> None:
        self._values: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._snapshot: tuple[str, ...] = ()

    def add(self, value: str | None) -> None:
        if not value or len(value) < _MIN_SECRET_LENGTH:
            return
        with self._lock:
            if value in self._values:
                self._values.move_to_end(value)
                return
            self._values[value] = None
            while len(self._values) > _MAX_SECRETS:
                self._values.popitem(last=False)
            # Longest first, so a secret containing another is scrubbed whole.
            self._snapshot = tuple(sorted(self._values, key=len, reverse=True))

    def values(self) -> tuple[str, ...]:
        return self._snapshot


_secrets = _SecretRegistry()


def register_secret(value: str | None) -> None:
    """Never log `value` literally from now on (in this process)."""
    _secrets.add(value)


def _folded(text: str) -> str:
    """`text` with every character IGNORECASE takes for an ASCII letter folded to that letter.
    ASCII text folds by `lower()` exactly as by `_FOLD` (whose only non-ASCII entries are
    sources, never targets), at a fraction of `translate`'s cost."""
    return text.lower() if text.isascii() else text.translate(_FOLD)


def scrub(text: str) -> str:
    """`text` with every known secret shape and registered secret replaced by [REDACTED]."""
    for secret in _secrets.values():
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "mercato_" in text:
        text = _TOKEN.sub(lambda m: m.group(1) + REDACTED, text)
    # The patterns below match only where one of their keywords does, case-insensitively:
    # most lines have none, and a folded copy tells that at a fraction of a regex's cost.
    folded = _folded(text)
    if "bearer" in folded or "basic" in folded:
        text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    if "authorization" in folded or "cookie" in folded or "x-api-key" in folded:
        text = _AUTH_HEADER.sub(lambda m: m.group(1) + m.group(2) + REDACTED + m.group(3), text)
    return text


def suspect(text: str) -> bool:
    """Whether `scrub` could change `text`: it holds a registered secret, the platform tokens'
    prefix, or (folded) a keyword of the patterns. When not, `scrub(text) == text`, and the
    same holds for every substring of `text` (what `RedactingFilter` relies on)."""
    for secret in _secrets.values():
        if secret in text:
            return True
    if "mercato_" in text:
        return True
    folded = _folded(text)
    return (
        "bearer" in folded
        or "basic" in folded
        or "authorization" in folded
        or "cookie" in folded
        or "x-api-key" in folded
    )


@lru_cache(maxsize=1024)
def _secret_field(name: str) -> bool:
    """Whether a field called `name` holds a secret by its name (field names are few)."""
    return _SECRET_FIELD.search(name) is not None


# What a line does with a field by its name: leaves it out (`_`-prefixed), may print its value
# (a plain name) or prints it only redacted when set (a secret's name). Names are few and come
# from code: each is classified once, in a plain dict (a lookup costs a fraction of
# `startswith` and of the `lru_cache` call per field and line; decision 0471).
_PLAIN_NAME, _SECRET_NAME, _PRIVATE_NAME = 0, 1, 2
_MAX_NAMES = 4096
_name_kinds: dict[str, int] = {}


def _name_kind(name: str) -> int:
    """`_PRIVATE_NAME`, `_SECRET_NAME` or `_PLAIN_NAME` for a field called `name`."""
    kind = _name_kinds.get(name)
    if kind is None:
        if name.startswith("_"):
            kind = _PRIVATE_NAME
        else:
            kind = _SECRET_NAME if _secret_field(name) else _PLAIN_NAME
        if len(_name_kinds) < _MAX_NAMES:
            _name_kinds[name] = kind
    return kind


# Values no pattern can match and that print as no secret: numbers, booleans and None.
_PLAIN: frozenset[type] = frozenset({int, float, bool, type(None)})


def _scrub_value(name: str, value: Any) -> Any:
    if value is not None and _secret_field(name):
        return REDACTED
    kind = type(value)
    if kind is str:
        return scrub(value)
    if kind in _PLAIN:  # exact types only: subclasses take the general path below
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {str(k): _scrub_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub_value("", v) for v in value]
    if isinstance(value, bool | int | float) or value is None:
        return value
    return scrub(str(value))


def sane_request_id(value: str | None) -> str | None:
    """`value` if it is a short token of safe characters (and not a credential), else None."""
    if value is None or not _REQUEST_ID.match(value) or value.startswith("mercato_"):
        return None
    return value


def log_fields(logger: logging.Logger, level: int, msg: str, fields: dict[str, Any]) -> None:
    """`logger.log(level, msg, extra=fields)`, without looking up the caller's file and line
    (a walk up the stack per line): no line carries them (`JsonFormatter`), and the record
    names them as logging does when it cannot find them.

    When the line's one handler is a `JsonHandler` as `json_handler` made it (what
    `configure_logging` sets up), the handler writes the line from `fields` itself
    (`JsonHandler.write_fields`): the same line, without a LogRecord (decision 0430)."""
    if logger.isEnabledFor(level):
        handler = _sole_json_handler(logger, level)
        if handler is not None and fields.keys().isdisjoint(_STANDARD):
            handler.write_fields(logger.name, level, msg, fields)
            return
        record = logger.makeRecord(
            logger.name, level, "(unknown file)", 0, msg, (), None, "(unknown function)", fields
        )
        logger.handle(record)


def _sole_json_handler(logger: logging.Logger, level: int) -> JsonHandler | None:
    """The handler `logger.handle` would give a record of `level` to, when it is the only one
    it would look at, is a `JsonHandler` as made, and no logger filter could stop the record
    (`Logger.handle` applies the logger's own filters; `callHandlers` walks the handlers of
    the logger and its ancestors while they propagate); else None."""
    if logger.filters or logger.disabled:
        return None
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None:
                return None
            found = handler
        current = current.parent if current.propagate else None
    if type(found) is JsonHandler and level >= found.level and found.as_made():
        return found
    return None


class RequestIdFilter(logging.Filter):
    """Put the current request id (from the contextvar) on every record, and the invocation id
    when one is set."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id_var.get()
        if getattr(record, "invocation_id", None) is None:
            invocation_id = invocation_id_var.get()
            if invocation_id is not None:
                record.invocation_id = invocation_id
        return True


@contextmanager
def about_invocation(invocation_id: str, request_id: str | None = None) -> Iterator[None]:
    """Within the block every log line carries `invocation_id`, and `request_id`: that of the
    request which accepted the call (None when unknown), not the surrounding one's."""
    token = invocation_id_var.set(invocation_id)
    request_token = request_id_var.set(request_id)
    try:
        yield
    finally:
        request_id_var.reset(request_token)
        invocation_id_var.reset(token)


class RedactingFilter(logging.Filter):
    """Scrub the message, the `extra` fields and the traceback of every record in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not lose the line
            message = str(record.msg)
        record.args = None
        fields = vars(record)
        # The `extra` fields: the attributes a plain LogRecord does not have (a set difference,
        # not a loop over every attribute); replacing a value keeps the fields' order.
        record.msg = _redacted(message, fields, fields.keys() - _STANDARD)
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


def _redacted(message: str, fields: dict[str, Any], names: Iterable[str]) -> str:
    """`message` scrubbed, and the fields of `fields` named by `names` scrubbed in place.

    The message and the fields' text are checked at once: when nothing in them all could be
    scrubbed (`suspect`), no part of them can be, and they are kept as they are; else each is
    scrubbed. Values of other types go through `_scrub_value` one by one."""
    texts = [message]
    named: list[str] = []
    kinds = _name_kinds
    for name in names:
        how = kinds.get(name)
        if how is None:
            how = _name_kind(name)
        if how == _PRIVATE_NAME:
            continue
        value = fields[name]
        kind = type(value)
        if kind is str:
            if how == _PLAIN_NAME:
                texts.append(value)
                named.append(name)
                continue
        elif kind in _PLAIN and (value is None or how == _PLAIN_NAME):
            continue  # kept as it is, as `_scrub_value` would keep it
        fields[name] = _scrub_value(name, value)
    if suspect("\n".join(texts)):
        message = scrub(message)
        for name in named:
            fields[name] = scrub(fields[name])
    return message


_second: tuple[int, str] = (-1, "")  # the last second `timestamp` formatted, and its text
_MILLIS = tuple(f".{ms:03d}+00:00" for ms in range(1000))  # each millisecond's tail, made once


def timestamp(created: float) -> str:
    """`datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`, rounded as
    `fromtimestamp` rounds (to the microsecond, half to even), with the date and time of each
    second formatted once (lines come many a second)."""
    global _second
    fraction, whole = math.modf(created)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    if micros < 0 or not 0 <= whole < 253402300800:  # before 1970 or after 9999: the long way
        return dt.datetime.fromtimestamp(created, tz=dt.UTC).isoformat(timespec="milliseconds")
    second = int(whole)
    cached = _second
    if cached[0] != second:
        text = dt.datetime.fromtimestamp(second, tz=dt.UTC).isoformat(timespec="seconds")
        cached = _second = (second, text.removesuffix("+00:00"))
    return cached[1] + _MILLIS[micros // 1000]


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id, then the extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields = vars(record)
        line: dict[str, Any] = {
            "ts": timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": fields.get("request_id"),
        }
        # The `extra` fields in the order they were set (the comprehension passes over the
        # standard attributes at C speed; most of a record's attributes are those).
        for name in [name for name in fields if name not in _STANDARD]:
            if not name.startswith("_") and name not in line:
                line[name] = fields[name]
        if record.exc_text:
            line["exc"] = record.exc_text
        elif record.exc_info and record.exc_info[0] is not None:
            line["exc"] = scrub("".join(traceback.format_exception(*record.exc_info)))
        if record.stack_info:
            line["stack"] = record.stack_info
        return orjson.dumps(line, default=str).decode()


class JsonHandler(logging.StreamHandler[IO[str]]):
    """A stream handler emitting redacted JSON lines: `RequestIdFilter`, `RedactingFilter`,
    `JsonFormatter`. `log_fields` hands it its lines' fields directly (`write_fields`) while
    its filters and formatter are the ones it was made with (`as_made`)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__(stream or sys.stderr)
        self.addFilter(RequestIdFilter())
        self.addFilter(RedactingFilter())
        self.setFormatter(JsonFormatter())
        self._made = (list(self.filters), self.formatter)

    def as_made(self) -> bool:
        """Whether its filters and formatter are still the ones it was made with."""
        filters, formatter = self._made
        return self.formatter is formatter and self.filters == filters

    def write_fields(self, name: str, level: int, msg: str, fields: dict[str, Any]) -> None:
        """Write the line `handle` writes for the record `log_fields` would make of `msg` and
        `fields` (none of which names a LogRecord attribute, `_STANDARD`), at the logger
        `name`: the filters' work (the request and invocation ids, redaction), then the
        formatter's, on a dict of the fields instead of a record."""
        created = time.time()
        extra = fields
        if fields.get("invocation_id") is None:  # RequestIdFilter
            invocation_id = invocation_id_var.get()
            if invocation_id is not None:
                extra = dict(fields)
                extra["invocation_id"] = invocation_id
        message = str(msg)
        line: dict[str, Any] = {  # JsonFormatter
            "ts": timestamp(created),
            "level": logging.getLevelName(level),
            "logger": name,
            "msg": message,
            "request_id": request_id_var.get(),
        }
        # RedactingFilter's `_redacted` and the formatter's walk of the fields in one pass (a
        # field the line already has is redacted by the filter but not written; decision
        # 0471): every text that could hold a secret is checked at once, and only when that
        # check finds one are the message and the written texts scrubbed one by one.
        texts = [message]
        named: list[str] = []
        kinds = _name_kinds
        for key, value in extra.items():
            how = kinds.get(key)
            if how is None:
                how = _name_kind(key)
            if how == _PRIVATE_NAME:
                continue
            kind = type(value)
            if kind is str and how == _PLAIN_NAME:
                texts.append(value)
                if key not in line:
                    line[key] = value
                    named.append(key)
                continue
            if kind not in _PLAIN or (value is not None and how != _PLAIN_NAME):
                value = _scrub_value(key, value)
            if key not in line:
                line[key] = value
        if suspect("\n".join(texts)):
            line["msg"] = scrub(message)
            for key in named:
                line[key] = scrub(line[key])
        lock = self.lock  # Handler.acquire and release, inline
        if lock:
            lock.acquire()
        try:
            stream = self.stream
            stream.write(orjson.dumps(line, default=str).decode() + self.terminator)
            if stream and hasattr(stream, "flush"):  # StreamHandler.flush, under this lock
                stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(logging.LogRecord(name, level, "(unknown file)", 0, msg, (), None))
        finally:
            if lock:
                lock.release()


def json_handler(stream: IO[str] | None = None) -> logging.Handler:
    """A stream handler emitting redacted JSON lines (stderr by default)."""
    return JsonHandler(stream)


def configure_logging(level: int | str = logging.INFO, stream: IO[str] | None = None) -> None:
    """Route every logger (uvicorn's too) through one redacting JSON handler on the root."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(json_handler(stream))
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    # Their request lines add nothing to ours; headers are never logged at these levels.
    for name in ("httpx", "httpcore", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
