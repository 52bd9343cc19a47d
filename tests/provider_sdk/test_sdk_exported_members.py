"""The SDK's public surface is deliberate: adding or removing a name must change this test."""

import mercato.provider

EXPECTED = {
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
}


def test_all_is_exactly_the_public_surface() -> None:
    assert set(mercato.provider.__all__) == EXPECTED
    assert len(mercato.provider.__all__) == len(EXPECTED)


def test_every_exported_name_exists_and_is_documented() -> None:
    for name in mercato.provider.__all__:
        member = getattr(mercato.provider, name)
        assert member.__doc__, f"{name} has no docstring"


def test_public_members_are_exported() -> None:
    public = {
        name
        for name in dir(mercato.provider)
        if not name.startswith("_") and name not in {"annotations"}
    }
    submodules = {"app", "blobs", "outcomes", "recovery", "runner", "store"}
    assert public - submodules == EXPECTED
