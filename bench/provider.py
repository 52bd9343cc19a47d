"""The benchmark's provider: a minimal SDK provider with an echo handler, run as its own process.

    python -m bench.provider --port P --store URL

The credential comes from BENCH_PROVIDER_CREDENTIAL. A payload without a `job` member is
meaningless (a defined failure), which is what the conformance check expects of a provider.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from mercato.provider import DefinedFailure, Success, create_provider_app, serve_provider


def handler(payload: dict[str, Any]) -> Success | DefinedFailure:
    if "job" not in payload:
        return DefinedFailure("MEANINGLESS_PAYLOAD", 400)
    return Success({"echo": payload})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    args = parser.parse_args()
    app = create_provider_app(
        handler, credential=os.environ["BENCH_PROVIDER_CREDENTIAL"], store=args.store
    )
    serve_provider(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
