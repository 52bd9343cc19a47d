"""`mercato admin publish`, `hold`, `release-hold` and `legacy-patterns`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from sqlalchemy.orm import Session

from mercato.catalog import service as catalog
from mercato.catalog.errors import (
    HoldNotFound,
    InvalidContract,
    InvalidExample,
    InvalidListing,
    InvalidPrice,
    InvalidServiceCode,
    InvalidVersionLabel,
    ListingNotFound,
)
from mercato.catalog.legacy_patterns import list_legacy_pattern_versions
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import WholeNumber, command, json_option
from mercato.cli.output import Naming, argument_errors, emit, table
from mercato.core.errors import MercatoError, ValidationFailed
from mercato.providers.errors import ConnectionNotFound

OPERATOR = "operator:cli"


def register(_top: click.Group, admin: click.Group) -> None:
    for handler in (cmd_publish, cmd_hold, cmd_release_hold, cmd_legacy_patterns):
        admin.add_command(handler)


CONTRACT_FILE_MAX = 1024 * 1024  # far above any contract; stops `--contract /dev/zero`


def read_contract(path: Path) -> Any:
    """Read the contract file the operator gave."""
    return _json_file(path, "contract", InvalidContract)


def read_examples(path: Path | None) -> Any:
    """Read the examples file (JSON: [{"request", "result"}]) the operator gave, if any."""
    if path is None:
        return None
    return _json_file(path, "examples", InvalidExample)


def _json_file(path: Path, what: str, error: type[MercatoError]) -> Any:
    """The JSON in the operator's `what` file, read up to `CONTRACT_FILE_MAX` bytes."""
    try:
        with path.open("rb") as file:
            raw = file.read(CONTRACT_FILE_MAX + 1)
    except OSError as exc:
        raise error(f"Cannot read the {what} file {path}: {exc.strerror}.") from exc
    if len(raw) > CONTRACT_FILE_MAX:
        raise error(f"The {what} file {path} is over {CONTRACT_FILE_MAX} bytes.")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeError) as exc:
        raise error(f"The {what} file {path} is not JSON: {exc}.") from exc


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
    if "publisher" in error.message:
        return "--publisher"
    return "--description" if "description" in error.message else "--display-name"


# Bad input names its argument (exit 2); a state the arguments do not fit (a connection not
# approved, a published version that differs, a taken code) stays a domain error (exit 1).
_PUBLISH_ERRORS: dict[type[MercatoError], Naming] = {
    InvalidContract: "--contract",
    InvalidExample: "--examples",
    ConnectionNotFound: "--connection",
    InvalidServiceCode: "--service-code",
    InvalidVersionLabel: "--version",
    InvalidPrice: "--price",
    InvalidListing: _listing_argument,
}


@command("publish", help="draft and publish a version (and its listing, if new)")
@click.option("--connection", required=True, help="an approved provider connection id")
@click.option("--service-code", required=True)
@click.option("--display-name", required=True)
@click.option("--version", required=True, help="exact label v<number>, e.g. v1")
@click.option(
    "--price", required=True, type=WholeNumber(1, catalog.MAX_PRICE), help="gross price in points"
)
@click.option(
    "--contract", required=True, type=click.Path(path_type=Path), help="contract JSON file"
)
@click.option("--description", help="listing description")
@click.option("--publisher", help="the name callers see the listing published under")
@click.option(
    "--examples",
    type=click.Path(path_type=Path),
    help='JSON file: [{"request", "result"}], each matching the contract',
)
@click.option(
    "--provider-share-bps",
    type=WholeNumber(0, 10_000),
    help="provider's share in basis points "
    f"(new listings: {catalog.DEFAULT_PROVIDER_SHARE_BPS}; existing ones keep theirs)",
)
@json_option()
def cmd_publish(
    connection: str,
    service_code: str,
    display_name: str,
    version: str,
    price: int,
    contract: Path,
    description: str | None,
    publisher: str | None,
    examples: Path | None,
    provider_share_bps: int | None,
    as_json: bool,
) -> int:
    with argument_errors(_PUBLISH_ERRORS):
        document = read_contract(contract)
        example_list = read_examples(examples)
    runtime = runtime_from_env()
    with argument_errors(_PUBLISH_ERRORS), runtime.db.transaction() as session:
        result = catalog.publish(
            session,
            service_code=service_code,
            display_name=display_name,
            version=version,
            connection=connection_facts(session, connection_id=connection),
            price=price,
            contract=document,
            description=description,
            provider_share_bps=provider_share_bps,
            examples=example_list,
            publisher_name=publisher,
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
    emit(data, as_json=as_json, text=text)
    return 0


@command("hold", help="take a listing out of the catalog")
@click.argument("service_code", metavar="SERVICE_CODE")
@click.option("--reason", required=True)
@json_option()
def cmd_hold(service_code: str, reason: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    errors = argument_errors({ListingNotFound: "SERVICE_CODE", ValidationFailed: "--reason"})
    with errors, runtime.db.transaction() as session:
        hold_id = catalog.place_hold(
            session,
            service_code=service_code,
            kind="staff",
            reason=reason,
            created_by=OPERATOR,
            now=runtime.clock.now(),
        )
    emit({"holdId": hold_id}, as_json=as_json, text=f"placed hold {hold_id}")
    return 0


@command("release-hold", help="release one hold on a listing")
@click.argument("hold_id", metavar="HOLD_ID")
@json_option()
def cmd_release_hold(hold_id: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    with argument_errors({HoldNotFound: "HOLD_ID"}), runtime.db.transaction() as session:
        catalog.release_hold(
            session, hold_id=hold_id, released_by=OPERATOR, now=runtime.clock.now()
        )
    emit({"holdId": hold_id}, as_json=as_json, text=f"released hold {hold_id}")
    return 0


@command("legacy-patterns", help="list versions whose contract has a pattern RE2 refuses")
@json_option()
def cmd_legacy_patterns(as_json: bool) -> int:
    """Versions accepted before patterns had to be RE2: they keep Python's engine, run off the
    loop under the validation deadline (decision 0516)."""
    runtime = runtime_from_env()
    try:
        with runtime.db.read() as session:
            items = list_legacy_pattern_versions(session)
    finally:
        runtime.db.dispose()
    if as_json:
        emit({"items": [v.to_json() for v in items]}, as_json=True)
        return 0
    table(
        ("VERSION", "SERVICE", "LABEL", "STATE", "PATTERNS"),
        ((v.version_id, v.service_code, v.version, v.state, " ".join(v.pointers)) for v in items),
        empty="no version has a pattern RE2 refuses",
    )
    return 0
