"""Quota through the invoke endpoint: N+1 distinct keys → N accepted, one 429 (spec 2.7)."""

from __future__ import annotations

from builders.invocation_world import World


def test_n_plus_one_keys_one_429_and_replays_do_not_count(world: World) -> None:
    world.set_quota(limit=3, window_seconds=60)
    accepted = [world.invoke({"n": i}, key=f"k{i}") for i in range(3)]
    assert [r.status_code for r in accepted] == [200, 200, 200]
    assert accepted[-1].headers["RateLimit"].startswith('"tight";r=0;t=')

    refused = world.invoke({"n": 9}, key="k9")
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "RATE_LIMIT_EXCEEDED"
    assert (body["policy"], body["limit"], body["windowSeconds"]) == ("tight", 3, 60)
    assert isinstance(body["message"], str) and body["message"]
    assert 1 <= body["retryAfter"] <= 60
    assert refused.headers["Retry-After"] == str(body["retryAfter"])
    assert refused.headers["RateLimit-Policy"] == '"tight";q=3;w=60'

    # Replays of accepted calls are answered, and consume nothing.
    replay = world.invoke({"n": 0}, key="k0")
    assert (replay.status_code, replay.content) == (200, accepted[0].content)
    # ... with the window as it stands in their RateLimit headers.
    assert replay.headers["RateLimit-Policy"] == '"tight";q=3;w=60'
    assert replay.headers["RateLimit"].startswith('"tight";r=0;t=')
    assert world.balances() == (70, 0)
    assert len(world.invocations()) == 3
    assert sum(world.provider.executions.values()) == 3

    status = world.get("/v1/rate-limit").json()
    assert {
        k: status[k] for k in ("policy", "limit", "windowSeconds", "accepted", "remaining")
    } == {"policy": "tight", "limit": 3, "windowSeconds": 60, "accepted": 3, "remaining": 0}
    assert status["resetAt"].endswith("Z")

    # The refused key was not consumed: in the next window it is a new call.
    world.clock.advance(60)
    assert world.invoke({"n": 9}, key="k9").status_code == 200


def test_rate_limit_default_policy(world: World) -> None:
    response = world.get("/v1/rate-limit")
    assert response.status_code == 200
    body = response.json()
    assert (body["policy"], body["limit"], body["windowSeconds"]) == ("standard", 60, 60)
    assert (body["accepted"], body["remaining"]) == (0, 60)
    assert response.headers["RateLimit-Policy"] == '"standard";q=60;w=60'
