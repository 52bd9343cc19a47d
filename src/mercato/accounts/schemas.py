"""Values the accounts domain hands to the edges."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

Channel = Literal["API_KEY", "SESSION"]


@dataclass(frozen=True)
class Principal:
    """Who is calling and through which channel."""

    account_id: str
    channel: Channel
    is_staff: bool
    key_id: str | None
    family_id: str | None = None


@dataclass(frozen=True)
class IssuedTokens:
    """A fresh access/refresh pair of one session family; plaintext, shown once."""

    access_token: str
    refresh_token: str
    expires_in: int
    family_id: str


@dataclass(frozen=True)
class RefreshRefused:
    """Why a refresh token was not accepted: unknown, expired, revoked or reused."""

    reason: Literal["unknown", "expired", "revoked", "reused"]


@dataclass(frozen=True)
class CreatedApiKey:
    """A new API key; `api_key` is the plaintext and exists only in this value."""

    api_key: str
    key_id: str
    name: str
    created_at: dt.datetime


@dataclass(frozen=True)
class LoginSubjects:
    """The login throttle's keys for one attempt: keyed digests, never a readable value.

    `pair` starts with the email's digest, so an email's pairs can be found without knowing
    the addresses they were sent from.
    """

    email: str
    address: str
    pair: str
