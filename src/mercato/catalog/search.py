"""Catalog search: which public listings a query matches, and cursors bound to that query.

A query is split into words; a listing matches when every word is a substring of its service
code, display name or description. Matching runs in the database with LIKE, the user's `%`, `_`
and escape character taken literally, and folds only ASCII letters, so SQLite and PostgreSQL
return the same rows (decision 0230).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, or_
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import String

from mercato.catalog.errors import InvalidCursor, InvalidSearch, InvalidServiceCode
from mercato.catalog.models import Listing
from mercato.core.cursors import decode_cursor, encode_cursor

__all__ = ["SEARCH_MAX_CHARS", "cursor_after", "match_clause", "next_cursor", "search_terms"]

SEARCH_MAX_CHARS = 200
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_FOLD = str.maketrans(_UPPER, _UPPER.lower())


class ascii_lower(FunctionElement[str]):
    """`x` with A-Z folded to a-z and every other character unchanged, on both stores."""

    type = String()
    inherit_cache = True


@compiles(ascii_lower)
def _ascii_lower_sqlite(element: ascii_lower, compiler: Any, **kw: Any) -> str:
    return f"lower({compiler.process(element.clauses, **kw)})"  # SQLite's lower() is ASCII-only


@compiles(ascii_lower, "postgresql")
def _ascii_lower_postgresql(element: ascii_lower, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"translate({column}, '{_UPPER}', '{_UPPER.lower()}')"


def search_terms(q: str) -> list[str]:
    """The words of a search, ASCII letters in lower case; no words means no filter."""
    if len(q) > SEARCH_MAX_CHARS:
        raise InvalidSearch(f"q must be at most {SEARCH_MAX_CHARS} characters.")
    return q.translate(_ASCII_FOLD).split()


def match_clause(terms: list[str]) -> Any:
    """Listings whose code, name or description contains every term."""
    fields = (Listing.service_code, Listing.display_name, Listing.description)
    return and_(
        *(or_(*(ascii_lower(f).contains(term, autoescape=True) for f in fields)) for term in terms)
    )


def _digest(terms: list[str]) -> str:
    return hashlib.sha256(" ".join(terms).encode()).hexdigest()[:16]


def next_cursor(service_code: str, terms: list[str]) -> str:
    """The cursor after `service_code`, valid only for the same search terms."""
    return encode_cursor(f"{service_code} {_digest(terms)}" if terms else service_code)


def cursor_after(
    cursor: str | None, terms: list[str], *, check_code: Callable[[str], str]
) -> str | None:
    """The service code a cursor starts after (None: the first page), if it was given out for
    these terms."""
    if not cursor:
        return None
    key = decode_cursor(cursor)
    if key is not None:
        code, _, digest = key.partition(" ")
        if digest == (_digest(terms) if terms else ""):
            with contextlib.suppress(InvalidServiceCode):
                return check_code(code)
    raise InvalidCursor("The cursor is not one this API gave out for this search.")
