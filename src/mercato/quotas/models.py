"""Quota tables: per-account policy overrides and one fixed-window counter per account+policy."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime


class QuotaOverride(Base):
    """An account's own policy; accounts without one use the default from settings."""

    __tablename__ = "quota_overrides"

    account_id: Mapped[str] = mapped_column(String(40), ForeignKey("accounts.id"), primary_key=True)
    policy: Mapped[str] = mapped_column(String(64))
    limit: Mapped[int] = mapped_column("limit_count", Integer)
    window_seconds: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class QuotaWindow(Base):
    """Calls accepted in the current fixed window (`window_start` .. + window length)."""

    __tablename__ = "quota_windows"

    account_id: Mapped[str] = mapped_column(String(40), ForeignKey("accounts.id"), primary_key=True)
    policy: Mapped[str] = mapped_column(String(64), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger)  # epoch seconds
    accepted: Mapped[int] = mapped_column(Integer)
