"""One typed settings object, read from `MERCATO_*` variables and validated at start."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mercato.core.files import PRIVATE_FILE_MODE, ensure_private_dir

_DEV_SECRET = "mercato-dev-secret-not-for-production"
ENV_PREFIX = "MERCATO_"
DEFAULT_DATA_DIR = Path("./var")
PASSWORD_HASH_MEMORY_KIB = 65536  # Argon2id, RFC 9106's second (low-memory) recommendation
# What `mercato up` records in its data dir so `mercato admin ...` run beside it needs no
# variable (decision 0271).
DEMO_SETTINGS_FILE = "mercato-up.json"
_DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres")
_SECRET_FIX = (
    "set it to a random string of 32 or more characters (python3 -c 'import secrets; "
    "print(secrets.token_urlsafe(48))') and keep it: it protects stored provider credentials"
)


class SettingsError(ValueError):
    """The configuration cannot be used; the process must not start."""


class Settings(BaseSettings):
    """Mercato's configuration. Secrets fail closed outside `MERCATO_ENV=dev`."""

    model_config = SettingsConfigDict(env_prefix="MERCATO_", extra="ignore")

    env: Literal["production", "dev"] = "production"
    data_dir: Path = DEFAULT_DATA_DIR
    database_url: str = ""
    secret_key: SecretStr | None = None
    allow_private_provider_addresses: bool | None = None
    blob_store: Literal["local", "database"] = "local"

    access_token_ttl_seconds: int = Field(default=900, ge=30)
    refresh_token_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    # Login throttle (decision 0220): failures per (email, address), per address, and the
    # per-email bound that only spaces out attempts from addresses that have failed.
    login_attempts_per_window: int = Field(default=10, ge=1, le=1_000_000)
    login_address_attempts_per_window: int = Field(default=30, ge=1, le=1_000_000)
    login_email_attempts_per_window: int = Field(default=20, ge=1, le=1_000_000)
    login_email_delay_seconds: int = Field(default=15, ge=1, le=3600)
    login_window_seconds: int = Field(default=300, ge=1, le=86_400)
    # Argon2id memory per password hash, KiB (the RFC 9106 low-memory profile's 64 MiB by
    # default). Only a dev configuration may go lower: the test suite does, to a few KiB
    # (decision 0310); a stored hash keeps its own cost, and a login re-hashes it to this one.
    password_hash_memory_kib: int = Field(
        default=PASSWORD_HASH_MEMORY_KIB, ge=32, le=4 * 1024 * 1024
    )
    # Argon2 computations one process runs at once (each takes the memory above); the rest
    # wait for a slot. 0: derived, min(4, CPUs) (decision 0525).
    password_hash_concurrency: int = Field(default=0, ge=0, le=256)
    # Peers whose X-Forwarded-For / X-Forwarded-Proto are believed (addresses or networks).
    trusted_proxies: str = "127.0.0.1,::1"
    # Host header values `/mcp` answers (decision 0540): `host`, `host:port` or `host:*` (any
    # port), comma-separated; `*` alone answers any host (a proxy in front checks it).
    mcp_allowed_hosts: str = "127.0.0.1:*,localhost:*,[::1]:*"

    # Points granted once to each account made on the web sign-up page (0: none).
    signup_points: int = Field(default=0, ge=0, le=10**15)
    # Accounts one client address may make in an hour (429 SIGNUP_THROTTLED past it), and the
    # points all sign-up grants of one UTC day may come to (unset: 100 x the grant); later
    # accounts of the day are made without points (decisions 0527, 0528).
    signup_per_address_per_hour: int = Field(default=3, ge=1, le=1_000_000)
    signup_points_daily_cap: int | None = Field(default=None, ge=0, le=10**18)

    default_quota_policy: str = "standard"
    default_quota_limit: int = Field(default=60, ge=1)
    default_quota_window_seconds: int = Field(default=60, ge=1)

    provider_timeout_seconds: float = Field(default=10.0, gt=0)
    # Judging a body or a result against its schema stops after this much of the judging
    # thread's CPU time: 422 REQUEST_TOO_COMPLEX, or a contract violation (decision 0515).
    validation_deadline_ms: int = Field(default=200, ge=1, le=60_000)
    redispatch_attempts: int = Field(default=3, ge=1)
    idempotency_lease_seconds: int = Field(default=30, ge=1)
    # A call still unknown after this many reconciliations, or this long after acceptance, is
    # stuck: staff see it and may resolve it (decision 0201).
    stuck_after_attempts: int = Field(default=20, ge=1)
    stuck_after_seconds: int = Field(default=86400, ge=1)
    # How long `/health/ready` waits for the database's `SELECT 1` (decision 0272).
    ready_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    # Threads of one process working in the database at once (0: no limit); decision 0185.
    db_concurrency: int = Field(default=4, ge=0)
    # Bulkheads (DESIGN §7, decisions 0510-0514): provider calls one process keeps in flight
    # per connection (a connection's own `maxInFlight` overrides it, up to the ceiling), and in
    # all; a new call beyond either is refused before acceptance with 503 PROVIDER_BUSY.
    provider_max_in_flight: int = Field(default=64, ge=1, le=1_000_000)
    provider_max_in_flight_ceiling: int = Field(default=1024, ge=1, le=1_000_000)
    max_in_flight: int = Field(default=4096, ge=1, le=1_000_000)
    # Steps one `mercato worker` runs at once in its fresh lane (the stuck lane gets a quarter
    # of that, at least one, of its own); each may be waiting on a provider (decision 0340).
    worker_concurrency: int = Field(default=32, ge=1, le=1024)
    # prometheus_client's own variable: set (by `serve --workers N`), /metrics aggregates the
    # series of every worker process from this directory.
    prometheus_multiproc_dir: str = Field(default="", validation_alias="PROMETHEUS_MULTIPROC_DIR")

    @model_validator(mode="after")
    def _fail_closed(self) -> Settings:
        if self.secret_key is None:
            if self.env != "dev":
                raise SettingsError(
                    f"MERCATO_SECRET_KEY is required unless MERCATO_ENV=dev; {_SECRET_FIX}, or "
                    "set MERCATO_ENV=dev for a local trial"
                )
            self.secret_key = SecretStr(_DEV_SECRET)
        elif self.env != "dev" and len(self.secret_key.get_secret_value()) < 32:
            raise SettingsError(f"MERCATO_SECRET_KEY must be at least 32 characters; {_SECRET_FIX}")
        if self.env != "dev" and self.password_hash_memory_kib < PASSWORD_HASH_MEMORY_KIB:
            raise SettingsError(
                f"MERCATO_PASSWORD_HASH_MEMORY_KIB below {PASSWORD_HASH_MEMORY_KIB} is for "
                "MERCATO_ENV=dev only; unset it for the default"
            )
        if self.allow_private_provider_addresses is None:
            self.allow_private_provider_addresses = self.env == "dev"
        if self.provider_max_in_flight > self.provider_max_in_flight_ceiling:
            raise SettingsError(
                "MERCATO_PROVIDER_MAX_IN_FLIGHT must not exceed "
                "MERCATO_PROVIDER_MAX_IN_FLIGHT_CEILING; lower it or raise the ceiling"
            )
        _proxy_entries(self.trusted_proxies)  # a malformed entry fails here, at start
        _host_entries(self.mcp_allowed_hosts)
        _check_database_url(self.database_url)
        return self

    @property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL: the configured one, else SQLite under the data dir."""
        url = self.database_url or f"sqlite:///{(self.data_dir / 'mercato.db').resolve()}"
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        elif url.startswith("postgres://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgres://")
        return url

    @property
    def signup_daily_cap(self) -> int:
        """The points all sign-up grants of one UTC day may come to (decision 0528)."""
        if self.signup_points_daily_cap is not None:
            return self.signup_points_daily_cap
        return 100 * self.signup_points

    @property
    def password_hash_slots(self) -> int:
        """How many Argon2 computations this process runs at once (decision 0525)."""
        return self.password_hash_concurrency or self.derived_hash_slots()

    @staticmethod
    def derived_hash_slots() -> int:
        """min(4, CPUs this process may run on): Argon2 is CPU-bound, and 4 x 64 MiB bounds
        the memory it takes."""
        affinity = getattr(os, "sched_getaffinity", None)
        cpus = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
        return max(1, min(4, cpus))

    @property
    def trusted_proxy_list(self) -> list[str]:
        """The trusted proxies as address or network strings (empty: trust no peer)."""
        return _proxy_entries(self.trusted_proxies)

    @property
    def mcp_host_list(self) -> list[str] | None:
        """The Host values `/mcp` answers (`host`, `host:port`, `host:*`); None: any host."""
        return _host_entries(self.mcp_allowed_hosts)

    @property
    def private_addresses_allowed(self) -> bool:
        return bool(self.allow_private_provider_addresses)

    def derived_key(self, purpose: str) -> bytes:
        """Derive a 32-byte key for one purpose from the secret key (domain separation)."""
        assert self.secret_key is not None
        material = self.secret_key.get_secret_value().encode()
        return hashlib.sha256(b"mercato:" + purpose.encode() + b":" + material).digest()

    def fernet_key(self, purpose: str) -> bytes:
        """Return a Fernet key (urlsafe base64) derived for `purpose`."""
        return base64.urlsafe_b64encode(self.derived_key(purpose))


def _proxy_entries(text: str) -> list[str]:
    """Split MERCATO_TRUSTED_PROXIES, refusing anything but IP addresses and networks.

    Each entry comes back in canonical form: an address as such, a network with its host bits
    cleared (`10.0.0.1/8` is `10.0.0.0/8`), as the proxy-header middleware matches networks
    only in that form.
    """
    entries = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            if "/" in entry:
                entries.append(str(ipaddress.ip_network(entry, strict=False)))
            else:
                entries.append(str(ipaddress.ip_address(entry)))
        except ValueError:
            raise SettingsError(
                f"MERCATO_TRUSTED_PROXIES: {entry!r} is not an IP address or network; give "
                "comma-separated addresses or CIDR networks, or leave it empty"
            ) from None
    return entries


_HOST_ENTRY = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(?:[0-9]{1,5}|\*))?")


def _host_entries(text: str) -> list[str] | None:
    """Split MERCATO_MCP_ALLOWED_HOSTS (None for `*`: any host), refusing malformed entries."""
    entries = [part.strip() for part in text.split(",") if part.strip()]
    if entries == ["*"]:
        return None
    for entry in entries:
        if not _HOST_ENTRY.fullmatch(entry):
            raise SettingsError(
                f"MERCATO_MCP_ALLOWED_HOSTS: {entry!r} is not a host; give comma-separated "
                "host, host:port or host:* entries, or * alone for any host"
            )
    return entries


def _check_database_url(url: str) -> None:
    """Refuse a URL that names no database Mercato supports (never echo it: it may hold a
    password)."""
    if not url:
        return
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme not in _DATABASE_SCHEMES:
        raise SettingsError(
            "MERCATO_DATABASE_URL is not a database URL Mercato supports; give "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE, or unset it for SQLite under "
            "MERCATO_DATA_DIR"
        )


def describe_settings_error(error: Exception, model: type[BaseSettings] | None = None) -> str:
    """One line naming each bad variable and how to fix it (never a value that may be secret).

    `model` is the settings class that failed (default: `Settings`); its `env_prefix` and
    aliases give the variable names, its defaults the fix.
    """
    if not isinstance(error, ValidationError):
        return " ".join(str(error).split())
    model = model or Settings
    prefix = str(model.model_config.get("env_prefix") or "").upper()
    problems = []
    for detail in error.errors():
        message = str(detail["msg"]).removeprefix("Value error, ")
        if message.startswith(ENV_PREFIX) or not detail["loc"]:
            problems.append(message)
            continue
        located = str(detail["loc"][0])
        field_name = next(
            (n for n, f in model.model_fields.items() if located in (n, f.validation_alias)),
            located,
        )
        field = model.model_fields.get(field_name)
        alias = field.validation_alias if field is not None else None
        name = alias if isinstance(alias, str) else prefix + field_name.upper()
        secret = field is not None and "Secret" in str(field.annotation)
        if field is not None and field.default is not None and not secret:
            default = field.default
            shown = str(default) if isinstance(default, Path) else repr(default)
            fix = f"set a valid value, or unset it for the default {shown}"
        else:
            fix = "set a valid value"
        problems.append(f"{name}: {message}; {fix}")
    return " ".join("; ".join(problems).split())


# --- the demo's settings, recorded in its data dir ----------------------------------------

_beside_demo: ContextVar[bool] = ContextVar("mercato_settings_beside_demo", default=False)


@contextmanager
def beside_demo() -> Iterator[None]:
    """Within the block `load_settings()` fills unset variables from the demo's recorded
    settings when the command works on the demo's database (`mercato admin ...`)."""
    token = _beside_demo.set(True)
    try:
        yield
    finally:
        _beside_demo.reset(token)


def _field_variables() -> dict[str, str]:
    """Environment variable name -> settings field name, for every field."""
    return {ENV_PREFIX + name.upper(): name for name in Settings.model_fields}


def _environment() -> dict[str, str]:
    """The process's settings variables, upper-cased names (pydantic reads them case-blind)."""
    known = _field_variables()
    return {k.upper(): v for k, v in os.environ.items() if k.upper() in known}


def environment_data_dir() -> Path:
    """The data dir the environment names: `MERCATO_DATA_DIR`, else `./var` (DESIGN §10)."""
    given = _environment().get("MERCATO_DATA_DIR")
    return Path(given) if given else DEFAULT_DATA_DIR


def record_demo_settings(settings: Settings) -> Path:
    """Write the settings `mercato up` runs with into its data dir (`mercato-up.json`).

    Every `MERCATO_*` settings variable of its environment is kept except the secret key
    (only whether one was given), with the resolved environment mode and data dir. The file
    is private to the user (a database URL may hold a password) and replaced atomically.
    """
    data_dir = settings.data_dir.resolve()
    recorded: dict[str, Any] = {
        k: v for k, v in _environment().items() if k != "MERCATO_SECRET_KEY"
    }
    recorded["MERCATO_ENV"] = settings.env
    recorded["MERCATO_DATA_DIR"] = str(data_dir)
    document = {
        "settings": dict(sorted(recorded.items())),
        "secretKeyGiven": "MERCATO_SECRET_KEY" in _environment(),
    }
    ensure_private_dir(data_dir)
    path = data_dir / DEMO_SETTINGS_FILE
    partial = path.with_name(path.name + ".partial")
    descriptor = _open_new_private(partial)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        json.dump(document, stream, indent=2)
        stream.write("\n")
    os.replace(partial, path)
    return path


def _open_new_private(partial: Path) -> int:
    """Open `partial` as a new file, 0600, for writing; never through a link planted there.

    O_EXCL | O_NOFOLLOW: an existing name is never written through. It is a partial file left
    by a run that died while writing, or something planted: its name is removed (a link itself,
    never what it points to) and the file made afresh, once; a name that reappears meanwhile is
    someone racing this process, and the error stands.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(partial, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        partial.unlink()
        descriptor = os.open(partial, flags, PRIVATE_FILE_MODE)
    os.fchmod(descriptor, PRIVATE_FILE_MODE)
    return descriptor


def _demo_defaults() -> dict[str, Any]:
    """Settings fields to take from the demo's recorded settings (empty: none apply).

    They apply only when the command works on the demo's database: the environment names no
    other database URL and no other data dir. Variables set in the environment always win.
    """
    path = environment_data_dir() / DEMO_SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        recorded = document["settings"]
        if not isinstance(recorded, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in recorded.items()
        ):
            raise ValueError("not a map of variables to strings")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SettingsError(
            f"MERCATO_DATA_DIR: the demo settings {path} cannot be read ({exc}); run "
            "`mercato up` again, or delete the file and set the MERCATO_* variables"
        ) from None
    environment = _environment()
    if environment.get("MERCATO_DATABASE_URL", recorded.get("MERCATO_DATABASE_URL", "")) != (
        recorded.get("MERCATO_DATABASE_URL", "")
    ):
        return {}
    if document.get("secretKeyGiven") is True and "MERCATO_SECRET_KEY" not in environment:
        # Without it stored provider credentials could not be read, and new ones would be
        # sealed with the wrong key.
        raise SettingsError(
            f"MERCATO_SECRET_KEY: the demo recorded in {path} runs with its own secret key; "
            "set the same MERCATO_SECRET_KEY for this command"
        )
    known = _field_variables()
    return {
        known[name]: value
        for name, value in recorded.items()
        if name in known and name not in environment and name != "MERCATO_SECRET_KEY"
    }


def _ensure_data_dir(settings: Settings) -> None:
    try:
        ensure_private_dir(settings.data_dir)
    except OSError as exc:
        raise SettingsError(
            f"MERCATO_DATA_DIR: {settings.data_dir} cannot be created ({exc.strerror}); give a "
            "directory this user can write, or unset it for ./var"
        ) from None
    if not os.access(settings.data_dir, os.W_OK | os.X_OK):
        raise SettingsError(
            f"MERCATO_DATA_DIR: {settings.data_dir} is not writable; give a directory this "
            "user can write, or unset it for ./var"
        )


class CallerSettings(BaseSettings):
    """What the client-side commands (`mercato call`, `mercato catalog`, `mercato provider push`)
    read: the platform's URL, the caller's API key and the provider's login. Separate from
    `Settings`, which a caller's machine need not have.
    """

    model_config = SettingsConfigDict(env_prefix="MERCATO_", extra="ignore")

    url: str = ""
    api_key: SecretStr | None = None
    # The provider's login for `mercato provider push` (MERCATO_EMAIL, MERCATO_PASSWORD).
    email: str = ""
    password: SecretStr | None = None


def load_settings() -> Settings:
    """Read and validate the settings from the environment, at a process's start.

    Inside `beside_demo()` unset variables come from the demo's recorded settings. The data
    dir is created here, so a path that cannot be is a configuration error, not a traceback.
    """
    beside = _beside_demo.get()
    defaults = _demo_defaults() if beside else {}
    try:
        settings = Settings(**defaults)
    except (ValidationError, SettingsError) as exc:
        described = describe_settings_error(exc)
        demo = environment_data_dir() / DEMO_SETTINGS_FILE
        if beside and "MERCATO_SECRET_KEY is required" in described and not demo.is_file():
            # `mercato admin` run away from the demo: say where its settings were looked for.
            raise SettingsError(
                f"{described}; no `mercato up` settings at {demo.resolve()}: run this command "
                "in the directory `mercato up` runs in, or set MERCATO_DATA_DIR to its data dir"
            ) from None
        raise
    _ensure_data_dir(settings)
    return settings
