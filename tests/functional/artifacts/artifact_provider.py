"""A minimal provider artifact endpoint for tests: `GET /v1/artifacts/{digest}` with a credential.

Usage: python artifact_provider.py <objects-dir> <log-file>; env ARTIFACT_CREDENTIAL.
Serves `<objects-dir>/<digest>` verbatim (whatever bytes the test put there), appends one line
per request to the log (`<status> <path> <credential-ok>`) and prints its port when listening.
"""

from __future__ import annotations

import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

OBJECTS = Path(sys.argv[1])
LOG = Path(sys.argv[2])
CREDENTIAL = os.environ["ARTIFACT_CREDENTIAL"]
PREFIX = "/v1/artifacts/"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        authorized = self.headers.get("Authorization") == f"Bearer {CREDENTIAL}"
        name = self.path[len(PREFIX) :] if self.path.startswith(PREFIX) else ""
        path = OBJECTS / name
        if not authorized:
            status, body = 401, b""
        elif not name or "/" in name or not path.is_file():
            status, body = 404, b""
        else:
            status, body = 200, path.read_bytes()
        with LOG.open("a") as log:
            log.write(f"{status} {self.path} {authorized}\n")
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        return


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
