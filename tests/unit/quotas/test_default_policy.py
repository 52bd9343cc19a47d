"""`default_policy` is the settings' policy, made once per settings' values (decision 0476)."""

from __future__ import annotations

from mercato.quotas.schemas import Policy
from mercato.quotas.service import default_policy
from mercato.settings import Settings


def test_the_default_policy_follows_the_settings_values() -> None:
    one = Settings(env="dev", default_quota_policy="p1", default_quota_limit=5)
    same = Settings(env="dev", default_quota_policy="p1", default_quota_limit=5)
    other = Settings(env="dev", default_quota_policy="p1", default_quota_limit=6)
    window = one.default_quota_window_seconds
    assert default_policy(one) == Policy(name="p1", limit=5, window_seconds=window)
    assert default_policy(same) is default_policy(one)  # a value, made once
    assert default_policy(other) == Policy(name="p1", limit=6, window_seconds=window)
    assert type(default_policy(other).limit) is int
