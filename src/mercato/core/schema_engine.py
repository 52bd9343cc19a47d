"""JSON Schema checks that cannot hold an event loop (DESIGN.md §3, §7; decision 0515).

A contract's schemas are a provider's input and a body or result is a stranger's input: neither
may decide how long a serve process is busy. The engine is `jsonschema` with four keywords
replaced and every keyword counted, through `jsonschema.validators.extend` (no fork, no private
names):

- `pattern`, `patternProperties` and `additionalProperties` (which reads `patternProperties`)
  match with RE2 (`google-re2`), in time linear in the string. JSON Schema patterns are
  ECMA-262; RE2's `\\d`, `\\w` and `\\b` are ASCII as there (Python's are Unicode).
  `pattern_problems` finds, by JSON pointer, the patterns RE2 refuses (at submission).
- `uniqueItems` hashes each item's canonical form: linear, where `jsonschema` compares pairs.
- every keyword, before it runs, counts against a budget of CPU time (`TooComplex` when spent),
  so `$ref` chains, `anyOf`/`oneOf` fan-out and long arrays stop at the deadline however they
  nest.

`judge` answers on the event loop only when the schema's proof (`schema_proof`, decision 0435)
vouches for the instance, which is linear and cheap. Anything else is judged in one of a few
child processes (`schema_child`), never in the serve process: a thread would share its GIL,
and garbage collection or a C call that never checks in can hold that for hundreds of ms.
Python's own engine, kept for a version published before patterns had to be RE2 (DESIGN.md
§7), and for a schema with `unevaluatedProperties` beside `patternProperties` (`jsonschema`
matches those with `re` in a helper no keyword replaces), runs there too: the child's CPU timer
ends it when a regular expression overruns, and the parent starts another.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
import re2
from jsonschema import ValidationError, validators

from mercato.core.schema_proof import Check, fast_valid

MAX_SCHEMA_ERRORS = 20
# RE2 refuses a pattern whose compiled program would take more memory than this, and a program
# bigger than `MAX_PROGRAM_SIZE` instructions: with either, even linear time is too slow.
MAX_PATTERN_MEMORY = 1 << 20
MAX_PROGRAM_SIZE = 4000
_TICKS_PER_CLOCK_READ = 32


class TooComplex(Exception):
    """The instance could not be judged within the deadline."""


class PatternRefused(Exception):
    """A schema's pattern is not one RE2 compiles (within the limits)."""


# --- RE2 patterns ------------------------------------------------------------------------


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_PATTERN_MEMORY
    return options


_RE2_OPTIONS = _options()


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    try:
        compiled = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as error:
        raise PatternRefused(_why(error)) from None
    except (TypeError, ValueError) as error:
        raise PatternRefused(str(error)) from None
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise PatternRefused(
            f"compiles to {compiled.programsize} RE2 instructions; at most {MAX_PROGRAM_SIZE}"
        )
    return compiled


def _why(error: Exception) -> str:
    detail = error.args[0] if error.args else error
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return str(detail)


def pattern_refusal(pattern: str) -> str | None:
    """Why RE2 refuses `pattern` (None when it compiles within the limits)."""
    try:
        _compiled(pattern)
    except PatternRefused as refused:
        return str(refused)
    return None


def _search(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


# Keywords whose values are subschemas in draft 2020-12 (and the older spellings).
_ONE_SCHEMA = (
    "additionalItems",
    "additionalProperties",
    "contains",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAPS = ("$defs", "definitions", "dependentSchemas", "properties", "patternProperties")


def _pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def pattern_problems(schema: Any, at: tuple[Any, ...] = ()) -> list[dict[str, str]]:
    """Every `pattern` and `patternProperties` key of `schema` RE2 refuses, by JSON pointer
    (each prefixed with `at`)."""
    found: list[dict[str, str]] = []
    todo: list[tuple[Any, tuple[Any, ...]]] = [(schema, at)]
    while todo:
        node, path = todo.pop()
        if not isinstance(node, dict):
            continue
        pattern = node.get("pattern")
        if isinstance(pattern, str) and (why := pattern_refusal(pattern)) is not None:
            found.append({"pointer": _pointer((*path, "pattern")), "detail": _detail(why)})
        patterns = node.get("patternProperties")
        if isinstance(patterns, dict):
            for key in patterns:
                if (why := pattern_refusal(key)) is not None:
                    pointer = _pointer((*path, "patternProperties", key))
                    found.append({"pointer": pointer, "detail": _detail(why)})
        for keyword in _ONE_SCHEMA:
            if isinstance(node.get(keyword), dict):
                todo.append((node[keyword], (*path, keyword)))
        for keyword in _SCHEMA_LISTS:
            if isinstance(node.get(keyword), list):
                todo.extend((sub, (*path, keyword, i)) for i, sub in enumerate(node[keyword]))
        for keyword in _SCHEMA_MAPS:
            if isinstance(node.get(keyword), dict):
                todo.extend((sub, (*path, keyword, k)) for k, sub in node[keyword].items())
    return sorted(found, key=lambda e: e["pointer"])


def _detail(why: str) -> str:
    return f"not an RE2 pattern (patterns must run in linear time): {why}"[:300]


# --- the budget --------------------------------------------------------------------------


class _Budget(threading.local):
    deadline = math.inf  # in `time.thread_time()` seconds; inf: no budget (not judging)
    ticks = 0


_budget = _Budget()


def _tick() -> None:
    budget = _budget
    budget.ticks += 1
    if budget.ticks % _TICKS_PER_CLOCK_READ == 0 and time.thread_time() > budget.deadline:
        raise TooComplex


# --- the keywords ------------------------------------------------------------------------

Keyword = Callable[[Any, Any, Any, Any], Any]


def _counted(function: Keyword) -> Keyword:
    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _tick()
        return function(validator, value, instance, schema)

    return keyword


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
    _tick()
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    _tick()
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            _tick()
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    found = []
    for key in instance:
        _tick()
        if key in properties:
            continue
        if any(_search(pattern, key) for pattern in patterns):
            continue
        found.append(key)
    return found


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    _tick()
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        names = sorted(extras, key=str)
        if "patternProperties" in schema:
            verb = "does" if len(names) == 1 else "do"
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            joined = ", ".join(repr(each) for each in names)
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(names) == 1 else "were"
            joined = ", ".join(repr(each) for each in names)
            yield ValidationError(
                f"Additional properties are not allowed ({joined} {verb} unexpected)"
            )


_NAN = object()


def _key(value: Any) -> Any:
    """A hashable form equal for exactly the values `jsonschema` finds equal (booleans are not
    numbers, 1 equals 1.0, objects ignore member order)."""
    _tick()
    kind = type(value)
    if kind is bool:
        return (0, value)
    if kind is int or kind is float:
        return (1, _NAN if value != value else value)  # NaN equals nothing, not even NaN
    if kind is str:
        return (2, value)
    if value is None:
        return (3,)
    if kind is list:
        return (4, tuple(_key(item) for item in value))
    if kind is dict:
        return (5, frozenset((name, _key(item)) for name, item in value.items()))
    return (6, kind.__name__, repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    _tick()
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _key(item)
        if key in seen:
            yield ValidationError(f"{_short(instance)} has non-unique elements")
            return
        seen.add(key)


def _short(instance: Any) -> str:
    text = repr(instance)  # an error's detail keeps its first 300 characters
    return text if len(text) <= 300 else text[:300] + "..."


_REPLACED: dict[str, Keyword] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


@lru_cache(maxsize=16)
def _engine_class(base: Any) -> Any:
    counted = {name: _counted(function) for name, function in base.VALIDATORS.items()}
    replaced = {name: f for name, f in _REPLACED.items() if name in base.VALIDATORS}
    return validators.extend(base, validators={**counted, **replaced})


# --- compiled schemas --------------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """A schema ready to judge: its proof of validity (or None), the engine's validator, and
    whether it must run in the child process (`schema_legacy`)."""

    schema_json: bytes
    proof: Check | None
    validator: Any
    in_child: bool


def _mentions(node: Any, names: set[str]) -> set[str]:
    found: set[str] = set()
    todo = [node]
    while todo and found != names:
        item = todo.pop()
        if isinstance(item, dict):
            found.update(name for name in names if name in item)
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return found


@lru_cache(maxsize=512)
def compile_schema(schema_json: bytes) -> Compiled:
    """The schema (JSON bytes, members sorted) compiled once per process."""
    schema = orjson.loads(schema_json)
    base = validators.validator_for(schema)
    proof = fast_valid(base(schema))
    risky = {"unevaluatedProperties", "patternProperties"}
    in_child = _mentions(schema, risky) == risky or any(
        pattern_refusal(p) is not None for p in _patterns_anywhere(schema)
    )
    return Compiled(schema_json, proof, _engine_class(base)(schema), in_child)


def _patterns_anywhere(schema: Any) -> Iterator[str]:
    todo = [schema]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if isinstance(item.get("pattern"), str):
                yield item["pattern"]
            if isinstance(item.get("patternProperties"), dict):
                yield from (k for k in item["patternProperties"] if isinstance(k, str))
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


def schema_key(schema: Any) -> bytes:
    """The cache key of a schema: its JSON with sorted members."""
    return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)


def errors_of(validator: Any, instance: Any) -> list[dict[str, str]]:
    """JSON-pointer located violations (at most `MAX_SCHEMA_ERRORS`), sorted by pointer."""
    found = []
    for error in validator.iter_errors(instance):
        found.append({"pointer": _pointer(error.absolute_path), "detail": error.message[:300]})
        if len(found) >= MAX_SCHEMA_ERRORS:
            break
    return sorted(found, key=lambda e: e["pointer"])


def schema_errors(schema: Any, instance: Any) -> list[dict[str, str]]:
    """The engine's violations, judged in this thread with no deadline: for tools that judge
    their own data (the provider SDK's generated test, the tests), never for a stranger's."""
    compiled = compile_schema(schema_key(schema))
    if compiled.proof is not None and compiled.proof(instance):
        return []
    if compiled.in_child:  # Python's own engine, as the child runs it
        plain = orjson.loads(compiled.schema_json)
        return errors_of(validators.validator_for(plain)(plain), instance)
    return errors_of(compiled.validator, instance)


def judge_here(compiled: Compiled, instance: Any, seconds: float) -> list[dict[str, str]]:
    """Judge in this thread within `seconds` of its CPU time (`TooComplex` beyond;
    `PatternRefused` when the schema needs the child process)."""
    if compiled.in_child:
        raise PatternRefused("this schema runs on Python's engine")
    _budget.deadline = time.thread_time() + seconds
    _budget.ticks = 0
    try:
        return errors_of(compiled.validator, instance)
    except RecursionError:
        raise TooComplex from None
    finally:
        _budget.deadline = math.inf


# --- off the loop: the judging child processes -----------------------------------------

FRAME = struct.Struct(">I")
JOB = struct.Struct(">cI")  # mode (b"E": this engine, b"P": Python's), the budget in µs
_CHILDREN = max(2, min(4, os.cpu_count() or 1))
# A child that has not answered after this much wall time is killed whatever its CPU time
# (the CPU deadline is enforced in the child itself; this is for a child that hangs).
_WALL_FACTOR, _WALL_FLOOR = 20, 2.0


def write_frame(stream: Any, data: bytes) -> None:
    stream.write(FRAME.pack(len(data)) + data)
    stream.flush()


def _read_exactly(fd: int, size: int, until: float) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        left = until - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, size - len(chunks))
        if not chunk:
            raise EOFError
        chunks.extend(chunk)
    return bytes(chunks)


class _Child:
    """One judging process (`python -m mercato.core.schema_child`), used by one thread at a
    time; killed and replaced when it overruns or dies."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def _started(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is None or process.poll() is not None:
            self._kill()
            process = subprocess.Popen(
                [sys.executable, "-m", "mercato.core.schema_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            self._process = process
            assert process.stdout is not None
            try:
                ready = _read_exactly(process.stdout.fileno(), 1, time.monotonic() + 120)
            except EOFError:
                ready = None
            if ready != b"R":
                self._kill()
                raise OSError("a schema judging process did not start")
        return process

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()

    def judge(
        self, mode: bytes, schema_json: bytes, payload: bytes, seconds: float
    ) -> list[dict[str, str]]:
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        try:
            write_frame(process.stdin, JOB.pack(mode, round(seconds * 1_000_000)))
            write_frame(process.stdin, schema_json)
            write_frame(process.stdin, payload)
            until = time.monotonic() + max(_WALL_FLOOR, seconds * _WALL_FACTOR)
            fd = process.stdout.fileno()
            head = _read_exactly(fd, FRAME.size, until)
            body = None if head is None else _read_exactly(fd, FRAME.unpack(head)[0], until)
        except (OSError, EOFError):
            body = None  # it died: killed by its CPU timer (SIGPROF), or out of memory
        if body is None:
            self._kill()
            raise TooComplex
        answer = orjson.loads(body)
        if answer is None:  # its budget ran out, or its recursion overflowed
            raise TooComplex
        return list(answer)


class _Children:
    """`_CHILDREN` judging processes, each used by one thread of a pool at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._idle: queue.SimpleQueue[_Child] = queue.SimpleQueue()
        self._numbers = itertools.count(1)
        self.running: set[int] = set()  # the numbers of the judgements a child is working on

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                for _ in range(_CHILDREN):
                    self._idle.put(_Child())
                self._pool = ThreadPoolExecutor(_CHILDREN, thread_name_prefix="mercato-judge")
            return self._pool

    def judge(
        self, mode: bytes, schema_json: bytes, payload: bytes, seconds: float
    ) -> list[dict[str, str]]:
        child = self._idle.get()  # as many threads as children: one is idle for each
        number = next(self._numbers)
        with self._lock:
            self.running.add(number)
        try:
            return child.judge(mode, schema_json, payload, seconds)
        finally:
            with self._lock:
                self.running.discard(number)
            self._idle.put(child)

    def in_flight(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self.running)


_children = _Children()


def judgements_in_flight() -> frozenset[int]:
    """The numbers of the judgements the children are working on now (each number is used
    once): a judgement found both before and after some event ran throughout it."""
    return _children.in_flight()


async def judge(
    schema: Any, instance: Any, *, deadline_ms: int, raw: bytes | None = None
) -> list[dict[str, str]]:
    """`schema`'s violations by `instance` (whose JSON is `raw` when the caller has it),
    judged off the event loop within `deadline_ms` of CPU time (`TooComplex` when it cannot
    be). A schema proven cheap (decision 0435) answers "valid" here, on the loop."""
    compiled = compile_schema(schema_key(schema))
    if compiled.proof is not None and compiled.proof(instance):
        return []
    payload = orjson.dumps(instance) if raw is None else raw
    mode = b"P" if compiled.in_child else b"E"
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _children.pool(),
        _children.judge,
        mode,
        compiled.schema_json,
        payload,
        deadline_ms / 1000,
    )
