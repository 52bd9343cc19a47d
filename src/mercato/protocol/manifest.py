"""Limits of an artifact manifest (spec 2.9, DESIGN §7) that the platform enforces on a result.

They live with the wire contract so that the catalog can refuse, at publish time, a contract
whose declared limits the platform would contradict (decision 0205), and the artifacts domain
can enforce the same numbers when a call settles.
"""

from __future__ import annotations

# The smallest manifest entry the platform accepts, in compact JSON with its separator:
# {"artifactId":"a","digest":"<64 hex>","mediaType":"a/b","size":0},
MIN_MANIFEST_ENTRY_BYTES = 122
# More entries than the spec's 256 KiB response limit can carry (262144 // 122 = 2148), so no
# version with that limit can send a manifest the platform refuses for its length.
MAX_MANIFEST_ENTRIES = 4096
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024
MAX_ARTIFACT_ID_CHARS = 128
MANIFEST_MEMBER = "artifacts"
DIGEST_ALGORITHM = "sha256"


def entries_within(response_max_bytes: int) -> int:
    """The most manifest entries a response of `response_max_bytes` bytes can carry."""
    return max(0, response_max_bytes) // MIN_MANIFEST_ENTRY_BYTES
