"""The files `mercato provider init DIR` writes: a working provider project on the SDK.

The handler is the `plain-json` contract template's service (text in; the text and its length
out); the test checks the contract, the example requests and the handler's results (schemas and
sizes) with the platform's own contract check and schema engine (decisions 0517, 0555), then
starts the app on a loopback socket and runs `mercato provider check` against it.
"""

from __future__ import annotations

import json

from mercato.catalog.examples import template_contract

PROVIDER_PY = '''\
"""A Mercato provider: answers {"text"} with the text and its length.

Run it:   PROVIDER_CREDENTIAL=... python provider.py      (port from PORT, default 8080)
"""

from __future__ import annotations

import os
from typing import Any

from starlette.types import ASGIApp

from mercato.provider import DefinedFailure, Success, create_provider_app, serve_provider


def handle(payload: dict[str, Any]) -> Success | DefinedFailure:
    """The business logic: a payload the contract does not describe is a defined failure."""
    text = payload.get("text")
    if not isinstance(text, str) or not text:
        return DefinedFailure("INVALID_PAYLOAD", 400)  # nothing was done: the caller pays nothing
    return Success({"text": text, "length": len(text)})


def build_app(*, credential: str, store: str) -> ASGIApp:
    """The provider app: the SDK serves the four endpoints and keeps idempotency records."""
    return create_provider_app(
        handle, credential=credential, store=store, handler_idempotent=True
    )


if __name__ == "__main__":
    app = build_app(
        credential=os.environ["PROVIDER_CREDENTIAL"],
        store=os.environ.get("PROVIDER_STORE", "var/provider.db"),
    )
    port = int(os.environ.get("PORT", "8080"))
    serve_provider(app, host=os.environ.get("HOST", "0.0.0.0"), port=port)
'''

TEST_PY = '''\
"""This provider as the platform will see it: pytest test_provider.py

First what contract.json promises, judged as the platform judges it: the contract is checked as
submission checks it; each example request must keep the request schema and requestMaxBytes;
each result the handler gives must keep the result schema, and the answer that carries it
responseMaxBytes (the platform refuses a call's answer otherwise: PROVIDER_CONTRACT_VIOLATION,
and the caller pays nothing). Schemas are judged by the platform's own engine (RE2 patterns, as
the platform runs them). Then the nine conformance checks run against the service; they send
their own requests, so only the tests above catch a handler that drifts from contract.json.
These tests use the `mercato` platform package (its `mercato` command and its checks), not only
the provider SDK.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from mercato.catalog.contract_schema import contract_errors
from mercato.core.schema_engine import schema_errors
from mercato.protocol.envelope import Envelope, Outcome
from mercato.provider import Success
from provider import build_app, handle

CREDENTIAL = "test-credential-0123456789abcdef"
CONTRACT = json.loads((Path(__file__).parent / "contract.json").read_text(encoding="utf-8"))
# Requests the service must accept: add your own.
EXAMPLES: list[dict[str, Any]] = [{"text": "hello"}, {"text": "\u00e9" * 1000}]


def wire_bytes(document: dict[str, Any]) -> int:
    """The size of a JSON document as sent: compact UTF-8, as the SDK writes it."""
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8"))


def test_the_contract_is_one_the_platform_accepts() -> None:
    assert contract_errors(CONTRACT) == []


@pytest.mark.parametrize("payload", EXAMPLES)
def test_each_example_request_keeps_the_request_schema_and_size(payload: dict[str, Any]) -> None:
    assert schema_errors(CONTRACT["requestSchema"], payload) == []
    assert wire_bytes(payload) <= CONTRACT["requestMaxBytes"], "over requestMaxBytes"


@pytest.mark.parametrize("payload", EXAMPLES)
def test_each_result_keeps_the_result_schema_and_size(payload: dict[str, Any]) -> None:
    answer = handle(payload)
    assert isinstance(answer, Success), answer
    result = answer.result_json()
    assert schema_errors(CONTRACT["resultSchema"], result) == []
    # The answer the SDK sends around the result, with the longest correlation id it makes.
    sent = Envelope(Outcome.SUCCEEDED, "job-" + "0" * 32, result=result).to_json()
    assert wire_bytes(sent) <= CONTRACT["responseMaxBytes"], "the answer is over responseMaxBytes"


def test_the_nine_conformance_checks_pass(tmp_path: Path) -> None:
    app = build_app(credential=CREDENTIAL, store=str(tmp_path / "provider.db"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # connections wait in the backlog until the server accepts them
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        command = [sys.executable, "-m", "mercato", "provider", "check", url]
        done = subprocess.run(
            [*command, "--credential", CREDENTIAL, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        report = json.loads(done.stdout)
        failed = [c for c in report["checks"] if c["status"] != "passed"]
        assert done.returncode == 0 and report["passed"], failed
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()
'''

README_MD = """\
# My Mercato provider

- `provider.py`: the service, on the `mercato.provider` SDK.
- `contract.json`: what the service promises; `mercato provider push` sends it for review.
- `test_provider.py`: checks the contract, the example requests and the handler's results
  (schemas and sizes) with the platform's own checks, then runs the platform's nine
  conformance checks against the service.

    pytest test_provider.py
    PROVIDER_CREDENTIAL=... python provider.py
    mercato provider check http://127.0.0.1:8080 --credential ...

See docs/provider-guide.md of Mercato for the whole way to a published listing.
"""


def project_files() -> dict[str, str]:
    """File name → content of a new provider project."""
    contract = template_contract("plain-json")
    return {
        "provider.py": PROVIDER_PY,
        "contract.json": json.dumps(contract, indent=2) + "\n",
        "test_provider.py": TEST_PY,
        "README.md": README_MD,
    }
