"""Provider connections: create, change (which lapses approval), approve, record check runs.

Services never commit; the edge owns the transaction. The credential is Fernet-encrypted with a
key derived from the secret key for this one purpose, and is only ever decrypted into a
`DispatchTarget` for the outbound client.
"""

from __future__ import annotations

import datetime as dt
import hmac
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session

from mercato.core.ids import new_id
from mercato.db.plans import Plan, Rows, first, query
from mercato.providers.addresses import HOST_SPELLING, check_base_url
from mercato.providers.errors import (
    ConformanceNotPassed,
    ConnectionNameTaken,
    ConnectionNotFound,
    CredentialUnreadable,
    InvalidConnection,
    ProviderAddressForbidden,
)
from mercato.providers.models import (
    ConformanceResult,
    ConformanceRun,
    ProviderConnection,
    revision_approved,
)
from mercato.providers.schemas import CheckVerdict, DispatchTarget, RunView
from mercato.settings import Settings

__all__ = [
    "DISPATCH_TARGET_WIDTH",
    "CheckVerdict",
    "DispatchTarget",
    "RunView",
    "approve_connection",
    "create_connection",
    "dispatch_target_of",
    "get_connection",
    "get_dispatch_target",
    "is_approved",
    "latest_run",
    "list_runs",
    "locked_revision",
    "record_run",
    "run_revision",
    "set_max_in_flight",
    "update_connection",
    "with_dispatch_target",
]

CHECK_COUNT = 9
NAME_MAX = 100
BASE_URL_MAX = 2048
CREDENTIAL_MAX = 1024
BASE_URL_FIELD = "baseUrl"  # the member a problem document names (`field`), as the API spells it


def _fernet(settings: Settings) -> Fernet:
    return Fernet(settings.fernet_key("provider-credential"))


def _encrypt(settings: Settings, credential: str) -> str:
    return _fernet(settings).encrypt(credential.encode("ascii")).decode("ascii")


def _decrypt(settings: Settings, ciphertext: str) -> str:
    return _decrypted(settings.fernet_key("provider-credential"), ciphertext)


@lru_cache(maxsize=256)
def _decrypted(key: bytes, ciphertext: str) -> str:
    """Every invoke decrypts its connection's credential: the same (key, ciphertext) always
    gives the same plaintext, so the process keeps the last few (in memory only, as the one
    being sent is anyway). A new key or a rotated credential is a new entry; an unreadable
    token raises and is not kept."""
    try:
        return Fernet(key).decrypt(ciphertext.encode("ascii")).decode("ascii")
    except InvalidToken as exc:
        raise CredentialUnreadable() from exc


def _clean_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= NAME_MAX or not name.isprintable():
        raise InvalidConnection(f"name must be 1-{NAME_MAX} printable characters", field="name")
    return name


_SYNTAX_REASONS = frozenset(
    {"malformed", "scheme", "no_host", "userinfo", "query_or_fragment", "port"}
)


def _clean_base_url(base_url: str, settings: Settings) -> str:
    """The base URL without trailing slashes; one that names a non-public address literally is
    refused here, outside dev (DESIGN §7): the connect-time guard still judges every name."""
    base_url = base_url.strip().rstrip("/")
    if len(base_url) > BASE_URL_MAX:
        raise InvalidConnection(
            f"base URL must be at most {BASE_URL_MAX} characters", field=BASE_URL_FIELD
        )
    reason = check_base_url(base_url, allow_private=settings.private_addresses_allowed)
    if reason is None:
        return base_url
    if reason in _SYNTAX_REASONS:
        raise InvalidConnection(f"base URL is not acceptable ({reason})", field=BASE_URL_FIELD)
    if reason == HOST_SPELLING:
        raise ProviderAddressForbidden(
            f"base URL's host must be an ASCII DNS name (IDNA A-labels) or an IP address in its "
            f"canonical form, as it will be dialled ({reason})",
            field=BASE_URL_FIELD,
        )
    raise ProviderAddressForbidden(
        f"base URL names a non-public address ({reason}); a provider must be reachable at a "
        "public address",
        field=BASE_URL_FIELD,
    )


def _check_credential(credential: str) -> str:
    # Visible ASCII only: it travels in an HTTP header, and a space or CR/LF there is an injection.
    if not 1 <= len(credential) <= CREDENTIAL_MAX or not all(
        "!" <= char <= "~" for char in credential
    ):
        raise InvalidConnection(
            f"credential must be 1-{CREDENTIAL_MAX} visible ASCII characters without spaces",
            field="credential",
        )
    return credential


def _ensure_name_free(session: Session, *, owner_id: str, name: str, exclude: str | None) -> None:
    query = select(ProviderConnection.id).where(
        ProviderConnection.owner_id == owner_id, ProviderConnection.name == name
    )
    if exclude is not None:
        query = query.where(ProviderConnection.id != exclude)
    if session.scalar(query) is not None:
        raise ConnectionNameTaken(field="name")


def create_connection(
    session: Session,
    *,
    owner_id: str,
    name: str,
    base_url: str,
    credential: str,
    settings: Settings,
    now: dt.datetime,
) -> ProviderConnection:
    """Submit a connection at revision 1, not approved; the credential is stored encrypted."""
    name = _clean_name(name)
    base_url = _clean_base_url(base_url, settings)
    _check_credential(credential)
    _ensure_name_free(session, owner_id=owner_id, name=name, exclude=None)
    connection = ProviderConnection(
        id=new_id("pcon"),
        owner_id=owner_id,
        name=name,
        base_url=base_url,
        credential_ciphertext=_encrypt(settings, credential),
        revision=1,
        approved_revision=None,
        created_at=now,
        updated_at=now,
    )
    session.add(connection)
    session.flush()
    return connection


def get_connection(session: Session, *, connection_id: str) -> ProviderConnection:
    connection = session.get(ProviderConnection, connection_id)
    if connection is None:
        raise ConnectionNotFound()
    return connection


def _lock_connection(session: Session, *, connection_id: str) -> ProviderConnection:
    connection = session.scalar(
        select(ProviderConnection).where(ProviderConnection.id == connection_id).with_for_update()
    )
    if connection is None:
        raise ConnectionNotFound()
    return connection


MAX_IN_FLIGHT_FIELD = "maxInFlight"


def check_max_in_flight(value: int, settings: Settings) -> int:
    """A connection's own bound on calls in flight: 1 to the configured ceiling."""
    ceiling = settings.provider_max_in_flight_ceiling
    if not 1 <= value <= ceiling:
        raise InvalidConnection(
            f"maxInFlight must be between 1 and {ceiling}", field=MAX_IN_FLIGHT_FIELD
        )
    return value


def set_max_in_flight(
    session: Session,
    *,
    connection_id: str,
    max_in_flight: int | None,
    settings: Settings,
    now: dt.datetime,
) -> ProviderConnection:
    """Set the connection's own bound on calls in flight per process (None: the default).

    Not a new revision: where and how the provider is called is unchanged, so no approval
    lapses (DESIGN §7)."""
    if max_in_flight is not None:
        check_max_in_flight(max_in_flight, settings)
    connection = _lock_connection(session, connection_id=connection_id)
    if connection.max_in_flight != max_in_flight:
        connection.max_in_flight = max_in_flight
        connection.updated_at = now
    session.flush()
    return connection


def update_connection(
    session: Session,
    *,
    connection_id: str,
    settings: Settings,
    now: dt.datetime,
    name: str | None = None,
    base_url: str | None = None,
    credential: str | None = None,
    max_in_flight: int | None = None,
) -> ProviderConnection:
    """Change name, URL and/or credential; any real change bumps the revision.

    A new revision has no check results and no approval, so calls through the connection are
    refused until a new run passes and staff approve again. `max_in_flight` (None: leave it)
    is no part of the revision (`set_max_in_flight`).
    """
    if max_in_flight is not None:
        check_max_in_flight(max_in_flight, settings)
    connection = _lock_connection(session, connection_id=connection_id)
    changed = False
    if name is not None:
        name = _clean_name(name)
        if name != connection.name:
            _ensure_name_free(
                session, owner_id=connection.owner_id, name=name, exclude=connection.id
            )
            connection.name = name
            changed = True
    if base_url is not None:
        base_url = _clean_base_url(base_url, settings)
        if base_url != connection.base_url:
            connection.base_url = base_url
            changed = True
    if credential is not None:
        _check_credential(credential)
        current = _decrypt(settings, connection.credential_ciphertext)
        if not hmac.compare_digest(current.encode(), credential.encode()):
            connection.credential_ciphertext = _encrypt(settings, credential)
            changed = True
    if changed:
        connection.revision += 1
        connection.updated_at = now
    if max_in_flight is not None and max_in_flight != connection.max_in_flight:
        connection.max_in_flight = max_in_flight
        connection.updated_at = now
    session.flush()
    return connection


def get_dispatch_target(
    session: Session, *, connection_id: str, settings: Settings
) -> DispatchTarget:
    """Return where and how to call the connection, with the credential decrypted (the plan
    `dispatch_target` on a sync session)."""
    return dispatch_target(session, connection_id=connection_id, settings=settings)


@query
def dispatch_target(*, connection_id: str, settings: Settings) -> Plan[DispatchTarget]:
    """Return where and how to call the connection, with the credential decrypted."""
    row = first((yield Rows(_DISPATCH_TARGET, {"id": connection_id})))
    if row is None:
        raise ConnectionNotFound()
    return dispatch_target_of(tuple(row), settings)


def with_dispatch_target(statement: Select[Any], connection_id: Any) -> Select[Any]:
    """`statement` with the dispatch target of the connection `connection_id` (a column of it)
    as its last `DISPATCH_TARGET_WIDTH` columns, all NULL when there is no such connection, so
    a caller that reads several things at once needs no round trip of its own for this one."""
    table = ProviderConnection.__table__
    return statement.add_columns(*_DISPATCH_TARGET.selected_columns).outerjoin(
        table, _connections.id == connection_id
    )


def dispatch_target_of(values: tuple[Any, ...], settings: Settings) -> DispatchTarget:
    """The target from the `DISPATCH_TARGET_WIDTH` columns `with_dispatch_target` added."""
    connection_id, base_url, ciphertext, revision, approved_revision, max_in_flight = values
    if connection_id is None:
        raise ConnectionNotFound()
    return DispatchTarget(
        connection_id=connection_id,
        base_url=base_url,
        credential=_decrypt(settings, ciphertext),
        approved=revision_approved(approved_revision, revision),
        revision=revision,
        max_in_flight=max_in_flight,
    )


# Every invoke reads it (built once, on the table's columns: a Core statement skips the ORM's
# execution path, which cost more than the query itself).
_connections = ProviderConnection.__table__.c
_DISPATCH_TARGET = select(
    _connections.id,
    _connections.base_url,
    _connections.credential_ciphertext,
    _connections.revision,
    _connections.approved_revision,
    _connections.max_in_flight,
).where(_connections.id == bindparam("id"))
DISPATCH_TARGET_WIDTH = len(_DISPATCH_TARGET.selected_columns)


def is_approved(session: Session, *, connection_id: str) -> bool:
    """Return whether the connection's current revision is approved (unknown id: False)."""
    connection = session.get(ProviderConnection, connection_id)
    return connection is not None and connection.approved


def record_run(
    session: Session,
    *,
    connection_id: str,
    connection_revision: int,
    started_at: dt.datetime,
    finished_at: dt.datetime,
    checks: Sequence[CheckVerdict],
) -> RunView:
    """Store one run; it passed only with nine verdicts, all `passed`, in order 1..9.

    A run that did not pass on the approved revision lapses the approval at once (DESIGN §7):
    calls are refused until a new run passes and staff approve again.
    """
    connection = _lock_connection(session, connection_id=connection_id)
    positions = [check.position for check in checks]
    if positions != list(range(1, len(checks) + 1)):
        raise ValueError("checks must be in order, numbered from 1")
    passed = len(checks) == CHECK_COUNT and all(c.status == "passed" for c in checks)
    run = ConformanceRun(
        id=new_id("crun"),
        connection_id=connection_id,
        connection_revision=connection_revision,
        started_at=started_at,
        finished_at=finished_at,
        passed=passed,
    )
    session.add(run)
    if not passed and connection.approved_revision == connection_revision:
        connection.approved_revision = None
    session.flush()
    for check in checks:
        session.add(
            ConformanceResult(
                run_id=run.id,
                position=check.position,
                name=check.name,
                status=check.status,
                detail=check.detail,
            )
        )
    session.flush()
    return _view(run, list(checks))


def _view(run: ConformanceRun, checks: list[CheckVerdict]) -> RunView:
    return RunView(
        run_id=run.id,
        connection_id=run.connection_id,
        connection_revision=run.connection_revision,
        started_at=run.started_at,
        finished_at=run.finished_at,
        passed=run.passed,
        checks=checks,
    )


def _load_checks(session: Session, run_id: str) -> list[CheckVerdict]:
    rows = session.scalars(
        select(ConformanceResult)
        .where(ConformanceResult.run_id == run_id)
        .order_by(ConformanceResult.position)
    )
    return [
        CheckVerdict(
            position=row.position,
            name=row.name,
            status=row.status,  # type: ignore[arg-type]
            detail=dict(row.detail),
        )
        for row in rows
    ]


def latest_run(
    session: Session, *, connection_id: str, revision: int | None = None
) -> RunView | None:
    """Return the most recent run (optionally only among runs on `revision`), or None."""
    query = select(ConformanceRun).where(ConformanceRun.connection_id == connection_id)
    if revision is not None:
        query = query.where(ConformanceRun.connection_revision == revision)
    run = session.scalar(
        query.order_by(ConformanceRun.finished_at.desc(), ConformanceRun.id.desc()).limit(1)
    )
    if run is None:
        return None
    return _view(run, _load_checks(session, run.id))


def locked_revision(session: Session, *, connection_id: str) -> int:
    """The connection's current revision as committed, its row locked until the transaction ends."""
    revision = session.scalar(
        select(ProviderConnection.revision)
        .where(ProviderConnection.id == connection_id)
        .with_for_update()
    )
    if revision is None:
        raise ConnectionNotFound()
    return revision


def run_revision(session: Session, *, run_id: str) -> int | None:
    """The connection revision a run checked (unknown run: None)."""
    return session.scalar(
        select(ConformanceRun.connection_revision).where(ConformanceRun.id == run_id)
    )


def list_runs(session: Session, *, connection_id: str, limit: int = 50) -> list[RunView]:
    """Return the connection's runs, newest first (history is kept for every revision)."""
    get_connection(session, connection_id=connection_id)
    runs = session.scalars(
        select(ConformanceRun)
        .where(ConformanceRun.connection_id == connection_id)
        .order_by(ConformanceRun.finished_at.desc(), ConformanceRun.id.desc())
        .limit(limit)
    )
    return [_view(run, _load_checks(session, run.id)) for run in runs]


def approve_connection(
    session: Session, *, connection_id: str, now: dt.datetime, approved_by: str | None = None
) -> ProviderConnection:
    """Approve the current revision; refused unless its latest run passed all nine checks."""
    connection = _lock_connection(session, connection_id=connection_id)
    run = latest_run(session, connection_id=connection_id, revision=connection.revision)
    if run is None or not run.passed:
        raise ConformanceNotPassed(
            "the latest conformance run on the current connection did not pass all nine checks"
            if run is not None
            else "no conformance run on the current connection yet"
        )
    connection.approved_revision = connection.revision
    connection.approved_at = now
    connection.approved_by = approved_by
    session.flush()
    return connection
