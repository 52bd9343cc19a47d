"""The validation child process (`python -m mercato.core.schema_legacy`, decision 0515).

It judges, with plain `jsonschema` and Python's `re`, the schemas the thread engine of
`schema_engine` cannot stop: a version published before the RE2 rule keeps the engine it was
accepted with (DESIGN.md §7). The parent kills it at the deadline and starts another.

Frames on stdin and stdout are a 4-byte big-endian length and that many bytes: a schema (JSON)
and an instance (JSON) in; out, the JSON list of violations (at most `MAX_SCHEMA_ERRORS`), or
`null` when the recursion overflowed. It writes `R` once when ready.
"""

from __future__ import annotations

import struct
import sys
from functools import lru_cache
from typing import Any, BinaryIO

import orjson
from jsonschema import validators

from mercato.core.schema_engine import errors_of

_FRAME = struct.Struct(">I")


@lru_cache(maxsize=64)
def _validator(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    return validators.validator_for(schema)(schema)


def _read(stream: BinaryIO) -> bytes | None:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    return stream.read(_FRAME.unpack(head)[0])


def main() -> None:
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sink.write(b"R")
    sink.flush()
    while True:
        schema_json = _read(source)
        payload = None if schema_json is None else _read(source)
        if schema_json is None or payload is None:
            return
        try:
            answer: Any = errors_of(_validator(schema_json), orjson.loads(payload))
        except RecursionError:
            answer = None
        data = orjson.dumps(answer)
        sink.write(_FRAME.pack(len(data)) + data)
        sink.flush()


if __name__ == "__main__":
    main()
