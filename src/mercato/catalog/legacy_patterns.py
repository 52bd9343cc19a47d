"""Versions whose contract has a pattern RE2 refuses (DESIGN.md §7, decision 0516).

Such a version was accepted before patterns had to be RE2: it keeps Python's engine, run in
the validation child process under the deadline (`core.schema_engine`), and staff see it here
(`mercato admin legacy-patterns`). The check is the one submission applies, so the list is
exactly the versions submission would refuse today.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mercato.catalog.contract_schema import SCHEMA_MEMBERS
from mercato.catalog.models import Listing, Version
from mercato.core.schema_engine import pattern_problems


@dataclass(frozen=True, slots=True)
class LegacyPatternVersion:
    """One version and the pointers of its patterns RE2 refuses."""

    version_id: str
    service_code: str
    version: str
    state: str
    pointers: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "versionId": self.version_id,
            "serviceCode": self.service_code,
            "version": self.version,
            "state": self.state,
            "pointers": list(self.pointers),
        }


def refused_pointers(contract: Any) -> tuple[str, ...]:
    """The JSON pointers of the contract's patterns RE2 refuses."""
    if not isinstance(contract, dict):
        return ()
    found = [
        e["pointer"]
        for name in SCHEMA_MEMBERS
        for e in pattern_problems(contract.get(name), (name,))
    ]
    return tuple(found)


def list_legacy_pattern_versions(session: Session) -> list[LegacyPatternVersion]:
    """Every version (any state) whose contract has a pattern RE2 refuses, by service and
    number."""
    rows = session.execute(
        select(Version.id, Listing.service_code, Version.label, Version.state, Version.contract)
        .join(Listing, Listing.id == Version.listing_id)
        .order_by(Listing.service_code, Version.number)
    )
    found = []
    for version_id, service_code, label, state, contract in rows:
        pointers = refused_pointers(contract)
        if pointers:
            found.append(LegacyPatternVersion(version_id, service_code, label, state, pointers))
    return found
