"""Account tables: accounts, API keys, session families, refresh tokens, login attempts,
sign-ups."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Boolean, CheckConstraint, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime

SPEND_LIMIT_RULE = (
    "(spend_limit_points IS NULL AND spend_limit_period IS NULL) OR "
    "(spend_limit_points IS NOT NULL AND spend_limit_points >= 0 "
    "AND spend_limit_period IS NOT NULL AND (spend_limit_period = 'DAY' "
    "OR spend_limit_period = 'WEEK' OR spend_limit_period = 'MONTH' "
    "OR spend_limit_period = 'TOTAL'))"
)
"""The CHECK of a key's spend limit (comparisons, not `IN`: decision 0493)."""


class Account(Base):
    __tablename__ = "accounts"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(200))
    is_staff: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class ApiKey(Base):
    """A long-lived caller credential; only the SHA-256 digest of its plaintext is kept."""

    __tablename__ = "api_keys"
    __table_args__ = (
        # A limit is whole: points and period together, or neither (migration 0021).
        CheckConstraint(SPEND_LIMIT_RULE, name="spend_limit"),
        CheckConstraint("spent_in_period >= 0", name="spent_in_period"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # The key's spend limit (DESIGN §8, decision 0590) and the use of its current period:
    # the points of the calls counted since `spend_period_start`. Only the accept and release
    # programs (`mercato.invocations.spend`) and a limit change write the use.
    spend_limit_points: Mapped[int | None] = mapped_column(BigInteger)
    spend_limit_period: Mapped[str | None] = mapped_column(String(5))
    spend_period_start: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    spent_in_period: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class SessionFamily(Base):
    """One login: every access and refresh token it issues lives and dies with it."""

    __tablename__ = "session_families"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    revoked_reason: Mapped[str | None] = mapped_column(String(20))


class RefreshToken(Base):
    """One refresh token of a family; spent on its first use (rotation)."""

    __tablename__ = "refresh_tokens"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    family_id: Mapped[str] = mapped_column(ForeignKey("session_families.id"), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    issued_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    spent_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class LoginAttempt(Base):
    """A failed login, counted per subject (email or client address) inside a window."""

    __tablename__ = "login_attempts"
    __table_args__ = (Index("ix_login_attempts_subject_attempted_at", "subject", "attempted_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    subject: Mapped[str] = mapped_column(String(64))
    attempted_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class Signup(Base):
    """An account made on the sign-up page: counted per client address for the sign-up
    throttle, and by the points it was granted for the daily grant cap (decisions 0527, 0528).
    Kept for the current UTC day and the last hour only."""

    __tablename__ = "signups"
    __table_args__ = (
        Index("ix_signups_subject_created_at", "subject", "created_at"),
        Index("ix_signups_created_at", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    subject: Mapped[str] = mapped_column(String(64))  # a keyed digest of the client address
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    points: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
