"""The complete provider in docs/provider-guide.md runs and answers as the guide says."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.testclient import TestClient

GUIDE = Path(__file__).parents[3] / "docs" / "provider-guide.md"


def test_the_guide_provider_works(tmp_path, monkeypatch):
    source = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)[0]
    assert len(source.splitlines()) <= 25
    monkeypatch.setenv("WORD_COUNT_CREDENTIAL", "guide-credential")
    monkeypatch.setenv("WORD_COUNT_STORE", str(tmp_path / "wc.db"))
    namespace: dict[str, object] = {"__name__": "word_count"}
    exec(compile(source, "word_count.py", "exec"), namespace)
    headers = {"Authorization": "Bearer guide-credential", "Idempotency-Key": "k1"}
    with TestClient(namespace["app"]) as client:
        ok = client.post("/v1/executions", json={"payload": {"text": "a b c"}}, headers=headers)
        junk = client.post(
            "/v1/executions",
            json={"payload": {"probe": 1}},
            headers={**headers, "Idempotency-Key": "k2"},
        )
    assert ok.json()["result"] == {"words": 3}
    assert junk.status_code == 400
    assert junk.json()["errorCode"] == "TEXT_REQUIRED"
