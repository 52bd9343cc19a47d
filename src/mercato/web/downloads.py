"""The name an artifact download is saved under: `<artifactId>.<extension>` (decision 0232)."""

from __future__ import annotations

import mimetypes
import re
from urllib.parse import quote

__all__ = ["attachment", "extension_of"]

_EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/webp": "webp",
    "image/gif": "gif",
    "application/json": "json",
    "text/plain": "txt",
}
# Python's built-in table only: the host's /etc/mime.types must not change a file's name.
_TYPES = mimetypes.MimeTypes()
_EXTENSION = re.compile(r"[a-z0-9]{1,10}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def extension_of(media_type: str) -> str:
    """The file extension for a media type (parameters ignored); `bin` when none is known."""
    essence = media_type.split(";", 1)[0].strip().lower()
    if essence in _EXTENSIONS:
        return _EXTENSIONS[essence]
    guessed = (_TYPES.guess_extension(essence) or "").removeprefix(".")
    return guessed if _EXTENSION.fullmatch(guessed) else "bin"


def attachment(artifact_id: str, media_type: str) -> str:
    """A `Content-Disposition` value that saves the artifact as `<artifactId>.<extension>`.

    `filename` holds only letters, digits, `.`, `_` and `-` (anything else becomes `_`), so no
    artifact id can end the quoted string or add a parameter; when that changed the name, the
    exact name follows percent-encoded in `filename*` (RFC 6266, RFC 8187)."""
    name = f"{artifact_id}.{extension_of(media_type)}"
    plain = _UNSAFE.sub("_", name)
    value = f'attachment; filename="{plain}"'
    if plain != name:
        value += f"; filename*=UTF-8''{quote(name, safe='')}"
    return value
