"""The Argon2 pool's size and the sign-up limits (decisions 0525, 0527, 0528) are read from
their MERCATO_ variables, derived when unset, and refused when out of range."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mercato.settings import Settings


def test_the_hash_pool_is_derived_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 1 <= Settings(env="dev").password_hash_slots <= 4
    monkeypatch.setenv("MERCATO_PASSWORD_HASH_CONCURRENCY", "7")
    assert Settings(env="dev").password_hash_slots == 7


def test_sign_up_limits_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = Settings(env="dev")
    assert defaults.signup_per_address_per_hour == 3
    assert defaults.signup_daily_cap == 0  # no grant, no budget
    monkeypatch.setenv("MERCATO_SIGNUP_POINTS", "100")
    assert Settings(env="dev").signup_daily_cap == 10_000  # 100 x the grant
    monkeypatch.setenv("MERCATO_SIGNUP_POINTS_DAILY_CAP", "250")
    monkeypatch.setenv("MERCATO_SIGNUP_PER_ADDRESS_PER_HOUR", "10")
    configured = Settings(env="dev")
    assert (configured.signup_daily_cap, configured.signup_per_address_per_hour) == (250, 10)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MERCATO_PASSWORD_HASH_CONCURRENCY", "-1"),
        ("MERCATO_SIGNUP_PER_ADDRESS_PER_HOUR", "0"),
        ("MERCATO_SIGNUP_POINTS_DAILY_CAP", "-5"),
    ],
)
def test_out_of_range_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name.removeprefix("MERCATO_").lower()):
        Settings(env="dev")
