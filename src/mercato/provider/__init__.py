"""Mercato provider SDK: turn a Python function into a conforming provider (docs/provider-guide.md).

app = create_provider_app(handler, credential="…", store="var/provider.db")
serve_provider(app, port=8080)
"""

from mercato.provider.app import create_provider_app
from mercato.provider.blobs import BlobStore, LocalBlobStore
from mercato.provider.outcomes import Artifact, DefinedFailure, DefinedFailureError, Success
from mercato.provider.recovery import RecoveryReport, recover_accepted
from mercato.provider.runner import serve_provider
from mercato.provider.store import (
    IdempotencyStore,
    SqlIdempotencyStore,
    StoredRecord,
    StoreUnavailable,
)

__all__ = [
    "Artifact",
    "BlobStore",
    "DefinedFailure",
    "DefinedFailureError",
    "IdempotencyStore",
    "LocalBlobStore",
    "RecoveryReport",
    "SqlIdempotencyStore",
    "StoreUnavailable",
    "StoredRecord",
    "Success",
    "create_provider_app",
    "recover_accepted",
    "serve_provider",
]
