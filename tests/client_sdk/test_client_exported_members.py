"""The client's public names are a contract: pin them, and keep the package standalone."""

from __future__ import annotations

import subprocess
import sys

import mercato.client

EXPECTED = {
    "ArtifactCorrupted",
    "ArtifactDigestMismatch",
    "ArtifactEntry",
    "ArtifactNotReady",
    "AsyncMercatoClient",
    "BadRequest",
    "Balance",
    "Conflict",
    "Contract",
    "Forbidden",
    "IdempotencyKeyInUse",
    "IdempotencyKeyReused",
    "InsufficientPoints",
    "InvocationNotSettled",
    "InvocationPending",
    "InvocationResult",
    "KeySpendLimitReached",
    "Listing",
    "ListingSummary",
    "ListingUnavailable",
    "MercatoAPIError",
    "MercatoClient",
    "MercatoClientError",
    "NotFound",
    "PaymentRequired",
    "Page",
    "ProviderBusy",
    "ProviderContractViolation",
    "ProviderDefinedFailure",
    "ProviderNotApproved",
    "ProviderUnavailable",
    "RangeNotSupported",
    "RateLimit",
    "RateLimitExceeded",
    "Receipt",
    "RequestSchemaViolation",
    "RequestTooLarge",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailable",
    "TransportFailed",
    "Unauthenticated",
    "UnexpectedResponse",
    "ValidationFailed",
    "Version",
    "VersionSummary",
}


def test_exported_members() -> None:
    assert set(mercato.client.__all__) == EXPECTED
    assert all(hasattr(mercato.client, name) for name in EXPECTED)


def test_importing_the_client_loads_no_other_mercato_package() -> None:
    code = (
        "import sys, mercato.client; "
        "print(sorted(m for m in sys.modules if m.startswith('mercato.') "
        "and not m.startswith('mercato.client')))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"
