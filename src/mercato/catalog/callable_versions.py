"""The versions a caller may invoke now, in service-code order (the MCP tool list, DESIGN §12)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, false, or_, select, tuple_
from sqlalchemy.sql import ColumnElement

from mercato.catalog.holds import active_hold_exists
from mercato.catalog.models import PUBLISHED, Listing, Version
from mercato.db.plans import Plan, Rows, query
from mercato.providers.models import ProviderConnection

_versions, _listings = Version.__table__.c, Listing.__table__.c
_connections = ProviderConnection.__table__.c


@dataclass(frozen=True, slots=True)
class CallableVersion:
    """One published version of a listing that is not held, on an approved connection."""

    service_code: str
    number: int
    version: str
    display_name: str
    description: str
    price: int
    contract: dict[str, Any]
    contract_digest: str


_BASE = (
    select(
        _listings.service_code,
        _versions.number,
        _versions.label,
        _versions.display_name,
        _listings.description,
        _versions.price,
        _versions.contract,
        _versions.contract_digest,
    )
    .select_from(
        Listing.__table__.join(Version.__table__, _versions.listing_id == _listings.id).join(
            ProviderConnection.__table__, _connections.id == _versions.connection_id
        )
    )
    .where(
        _versions.state == PUBLISHED,
        ~active_hold_exists(),
        _connections.approved_revision == _connections.revision,
    )
    .order_by(_listings.service_code, _versions.number)
)


@query
def callable_versions(
    *,
    limit: int,
    after: tuple[str, int] | None = None,
    exact: frozenset[tuple[str, int]] | None = None,
    code_prefixes: frozenset[str] = frozenset(),
) -> Plan[tuple[list[CallableVersion], bool]]:
    """Up to `limit` callable versions after `after` (service code, number), and whether more
    follow. With `exact` (or `code_prefixes`), only those (service code, number) pairs (or
    the versions of listings whose service code starts with one of the prefixes)."""
    statement = _BASE
    params: dict[str, Any] = {"limit": limit + 1}
    if after is not None:
        statement = statement.where(
            tuple_(_listings.service_code, _versions.number)
            > tuple_(bindparam("after_code"), bindparam("after_number"))
        )
        params.update(after_code=after[0], after_number=after[1])
    if exact is not None or code_prefixes:
        narrowing: list[ColumnElement[bool]] = []
        for i, (code, number) in enumerate(sorted(exact or ())):
            narrowing.append(
                and_(
                    _listings.service_code == bindparam(f"code_{i}"),
                    _versions.number == bindparam(f"number_{i}"),
                )
            )
            params.update({f"code_{i}": code, f"number_{i}": number})
        for i, prefix in enumerate(sorted(code_prefixes)):
            # A literal prefix: LIKE's own wildcards cannot occur in a service code.
            narrowing.append(_listings.service_code.startswith(bindparam(f"prefix_{i}")))
            params[f"prefix_{i}"] = prefix
        statement = statement.where(or_(*narrowing) if narrowing else and_(false()))
    rows = yield Rows(statement.limit(bindparam("limit")), params)
    found = [
        CallableVersion(
            service_code=row[0],
            number=int(row[1]),
            version=row[2],
            display_name=row[3],
            description=row[4],
            price=int(row[5]),
            contract=dict(row[6]),
            contract_digest=row[7],
        )
        for row in rows[:limit]
    ]
    return found, len(rows) > limit
