"""A schema judging process (`python -m mercato.core.schema_child`, decision 0515).

The serve and worker processes never walk a schema on their event loop: whatever the proof of
`schema_proof` cannot vouch for is judged here, where it can hold nothing but this process.
Each job has a CPU budget. The engine (`schema_engine`, mode `E`) stops itself when it is spent;
Python's own engine (mode `P`, for a version published before patterns had to be RE2, DESIGN.md
§7) cannot be stopped inside a regular expression, so a CPU timer whose signal (SIGPROF) ends
the process is armed for every job: it fires at 1.5 times the budget plus 50 ms of CPU time.
The parent then answers `TooComplex` and starts another.

Frames on stdin and stdout are a 4-byte big-endian length and that many bytes. In: the job
(mode and budget in µs), the schema (JSON), the instance (JSON). Out: the JSON list of
violations, or `null` when the budget ran out, the recursion overflowed or the memory (2 GiB of
address space) ran out. `R` once when ready.
"""

from __future__ import annotations

import resource
import signal
import sys
from functools import lru_cache
from typing import Any, BinaryIO

import orjson
from jsonschema import validators

from mercato.core.schema_engine import (
    FRAME,
    JOB,
    PatternRefused,
    TooComplex,
    compile_schema,
    errors_of,
    judge_here,
    write_frame,
)


@lru_cache(maxsize=64)
def _plain(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    return validators.validator_for(schema)(schema)


def _read(stream: BinaryIO) -> bytes | None:
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    body = stream.read(FRAME.unpack(head)[0])
    return body if len(body) == FRAME.unpack(head)[0] else None


def _judge(mode: bytes, schema_json: bytes, instance: Any, seconds: float) -> Any:
    try:
        if mode == b"P":
            return errors_of(_plain(schema_json), instance)
        try:
            return judge_here(compile_schema(schema_json), instance, seconds)
        except PatternRefused:  # RE2 refuses a pattern: Python's engine, under the timer
            return errors_of(_plain(schema_json), instance)
    except (TooComplex, RecursionError, MemoryError):
        return None


# What one judgement may allocate: an error tree grown by fan-out is cut off here (a
# MemoryError is "too complex") rather than by the machine's OOM killer.
MAX_ADDRESS_SPACE = 2 << 30


def main() -> None:
    signal.signal(signal.SIGPROF, signal.SIG_DFL)  # its default action ends the process
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > MAX_ADDRESS_SPACE:
        resource.setrlimit(resource.RLIMIT_AS, (MAX_ADDRESS_SPACE, hard))
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sink.write(b"R")
    sink.flush()
    while True:
        job = _read(source)
        schema_json = None if job is None else _read(source)
        payload = None if schema_json is None else _read(source)
        if job is None or schema_json is None or payload is None:
            return  # the parent closed the pipe
        mode, micros = JOB.unpack(job)
        seconds = micros / 1_000_000
        signal.setitimer(signal.ITIMER_PROF, seconds * 1.5 + 0.05)
        answer = _judge(mode, schema_json, orjson.loads(payload), seconds)
        signal.setitimer(signal.ITIMER_PROF, 0)
        write_frame(sink, orjson.dumps(answer))


if __name__ == "__main__":
    main()
