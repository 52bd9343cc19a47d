"""`mercato admin publish`, `hold` and `release-hold`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from mercato.catalog import service as catalog
from mercato.catalog.errors import (
    HoldNotFound,
    InvalidContract,
    InvalidListing,
    InvalidPrice,
    InvalidServiceCode,
    InvalidVersionLabel,
    ListingNotFound,
)
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import Naming, argument_errors, emit, whole_number
from mercato.core.errors import MercatoError, ValidationFailed
from mercato.providers.errors import ConnectionNotFound

OPERATOR = "operator:cli"


def register(_top: Any, admin: Any) -> None:
    publish = admin.add_parser(
        "publish", help="create the listing if needed, then draft and publish a version"
    )
    publish.add_argument("--connection", required=True, help="an approved provider connection id")
    publish.add_argument("--service-code", required=True)
    publish.add_argument("--display-name", required=True)
    publish.add_argument("--version", required=True, help="exact label v<number>, e.g. v1")
    publish.add_argument(
        "--price",
        required=True,
        type=whole_number(1, catalog.MAX_PRICE),
        help="gross price in points",
    )
    publish.add_argument("--contract", required=True, type=Path, help="contract JSON file")
    publish.add_argument("--description", help="listing description")
    publish.add_argument(
        "--provider-share-bps",
        type=whole_number(0, 10_000),
        help="provider's share in basis points "
        f"(new listings: {catalog.DEFAULT_PROVIDER_SHARE_BPS}; existing ones keep theirs)",
    )
    publish.add_argument("--json", action="store_true")
    publish.set_defaults(handler=cmd_publish)

    hold = admin.add_parser("hold", help="take a listing out of the catalog")
    hold.add_argument("service_code", metavar="SERVICE_CODE")
    hold.add_argument("--reason", required=True)
    hold.add_argument("--json", action="store_true")
    hold.set_defaults(handler=cmd_hold)

    release = admin.add_parser("release-hold", help="release one hold on a listing")
    release.add_argument("hold_id", metavar="HOLD_ID")
    release.add_argument("--json", action="store_true")
    release.set_defaults(handler=cmd_release_hold)


CONTRACT_FILE_MAX = 1024 * 1024  # far above any contract; stops `--contract /dev/zero`


def read_contract(path: Path) -> Any:
    """Read the contract file the operator gave."""
    try:
        with path.open("rb") as file:
            raw = file.read(CONTRACT_FILE_MAX + 1)
    except OSError as exc:
        raise InvalidContract(f"Cannot read the contract file {path}: {exc.strerror}.") from exc
    if len(raw) > CONTRACT_FILE_MAX:
        raise InvalidContract(f"The contract file {path} is over {CONTRACT_FILE_MAX} bytes.")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeError) as exc:
        raise InvalidContract(f"The contract file {path} is not JSON: {exc}.") from exc


def connection_facts(session: Session, *, connection_id: str) -> catalog.ConnectionFacts:
    """Read what the catalog needs about a connection from the providers domain."""
    # Imported here: the catalog may not import its sibling, so the edge brings the facts.
    from mercato.providers import service as providers

    connection = providers.get_connection(session, connection_id=connection_id)
    return catalog.ConnectionFacts(
        connection_id=connection.id,
        owner_id=connection.owner_id,
        approved=providers.is_approved(session, connection_id=connection.id),
    )


def _listing_argument(error: MercatoError) -> str:
    return "--description" if "description" in error.message else "--display-name"


# Bad input names its argument (exit 2); a state the arguments do not fit (a connection not
# approved, a published version that differs, a taken code) stays a domain error (exit 1).
_PUBLISH_ERRORS: dict[type[MercatoError], Naming] = {
    InvalidContract: "--contract",
    ConnectionNotFound: "--connection",
    InvalidServiceCode: "--service-code",
    InvalidVersionLabel: "--version",
    InvalidPrice: "--price",
    InvalidListing: _listing_argument,
}


def cmd_publish(args: argparse.Namespace) -> int:
    with argument_errors(_PUBLISH_ERRORS):
        contract = read_contract(args.contract)
    runtime = runtime_from_env()
    with argument_errors(_PUBLISH_ERRORS), runtime.db.transaction() as session:
        result = catalog.publish(
            session,
            service_code=args.service_code,
            display_name=args.display_name,
            version=args.version,
            connection=connection_facts(session, connection_id=args.connection),
            price=args.price,
            contract=contract,
            description=args.description,
            provider_share_bps=args.provider_share_bps,
            now=runtime.clock.now(),
        )
        data = {
            "serviceCode": result.listing.service_code,
            "version": result.version.label,
            "contractDigest": result.version.contract_digest,
            "versionId": result.version.id,
        }
    verb = "published" if result.created else "already published (unchanged)"
    text = f"{verb} {data['serviceCode']} {data['version']} contract {data['contractDigest']}"
    emit(data, as_json=args.json, text=text)
    return 0


def cmd_hold(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    errors = argument_errors({ListingNotFound: "SERVICE_CODE", ValidationFailed: "--reason"})
    with errors, runtime.db.transaction() as session:
        hold_id = catalog.place_hold(
            session,
            service_code=args.service_code,
            kind="staff",
            reason=args.reason,
            created_by=OPERATOR,
            now=runtime.clock.now(),
        )
    emit({"holdId": hold_id}, as_json=args.json, text=f"placed hold {hold_id}")
    return 0


def cmd_release_hold(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with argument_errors({HoldNotFound: "HOLD_ID"}), runtime.db.transaction() as session:
        catalog.release_hold(
            session, hold_id=args.hold_id, released_by=OPERATOR, now=runtime.clock.now()
        )
    emit({"holdId": args.hold_id}, as_json=args.json, text=f"released hold {args.hold_id}")
    return 0
