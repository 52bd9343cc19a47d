"""`python -m mercato.web.export > docs/openapi.json` (also `mercato openapi`): print the
OpenAPI document of an app built on a throwaway dev runtime (no database is opened)."""

from __future__ import annotations

import sys

from mercato.db.runtime import Runtime
from mercato.settings import Settings
from mercato.web.app import create_app
from mercato.web.openapi import document_bytes


def main() -> int:
    settings = Settings(env="dev", database_url="sqlite://")
    app = create_app(Runtime.from_settings(settings))
    sys.stdout.buffer.write(document_bytes(app))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
