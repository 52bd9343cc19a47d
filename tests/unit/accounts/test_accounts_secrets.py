"""API keys and refresh tokens: format, entropy, digests; access token signatures."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re

import pytest

from mercato.accounts import service
from mercato.accounts.errors import InvalidPassword
from mercato.core.errors import Unauthenticated
from mercato.settings import Settings

KEY_RE = re.compile(r"^mercato_live_[0-9A-Za-z]{43}$")


def test_api_key_has_the_documented_form() -> None:
    key = service.generate_secret(service.API_KEY_PREFIX)
    assert KEY_RE.match(key)


def test_random_part_carries_at_least_190_bits() -> None:
    assert len(service.BASE62) == 62 and len(set(service.BASE62)) == 62
    assert service.RANDOM_LENGTH * math.log2(len(service.BASE62)) >= 190


def test_keys_do_not_repeat_and_use_the_whole_alphabet() -> None:
    keys = {service.generate_secret(service.API_KEY_PREFIX) for _ in range(2000)}
    assert len(keys) == 2000
    seen = set("".join(k.removeprefix(service.API_KEY_PREFIX) for k in keys))
    # 86 000 draws from 62 symbols: every symbol shows up unless the generator is broken.
    assert seen == set(service.BASE62)


def test_digest_is_sha256_hex_of_the_plaintext() -> None:
    key = service.generate_secret(service.API_KEY_PREFIX)
    digest = service.token_digest(key)
    assert digest == hashlib.sha256(key.encode()).hexdigest()
    assert key not in digest and len(digest) == 64


def test_refresh_tokens_have_their_own_prefix() -> None:
    token = service.generate_secret(service.REFRESH_TOKEN_PREFIX)
    assert re.match(r"^mercato_rt_[0-9A-Za-z]{43}$", token)


def test_unknown_email_and_wrong_password_are_both_false() -> None:
    stored = service.hash_password("a good password")
    assert stored.startswith("$argon2id$")
    assert service.verify_password(stored, "a good password")
    assert not service.verify_password(stored, "a bad password")
    assert not service.verify_password(None, "a good password")
    assert not service.verify_password("not-a-hash", "a good password")


def test_short_passwords_are_refused() -> None:
    with pytest.raises(InvalidPassword):
        service.hash_password("short")


def test_email_is_normalised() -> None:
    assert service.normalize_email("  Alice@Example.COM ") == "alice@example.com"


def test_access_token_signature_covers_every_part() -> None:
    settings = Settings(env="dev")
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    token = service.issue_access_token(
        account_id="acct_1",
        family_id="sfam_1",
        expires_at=now + dt.timedelta(minutes=5),
        settings=settings,
    )
    assert token.startswith("mercato_at_acct_1.sfam_1.")
    tampered = token.replace("acct_1", "acct_2", 1)
    with pytest.raises(Unauthenticated):
        # The signature check fails before any database access.
        service.resolve_access_token(None, token=tampered, settings=settings, now=now)  # type: ignore[arg-type]
    other = Settings(env="dev", secret_key="another-secret-key-of-enough-length-123")
    with pytest.raises(Unauthenticated):
        service.resolve_access_token(None, token=token, settings=other, now=now)  # type: ignore[arg-type]
    with pytest.raises(Unauthenticated):
        service.resolve_access_token(
            None,  # type: ignore[arg-type]
            token=token,
            settings=settings,
            now=now + dt.timedelta(minutes=5),
        )


def test_new_hashes_take_the_configured_memory_and_logins_move_old_ones_to_it() -> None:
    cheap = Settings(env="dev", password_hash_memory_kib=64)
    full = service.hash_password("a good password")
    small = service.hash_password("a good password", settings=cheap)
    assert "$m=65536," in full and "$m=64," in small
    # A stored hash is verified with its own parameters, whatever new hashes get.
    assert service.verify_password(full, "a good password", settings=cheap)
    assert service.verify_password(small, "a good password")
    assert not service.verify_password(small, "a bad password", settings=cheap)
    assert not service.verify_password(None, "a good password", settings=cheap)
    moved = service.rehash_if_needed(full, "a good password", settings=cheap)
    assert moved is not None and "$m=64," in moved
    assert service.rehash_if_needed(small, "a good password", settings=cheap) is None
    restored = service.rehash_if_needed(small, "a good password")
    assert restored is not None and "$m=65536," in restored
