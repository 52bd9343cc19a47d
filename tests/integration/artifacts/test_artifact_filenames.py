"""Downloads are named `<artifactId>.<extension>`; an artifact id cannot bend the header."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, make_account, make_api_key
from builders.artifacts import FakeFetcher, entry, fake_target, make_invocation
from mercato.artifacts import flows
from mercato.db.runtime import Runtime
from mercato.web.app import create_app

ARTIFACTS = [
    ("photo", "image/jpeg", 'attachment; filename="photo.jpg"'),
    ("thumb", "image/png", 'attachment; filename="thumb.png"'),
    ("still", "image/webp", 'attachment; filename="still.webp"'),
    ("loop", "image/gif", 'attachment; filename="loop.gif"'),
    ("data", "application/json", 'attachment; filename="data.json"'),
    ("notes", "text/plain; charset=utf-8", 'attachment; filename="notes.txt"'),
    ("blob", "application/x-unheard-of", 'attachment; filename="blob.bin"'),
    (
        'x"; filename="evil.exe',
        "image/png",
        'attachment; filename="x___filename__evil.exe.png"; '
        "filename*=UTF-8''x%22%3B%20filename%3D%22evil.exe.png",
    ),
    (
        "résumé\\1",
        "text/plain",
        "attachment; filename=\"r_sum__1.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9%5C1.txt",
    ),
]


@pytest.fixture
def downloads(runtime: Runtime) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    account_id = make_account(runtime.db)
    fetcher = FakeFetcher()
    manifest = []
    for index, (artifact_id, media_type, _) in enumerate(ARTIFACTS):
        data = f"artifact {index}".encode()
        fetcher.serve(data)
        manifest.append(entry(data, artifact_id, media_type))
    call = make_invocation(runtime, account_id=account_id, manifest=manifest)
    assert flows.ingest_once(runtime, fetcher, resolve_target=fake_target) == len(ARTIFACTS)
    key, _ = make_api_key(runtime.db, account_id)
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        yield client, bearer(key), call


@pytest.mark.parametrize(("artifact_id", "media_type", "disposition"), ARTIFACTS)
def test_the_download_is_named_from_id_and_media_type(
    downloads: tuple[TestClient, dict[str, str], str],
    artifact_id: str,
    media_type: str,
    disposition: str,
) -> None:
    client, auth, call = downloads
    path = f"/v1/invocations/{call}/artifacts/{quote(artifact_id, safe='')}"
    response = client.get(path, headers=auth)
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == disposition
    assert response.headers["content-type"] == media_type
    assert len(response.headers.get_list("content-disposition")) == 1
