"""Download names: `<artifactId>.<extension>`, and no artifact id can bend the header."""

from __future__ import annotations

import pytest

from mercato.web.downloads import attachment, extension_of


@pytest.mark.parametrize(
    ("media_type", "extension"),
    [
        ("image/jpeg", "jpg"),
        ("image/png", "png"),
        ("image/webp", "webp"),
        ("image/gif", "gif"),
        ("application/json", "json"),
        ("text/plain", "txt"),
        ("text/plain; charset=utf-8", "txt"),
        ("IMAGE/PNG", "png"),
        ("text/csv", "csv"),
        ("application/pdf", "pdf"),
        ("application/x-unheard-of", "bin"),
        ("application/octet-stream", "bin"),
    ],
)
def test_extension_from_the_media_type(media_type: str, extension: str) -> None:
    assert extension_of(media_type) == extension


def test_a_plain_artifact_id_is_the_file_name() -> None:
    assert attachment("thumb-1", "image/png") == 'attachment; filename="thumb-1.png"'


@pytest.mark.parametrize(
    "artifact_id",
    ['a"; filename="evil.exe', 'x\\"y', "a;b=c", "résumé", "two words", "日本", "a\u2028b"],
)
def test_an_unsafe_artifact_id_cannot_inject(artifact_id: str) -> None:
    value = attachment(artifact_id, "image/png")
    plain, _, encoded = value.partition("; filename*=UTF-8''")
    assert plain.startswith('attachment; filename="') and plain.count('"') == 2
    name = plain.removeprefix('attachment; filename="').removesuffix('"')
    assert name.endswith(".png") and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    assert encoded and all(c.isascii() and c not in ' ";\\' for c in encoded)
    value.encode("latin-1")  # a header Starlette can send
