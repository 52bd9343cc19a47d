"""`mercato up`: the one-command demo (DESIGN §1 and §11).

Migrates, starts the offline sample upstream (unless `MERCATO_DAILY_RANKING_UPSTREAM` is set), the
example provider, `mercato serve` and `mercato worker` as child processes on loopback, connects
the provider through the normal connect → check → approve → publish path, seeds a demo caller with
points and a fresh API key, prints how to call it, and then supervises the children until Ctrl-C
or SIGTERM, when it stops every one of them and waits for them.

Everything it writes lives under `MERCATO_DATA_DIR` (and the configured database), so running it
again reuses the same accounts, connection, listing and provider snapshots.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import IO, Any, TypeVar

import httpx
from sqlalchemy import select

from mercato.accounts import service as accounts
from mercato.catalog import service as catalog
from mercato.catalog.errors import VersionImmutable
from mercato.catalog.examples import daily_ranking_examples, example_contract
from mercato.cli import demo_lock
from mercato.cli.commands_catalog import connection_facts
from mercato.cli.commands_core import runtime_from_env
from mercato.conformance.flows import change_connection, check_connection, submit_connection
from mercato.db.migrate import upgrade
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.providers.models import ProviderConnection
from mercato.providers.schemas import RunView
from mercato.settings import Settings, load_settings, record_demo_settings

SERVICE_CODE = "pixiv.daily-ranking"
VERSION = "v1"
PRICE = 10
DISPLAY_NAME = "pixiv daily ranking"
# The platform runs the example itself, and says so the way any provider names itself (spec 1.2).
PUBLISHER_NAME = "Mercato (run by the platform)"
DESCRIPTION = (
    "pixiv's daily overall, illustration and manga charts from immutable snapshots, with "
    "thumbnails delivered as artifacts."
)
PROVIDER_EMAIL = "daily-ranking@provider.example"
CONNECTION_NAME = "pixiv.daily-ranking"
DEMO_EMAIL = "demo@caller.example"
STAFF_EMAIL = "staff@mercato.example"
DEMO_POINTS = 1000
TOP_UP_BELOW = 100
DEMO_KEY_NAME = "mercato up"
# What the demo's web sign-up grants (MERCATO_SIGNUP_POINTS, unless the caller set it).
SIGNUP_POINTS = "100"
# The platform prefers the documented 8000; the provider and the sample are internal and take
# whatever port the OS offers (fixed ports collide with other runs on a shared machine).
PREFERRED_PORTS = {"serve": 8000}
PORT_ATTEMPTS = 3
HOST = "127.0.0.1"

START_TIMEOUT = 60.0
# Against the sample a full refresh of the three charts takes seconds; against the real upstream
# (paced at one request a second) the smallest chart arrives within a couple of minutes.
SNAPSHOT_TIMEOUT_SAMPLE = 180.0
SNAPSHOT_TIMEOUT_UPSTREAM = 900.0
STOP_TIMEOUT = 20.0

T = TypeVar("T")


class UpFailed(RuntimeError):
    """The demo could not be brought up; the message says which step failed."""


class _Interrupted(Exception):
    """SIGINT or SIGTERM arrived while starting up."""


# --- small helpers ----------------------------------------------------------------------


def _port_free(port: int) -> bool:
    """Whether a server could listen on the port now (like uvicorn, ignoring TIME_WAIT)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def pick_port(preferred: int | None, taken: set[int]) -> int:
    """The preferred loopback port when it is free, else one the OS picks (never one `taken`)."""
    if preferred and preferred not in taken and _port_free(preferred):
        port = preferred
    else:
        while True:
            with socket.socket() as sock:
                sock.bind((HOST, 0))
                port = int(sock.getsockname()[1])
            if port not in taken:
                break
    taken.add(port)
    return port


def curl_command(url: str, api_key: str) -> str:
    """A bash-ready invoke of the example with a fresh Idempotency-Key on every run."""
    endpoint = f"{url}/v1/services/{SERVICE_CODE}/versions/{VERSION}:invoke"
    return " ".join(
        [
            "curl -sS -X POST",
            shlex.quote(endpoint),
            "-H",
            shlex.quote(f"Authorization: Bearer {api_key}"),
            "-H",
            '"Idempotency-Key: demo-$(date +%s)-$RANDOM"',
            "-H",
            shlex.quote("Content-Type: application/json"),
            "-d",
            shlex.quote('{"chart": "manga", "limit": 5}'),
        ]
    )


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: a child gets SIGTERM if `mercato up` itself dies without cleaning up."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --- child processes --------------------------------------------------------------------


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Supervisor:
    """Starts children each in its own process group and stops all of them, in reverse."""

    log_dir: Path
    say: Callable[[str], None]
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, args: list[str], env: dict[str, str]) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log: IO[bytes] = log_path.open("ab")
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "mercato", *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: we signal it, not the terminal
                preexec_fn=_set_parent_death_signal if sys.platform == "linux" else None,
            )
        finally:
            log.close()
        child = Child(name, process, log_path)
        self.children.append(child)
        self.say(f"started {name} (pid {process.pid}, log {log_path})")
        return child

    def forget(self, child: Child) -> None:
        """Drop a child that already exited (reaped) from the ones to stop."""
        child.process.wait()
        self.children.remove(child)

    def dead_child(self) -> Child | None:
        return next((c for c in self.children if not c.alive()), None)

    def stop_all(self) -> None:
        """SIGTERM every child's process group (newest first), wait, SIGKILL stragglers."""
        for child in reversed(self.children):
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for child in reversed(self.children):
            remaining = max(0.1, deadline - time.monotonic())
            try:
                child.process.wait(remaining)
            except subprocess.TimeoutExpired:
                self.say(f"{child.name} did not stop in time; killing it")
                _signal_group(child, signal.SIGKILL)
                child.process.wait()
            # Anything the child left in its group (it should leave nothing) goes too.
            _signal_group(child, signal.SIGKILL)
        self.children.clear()


def _signal_group(child: Child, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)


def _wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    supervisor: Supervisor,
    stop: threading.Event,
    interval: float = 0.2,
) -> T:
    """Poll `probe` until it gives a value, a child dies, we are told to stop, or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if stop.is_set():
            raise _Interrupted()
        dead = supervisor.dead_child()
        if dead is not None:
            raise UpFailed(
                f"{dead.name} exited with status {dead.process.returncode} while waiting for "
                f"{what}; last lines of {dead.log_path}:\n{dead.log_tail()}"
            )
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise UpFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        stop.wait(interval)


def _http_ok(url: str) -> bool | None:
    try:
        return True if httpx.get(url, timeout=2).status_code == 200 else None
    except httpx.HTTPError:
        return None


# --- the platform side: accounts, connection, publication -------------------------------


def _account_id(runtime: Runtime, email: str, *, is_staff: bool = False) -> str:
    with runtime.db.transaction() as session:
        found = accounts.find_account_by_email(session, email=email)
        if found is not None:
            return found.id
        return accounts.create_account(
            session, email=email, password=None, is_staff=is_staff, now=runtime.clock.now()
        ).id


def _run_text(run: RunView) -> str:
    return "\n".join(f"  {c.position}. {c.name}: {c.status}  {c.detail}" for c in run.checks)


def connect_provider(
    runtime: Runtime, *, base_url: str, credential: str, say: Callable[[str], None]
) -> str:
    """Connect (or reconnect) the example provider, check, approve and publish; the connection id.

    A second run reuses the connection, updating it when the address or credential changed
    (which lapses approval and needs a new passing check), and re-publishing `v1` with the
    same contract is a no-op.
    """
    owner_id = _account_id(runtime, PROVIDER_EMAIL)
    with runtime.db.read() as session:
        existing = session.scalar(
            select(ProviderConnection.id).where(
                ProviderConnection.owner_id == owner_id,
                ProviderConnection.name == CONNECTION_NAME,
            )
        )
    run: RunView | None
    client = runtime.provider_client()  # the Runtime's; closed with the process
    if existing is None:
        submitted = submit_connection(
            runtime,
            client,
            owner_id=owner_id,
            name=CONNECTION_NAME,
            base_url=base_url,
            credential=credential,
        )
        connection_id, run = submitted.connection_id, submitted.run
        say(f"submitted connection {connection_id} ({base_url})")
    else:
        changed = change_connection(
            runtime, client, connection_id=existing, base_url=base_url, credential=credential
        )
        connection_id, run = existing, changed.run
        if run is not None:
            say(f"updated connection {connection_id} to revision {changed.revision}")
        elif not changed.approved:
            run = check_connection(runtime, client, connection_id=connection_id)
        else:
            say(f"reusing approved connection {connection_id}")
    if run is not None:
        if not run.passed:
            raise UpFailed("the example provider failed the conformance check:\n" + _run_text(run))
        say("conformance check passed (9/9)")
        with runtime.db.transaction() as session:
            providers.approve_connection(
                session, connection_id=connection_id, now=runtime.clock.now()
            )
        say(f"approved connection {connection_id}")
    try:
        with runtime.db.transaction() as session:
            published = catalog.publish(
                session,
                service_code=SERVICE_CODE,
                display_name=DISPLAY_NAME,
                version=VERSION,
                connection=connection_facts(session, connection_id=connection_id),
                price=PRICE,
                contract=example_contract(),
                description=DESCRIPTION,
                examples=daily_ranking_examples(),
                publisher_name=PUBLISHER_NAME,
                now=runtime.clock.now(),
            )
            created = published.created
    except VersionImmutable:
        # A data dir from an earlier release holds v1 with that release's contract; a published
        # version never changes, so the demo keeps serving it (an empty data dir gets today's).
        say(f"{SERVICE_CODE} {VERSION} was published earlier with another contract (kept)")
        return connection_id
    say(
        f"published {SERVICE_CODE} {VERSION}"
        if created
        else f"{SERVICE_CODE} {VERSION} already published (unchanged)"
    )
    return connection_id


def seed_demo_caller(runtime: Runtime, *, say: Callable[[str], None]) -> str:
    """Create or reuse the demo caller, top its points up, and return a fresh API key.

    The demo keys of earlier runs (named `mercato up`) are revoked in the same transaction, so
    only the key printed last works (decision 0237)."""
    account_id = _account_id(runtime, DEMO_EMAIL)
    now = runtime.clock.now()
    with runtime.db.transaction() as session:
        revoked = 0
        for key in accounts.list_api_keys(session, account_id=account_id):
            if key.name == DEMO_KEY_NAME and key.revoked_at is None:
                accounts.revoke_api_key(session, key_id=key.id, account_id=account_id, now=now)
                revoked += 1
        if revoked:
            say(f"revoked {revoked} demo API key(s) of earlier runs")
        available = ledger.balances(session, account_id=account_id).available
        if available < TOP_UP_BELOW:
            ledger.grant(
                session,
                account_id=account_id,
                amount=DEMO_POINTS - available,
                now=now,
                memo="mercato up demo points",
            )
            say(f"granted {DEMO_POINTS - available} points to {DEMO_EMAIL}")
        created = accounts.create_api_key(
            session, account_id=account_id, name=DEMO_KEY_NAME, now=now
        )
        return created.api_key


def demo_logins(runtime: Runtime) -> dict[str, dict[str, str]]:
    """A web login for the demo caller, the example's provider and a staff account.

    Each run sets a fresh password on each of the three (shown once, like the API key), so a
    password printed by an earlier run stops working (decision 0237)."""
    people = {
        "caller": (DEMO_EMAIL, False),
        "provider": (PROVIDER_EMAIL, False),
        "staff": (STAFF_EMAIL, True),
    }
    logins: dict[str, dict[str, str]] = {}
    for role, (email, is_staff) in people.items():
        account_id = _account_id(runtime, email, is_staff=is_staff)
        password = secrets.token_urlsafe(12)
        with runtime.db.transaction() as session:
            accounts.set_password_hash(
                session, account_id=account_id, password_hash=accounts.hash_password(password)
            )
        logins[role] = {"email": email, "password": password}
    return logins


# --- the example provider's side ---------------------------------------------------------


def provider_credential(data_dir: Path) -> str:
    """`MERCATO_DAILY_RANKING_CREDENTIAL`, else one generated once and kept in the data dir."""
    from mercato_examples.daily_ranking.config import DailyRankingSettings

    return DailyRankingSettings(env="dev", data_dir=data_dir).resolve_credential()


@contextlib.contextmanager
def snapshot_probe(data_dir: Path, charts: tuple[str, ...]) -> Iterator[Callable[[], bool | None]]:
    """A probe answering True once every chart has a snapshot in the provider's store."""
    from mercato_examples.daily_ranking.config import DailyRankingSettings
    from mercato_examples.daily_ranking.snapshots import SnapshotStore

    store = SnapshotStore(DailyRankingSettings(env="dev", data_dir=data_dir).snapshot_database_url)
    try:
        yield lambda: True if all(store.latest_date(c) is not None for c in charts) else None
    finally:
        store.close()


# --- the command --------------------------------------------------------------------------


@dataclass
class UpOptions:
    port: int | None
    as_json: bool


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("MERCATO_ENV", "dev")
    return env


@contextlib.contextmanager
def _signals(stop: threading.Event) -> Iterator[None]:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run_up(options: UpOptions) -> int:
    """Bring the demo up, print how to use it, and supervise until told to stop."""
    os.environ.setdefault("MERCATO_ENV", "dev")
    os.environ.setdefault("MERCATO_SIGNUP_POINTS", SIGNUP_POINTS)
    out = sys.stdout

    def say(message: str) -> None:
        stream = sys.stderr if options.as_json else out
        stream.write(message + "\n")
        stream.flush()

    settings = load_settings()
    data_dir = settings.data_dir.resolve()
    # One `mercato up` per data dir and per database, before anything is written (0551).
    try:
        lock = demo_lock.acquire(data_dir, settings.resolved_database_url)
    except demo_lock.AlreadyRunning as exc:
        sys.stderr.write(f"mercato up: {exc}\n")
        return 1
    try:
        return _run_locked(options, settings, lock, say)
    finally:
        lock.release()


def _run_locked(
    options: UpOptions, settings: Settings, lock: demo_lock.DemoLock, say: Callable[[str], None]
) -> int:
    out = sys.stdout
    stop = threading.Event()
    record_demo_settings(settings)  # `mercato admin ...` beside the demo reads it (0271)
    data_dir = settings.data_dir.resolve()
    supervisor = Supervisor(log_dir=data_dir / "logs", say=say)
    with _signals(stop):
        try:
            ready = _bring_up(
                options,
                settings_data_dir=data_dir,
                supervisor=supervisor,
                say=say,
                stop=stop,
                announce=lock.announce,
            )
        except _Interrupted:
            say("interrupted; stopping")
            supervisor.stop_all()
            return 130
        except UpFailed as exc:
            sys.stderr.write(f"mercato up failed: {exc}\n")
            supervisor.stop_all()
            return 1
        except BaseException:
            supervisor.stop_all()
            raise
        if options.as_json:
            out.write(json.dumps(ready) + "\n")
            out.flush()
        else:
            out.write(_human_summary(ready) + "\n")
            out.flush()
        code = _supervise(supervisor, stop, say)
        supervisor.stop_all()
        say("stopped every process mercato up started")
        return code


def _supervise(supervisor: Supervisor, stop: threading.Event, say: Callable[[str], None]) -> int:
    while not stop.wait(0.5):
        dead = supervisor.dead_child()
        if dead is not None:
            say(
                f"{dead.name} exited with status {dead.process.returncode}; stopping the rest. "
                f"Last lines of {dead.log_path}:\n{dead.log_tail()}"
            )
            return 1
    say("stopping")
    return 0


def _bring_up(
    options: UpOptions,
    *,
    settings_data_dir: Path,
    supervisor: Supervisor,
    say: Callable[[str], None],
    stop: threading.Event,
    announce: Callable[[str], None],
) -> dict[str, Any]:
    data_dir = settings_data_dir
    taken: set[int] = set()
    if options.port is not None:
        if not _port_free(options.port):
            raise UpFailed(f"port {options.port} on {HOST} is in use; choose another with --port")
        taken.add(options.port)
    runtime = runtime_from_env()
    logging.getLogger("alembic").setLevel(logging.WARNING)
    upgrade(runtime.db.engine)
    say(f"database is up to date; data under {data_dir}")
    env = _child_env()

    def wait(probe: Callable[[], T | None], what: str, timeout: float = START_TIMEOUT) -> T:
        return _wait_until(probe, timeout=timeout, what=what, supervisor=supervisor, stop=stop)

    def listen(
        name: str,
        args: Callable[[int], list[str]],
        child_env: dict[str, str],
        ready_path: str,
        port: int | None = None,
    ) -> int:
        """Start a server child and wait until it answers; retry on another port if it dies.

        A free port can be taken by someone else between our check and the child's bind, so an
        automatically chosen port gets up to three tries; a port given with --port gets one.
        """
        fixed = port is not None
        for attempt in range(1, PORT_ATTEMPTS + 1):
            chosen = port if port is not None else pick_port(PREFERRED_PORTS.get(name), taken)
            child = supervisor.start(name, args(chosen), child_env)
            try:
                wait(partial(_http_ok, f"http://{HOST}:{chosen}{ready_path}"), f"{name} to answer")
                return chosen
            except UpFailed:
                if fixed or child.alive() or attempt == PORT_ATTEMPTS:
                    raise
                supervisor.forget(child)
                say(f"{name} could not listen on port {chosen}; trying another port")
                port = None
        raise AssertionError("unreachable")

    # The upstream: the given one, or the offline sample.
    sample_base: str | None = None
    provider_env = dict(env)
    if env.get("MERCATO_DAILY_RANKING_UPSTREAM"):
        say(f"using the upstream {env['MERCATO_DAILY_RANKING_UPSTREAM']}")
    else:
        sample_port = listen(
            "sample-upstream",
            lambda p: ["sample-upstream", "serve", "--port", str(p)],
            env,
            "/_control",
        )
        sample_base = f"http://{HOST}:{sample_port}"
        hosts = env.get("MERCATO_DAILY_RANKING_IMAGE_HOSTS", "i.pximg.net").split(",")
        hosts.append(f"{HOST}:{sample_port}")
        provider_env.update(
            MERCATO_DAILY_RANKING_UPSTREAM=sample_base,
            MERCATO_DAILY_RANKING_IMAGE_HOSTS=",".join(h.strip() for h in hosts if h.strip()),
            MERCATO_DAILY_RANKING_REQUEST_DELAY_SECONDS="0",
        )

    # The example provider, with a credential generated once and kept in the data dir.
    credential = provider_credential(data_dir)
    provider_env["MERCATO_DAILY_RANKING_CREDENTIAL"] = credential
    provider_env["MERCATO_DATA_DIR"] = str(data_dir)
    provider_port = listen(
        "daily-ranking",
        lambda p: ["daily-ranking", "serve", "--host", HOST, "--port", str(p)],
        provider_env,
        "/health/ready",
    )
    provider_base = f"http://{HOST}:{provider_port}"

    # The platform and its worker run while the provider takes its first snapshots.
    port = listen(
        "serve",
        lambda p: ["serve", "--host", HOST, "--port", str(p)],
        env,
        "/health/ready",
        port=options.port,
    )
    url = f"http://{HOST}:{port}"
    announce(url)  # a second `mercato up` names this one by its URL
    supervisor.start("worker", ["worker"], env)

    charts = ("manga", "illust", "overall") if sample_base else ("manga",)
    say(f"waiting for the provider's first snapshot ({', '.join(charts)})")
    with snapshot_probe(data_dir, charts) as has_snapshots:
        wait(
            has_snapshots,
            "the first snapshot",
            timeout=SNAPSHOT_TIMEOUT_SAMPLE if sample_base else SNAPSHOT_TIMEOUT_UPSTREAM,
        )
    connect_provider(runtime, base_url=provider_base, credential=credential, say=say)
    api_key = seed_demo_caller(runtime, say=say)
    logins = demo_logins(runtime)
    runtime.db.engine.dispose()
    if stop.is_set():
        raise _Interrupted()

    return {
        "url": url,
        "apiKey": api_key,
        "serviceCode": SERVICE_CODE,
        "version": VERSION,
        "web": f"{url}/",
        "logins": logins,
        "signupPoints": runtime.settings.signup_points,
        "curl": curl_command(url, api_key),
        "provider": provider_base,
        "sampleUpstream": sample_base,
        "dataDir": str(data_dir),
        "pids": {child.name: child.pid for child in supervisor.children},
    }


def _human_summary(ready: dict[str, Any]) -> str:
    url = ready["url"]
    logins = [
        f"  {role:<14} {login['email']}   password {login['password']}"
        for role, login in ready["logins"].items()
    ]
    return "\n".join(
        [
            "",
            "Mercato is up.",
            f"  platform API   {url}/v1/",
            f"  MCP (agents)   {url}/mcp   (docs/agents.md)",
            f"  web            {ready['web']}",
            f"  catalog entry  {url}/v1/catalog/listings/{SERVICE_CODE}",
            f"  service        {ready['serviceCode']} {ready['version']} (10 points a call)",
            f"  demo account   {DEMO_EMAIL}",
            f"  API key        {ready['apiKey']}   (shown once; a new one on every run)",
            "",
            f"Log in on the web at {url}/login (new passwords on every run):",
            *logins,
            f"  (a new account made at {url}/signup gets {ready['signupPoints']} points)",
            "",
            "Invoke it (paste into bash):",
            "",
            ready["curl"],
            "",
            "Press Ctrl-C to stop every process.",
        ]
    )
