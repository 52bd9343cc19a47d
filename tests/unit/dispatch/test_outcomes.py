"""Every row of the outcome table (spec 3.1, DESIGN.md §3): what counts as which outcome."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest

from mercato.dispatch.outcomes import classify
from mercato.protocol import Outcome

S = Outcome.SUCCEEDED
D = Outcome.DEFINED_FAILURE
R = Outcome.RETRYABLE_BEFORE_ACCEPT
U = Outcome.UNKNOWN_OUTCOME


@dataclass(frozen=True)
class Answer:
    status: int | None
    body: bytes | None
    error: str | None = None
    elapsed_ms: float = 1.0


def env(**members: object) -> bytes:
    return orjson.dumps(members)


OK = env(outcome="SUCCEEDED", correlationId="c1", result={"x": 1})
FAIL_400 = env(outcome="DEFINED_FAILURE", correlationId="c1", errorCode="BAD", httpStatus=400)
RETRY = env(outcome="RETRYABLE_BEFORE_ACCEPT", correlationId="c1")
UNKNOWN = env(outcome="UNKNOWN_OUTCOME", correlationId="c1")

ROWS: list[tuple[str, Answer, Outcome]] = [
    # valid pairs
    ("succeeded 200", Answer(200, OK), S),
    ("succeeded 201", Answer(201, OK), S),
    ("succeeded 299", Answer(299, OK), S),
    ("succeeded 202 (any 2xx)", Answer(202, OK), S),
    (
        "succeeded with matching httpStatus",
        Answer(200, env(outcome="SUCCEEDED", correlationId="c", result={}, httpStatus=200)),
        S,
    ),
    ("defined failure 400", Answer(400, FAIL_400), D),
    *[
        (
            f"defined failure {code}",
            Answer(
                code,
                env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E", httpStatus=code),
            ),
            D,
        )
        for code in (404, 409, 422, 500, 502, 503, 504)
    ],
    (
        "defined failure errorCode 64 chars",
        Answer(
            400,
            env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E" * 64, httpStatus=400),
        ),
        D,
    ),
    ("retryable 503", Answer(503, RETRY), R),
    (
        "retryable 503 with httpStatus",
        Answer(503, env(outcome="RETRYABLE_BEFORE_ACCEPT", correlationId="c", httpStatus=503)),
        R,
    ),
    ("unknown 202", Answer(202, UNKNOWN), U),
    # transport failures
    ("timeout", Answer(None, None, "timeout"), U),
    ("connect error", Answer(None, None, "connect"), U),
    ("read error / dropped connection", Answer(None, None, "read"), U),
    ("too large", Answer(200, None, "too_large"), U),
    ("redirect error", Answer(302, None, "redirect"), U),
    ("blocked address", Answer(None, None, "blocked_address"), U),
    ("no status no error", Answer(None, OK), U),
    ("no body", Answer(200, None), U),
    # redirects are never followed
    *[(f"redirect {code}", Answer(code, OK), U) for code in (301, 302, 303, 307, 308)],
    # malformed bodies
    ("malformed json", Answer(200, b"{not json"), U),
    ("truncated json", Answer(200, OK[:-5]), U),
    ("empty body", Answer(200, b""), U),
    ("not utf-8", Answer(200, b"\xff\xfe{}"), U),
    ("json array", Answer(200, b"[]"), U),
    ("json string", Answer(200, b'"SUCCEEDED"'), U),
    ("json null", Answer(200, b"null"), U),
    # status/outcome mismatch
    ("succeeded with 400", Answer(400, OK), U),
    ("succeeded with 503", Answer(503, OK), U),
    (
        "succeeded httpStatus differs",
        Answer(200, env(outcome="SUCCEEDED", correlationId="c", result={}, httpStatus=201)),
        U,
    ),
    (
        "defined failure with 200",
        Answer(
            200, env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E", httpStatus=200)
        ),
        U,
    ),
    (
        "defined failure httpStatus differs",
        Answer(
            400, env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E", httpStatus=404)
        ),
        U,
    ),
    (
        "defined failure with 202",
        Answer(
            202, env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E", httpStatus=202)
        ),
        U,
    ),
    ("retryable with 500", Answer(500, RETRY), U),
    ("retryable with 200", Answer(200, RETRY), U),
    (
        "retryable httpStatus differs",
        Answer(503, env(outcome="RETRYABLE_BEFORE_ACCEPT", correlationId="c", httpStatus=500)),
        U,
    ),
    ("unknown with 200", Answer(200, UNKNOWN), U),
    ("unknown with 500", Answer(500, UNKNOWN), U),
    # envelope members
    ("unknown outcome name", Answer(200, env(outcome="DONE", correlationId="c", result={})), U),
    ("lowercase outcome", Answer(200, env(outcome="succeeded", correlationId="c", result={})), U),
    ("outcome not a string", Answer(200, env(outcome=["SUCCEEDED"], correlationId="c")), U),
    (
        "extra member",
        Answer(200, env(outcome="SUCCEEDED", correlationId="c", result={}, extra=1)),
        U,
    ),
    ("missing outcome", Answer(200, env(correlationId="c", result={})), U),
    ("missing correlationId", Answer(200, env(outcome="SUCCEEDED", result={})), U),
    ("empty correlationId", Answer(200, env(outcome="SUCCEEDED", correlationId="", result={})), U),
    ("succeeded without result", Answer(200, env(outcome="SUCCEEDED", correlationId="c")), U),
    (
        "succeeded result not object",
        Answer(200, env(outcome="SUCCEEDED", correlationId="c", result=[1])),
        U,
    ),
    (
        "defined failure without errorCode",
        Answer(400, env(outcome="DEFINED_FAILURE", correlationId="c", httpStatus=400)),
        U,
    ),
    (
        "defined failure without httpStatus",
        Answer(400, env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E")),
        U,
    ),
    (
        "defined failure errorCode 65 chars",
        Answer(
            400,
            env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E" * 65, httpStatus=400),
        ),
        U,
    ),
    (
        "defined failure empty errorCode",
        Answer(
            400, env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="", httpStatus=400)
        ),
        U,
    ),
    (
        "defined failure with result",
        Answer(
            400,
            env(
                outcome="DEFINED_FAILURE",
                correlationId="c",
                errorCode="E",
                httpStatus=400,
                result={},
            ),
        ),
        U,
    ),
    (
        "errorCode on success",
        Answer(200, env(outcome="SUCCEEDED", correlationId="c", result={}, errorCode="E")),
        U,
    ),
    (
        "httpStatus as string",
        Answer(
            400, env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="E", httpStatus="400")
        ),
        U,
    ),
    (
        "httpStatus as bool",
        Answer(200, env(outcome="SUCCEEDED", correlationId="c", result={}, httpStatus=True)),
        U,
    ),
    (
        "result on retryable",
        Answer(503, env(outcome="RETRYABLE_BEFORE_ACCEPT", correlationId="c", result={})),
        U,
    ),
]


@pytest.mark.parametrize(
    ("answer", "expected"), [(a, e) for _, a, e in ROWS], ids=[name for name, _, _ in ROWS]
)
def test_classify_row(answer: Answer, expected: Outcome) -> None:
    classified = classify(answer)
    assert classified.outcome is expected
    if expected is not U or classified.reason == "provider_unknown":
        assert classified.envelope is not None
        assert classified.envelope.outcome is expected
    else:
        assert classified.envelope is None


def test_defined_failure_carries_error_code_and_status() -> None:
    classified = classify(
        Answer(
            404, env(outcome="DEFINED_FAILURE", correlationId="c", errorCode="NOPE", httpStatus=404)
        )
    )
    assert classified.envelope is not None
    assert (classified.envelope.error_code, classified.envelope.http_status) == ("NOPE", 404)
    assert classified.definite


def test_success_carries_result() -> None:
    classified = classify(Answer(200, OK))
    assert classified.envelope is not None and classified.envelope.result == {"x": 1}
    assert classified.definite
    assert not classify(Answer(503, RETRY)).definite
