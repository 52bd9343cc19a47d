"""`mercato provider init|check|push`: provider tooling (DESIGN §10).

`check` runs the nine conformance checks against any URL before it is registered (loopback
allowed: it is the developer's own machine); `push` logs in with MERCATO_EMAIL and
MERCATO_PASSWORD and creates or updates a draft through the provider API, then submits it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import httpx

from mercato.catalog.contract_schema import SCHEMA_MEMBERS
from mercato.catalog.contracts import parse_version_label
from mercato.cli.framework import MercatoCommand, MercatoGroup, WholeNumber, json_option
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, BadArgument, emit
from mercato.cli.provider_project import project_files
from mercato.conformance.advice import fix_for
from mercato.conformance.runner import run_conformance
from mercato.core.errors import ValidationFailed
from mercato.core.schema_engine import pattern_problems
from mercato.dispatch.client import ProviderClient
from mercato.providers.addresses import check_base_url
from mercato.providers.schemas import DispatchTarget
from mercato.settings import CallerSettings, Settings

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_CONTRACT_BYTES = 1024 * 1024
MAX_PRICE = 1_000_000_000
MAX_DESCRIPTION_CHARS = 10_000  # the provider API's limit (ListingBody.description)


def register(top: click.Group, _admin: click.Group) -> None:
    top.add_command(provider)


@click.group("provider", cls=MercatoGroup, help="provider tooling: init, check, push")
def provider() -> None:
    """Provider tooling: init, check, push."""


# --- init --------------------------------------------------------------------------------


@provider.command("init", cls=MercatoCommand, help="write a working provider project into DIR")
@click.argument("path", metavar="DIR")
def cmd_init(path: str) -> int:
    directory = Path(path)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadArgument("DIR", f"{directory} exists and is not an empty directory")
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in project_files().items():
        (directory / name).write_text(content, encoding="utf-8")
    print(f"wrote a provider project to {directory}: " + ", ".join(project_files()))
    print(f"next: cd {directory} && pytest test_provider.py")
    return EXIT_OK


# --- check -------------------------------------------------------------------------------


@provider.command("check", cls=MercatoCommand, help="run the nine conformance checks against URL")
@click.argument("url", metavar="URL")
@click.option("--credential", required=True, help="the provider's credential")
@json_option()
def cmd_check(url: str, credential: str, as_json: bool) -> int:
    url = url.strip().rstrip("/")
    reason = check_base_url(url, allow_private=True)
    if reason is not None:
        raise BadArgument("URL", f"not an http(s) base URL ({reason})")
    if not credential or not all("!" <= c <= "~" for c in credential):
        raise BadArgument("--credential", "must be visible ASCII characters without spaces")
    settings = Settings(env="dev", allow_private_provider_addresses=True)
    target = DispatchTarget(
        connection_id="local-check", base_url=url, credential=credential, approved=False
    )
    with ProviderClient(settings) as client:
        report = run_conformance(client, target)
    checks = [
        {**check.to_json(), "fix": fix_for(check.name, check.status)} for check in report.checks
    ]
    emit(
        {"passed": report.passed, "checks": checks},
        as_json=as_json,
        text=_check_text(report.passed, checks),
    )
    return EXIT_OK if report.passed else EXIT_FAILURE


def _check_text(passed: bool, checks: list[dict[str, Any]]) -> str:
    lines = []
    for number, check in enumerate(checks, start=1):
        evidence = json.dumps(check["detail"], sort_keys=True)
        lines.append(f"{number}. {check['name']}: {check['status']}  {evidence}")
        if check["fix"]:
            lines.append(f"   fix: {check['fix']}")
    count = sum(c["status"] == "passed" for c in checks)
    lines.append(f"{count}/9 passed" + ("" if passed else ": not conformant yet"))
    return "\n".join(lines)


# --- push --------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, step: str, response: httpx.Response) -> None:
        super().__init__(step)
        self.step, self.response = step, response


def _contract(path_text: str) -> dict[str, Any]:
    if not Path(path_text).is_file():
        raise BadArgument("--contract", f"{path_text} is not a readable file")
    loaded = _json_file("--contract", path_text)
    if not isinstance(loaded, dict):
        raise BadArgument("--contract", f"{path_text} must hold a JSON object")
    # A pattern RE2 refuses is refused here too, before anything is sent (decision 0515).
    refused = [e for name in SCHEMA_MEMBERS for e in pattern_problems(loaded.get(name), (name,))]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise BadArgument("--contract", f"{path_text}: {first['pointer']} {first['detail']}{more}")
    return loaded


def _json_file(option: str, path_text: str) -> Any:
    """The JSON in the file `option` names, read up to `MAX_CONTRACT_BYTES` (exit 2 otherwise)."""
    try:
        with Path(path_text).open("rb") as handle:
            raw = handle.read(MAX_CONTRACT_BYTES + 1)
    except OSError as exc:
        raise BadArgument(option, f"{path_text} cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_CONTRACT_BYTES:
        raise BadArgument(option, f"{path_text} is over {MAX_CONTRACT_BYTES} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadArgument(option, f"{path_text} is not JSON ({exc})") from None


def _examples(path_text: str | None) -> list[Any] | None:
    """The `--examples` file: a JSON list of {"request", "result"} (the platform judges them)."""
    if path_text is None:
        return None
    loaded = _json_file("--examples", path_text)
    if not isinstance(loaded, list):
        raise BadArgument("--examples", f'{path_text} must hold a list of {{"request", "result"}}')
    return loaded


def _login(http: httpx.Client) -> dict[str, str]:
    configured = CallerSettings()
    email = configured.email
    password = configured.password.get_secret_value() if configured.password else ""
    if not email or not password:
        raise BadArgument(
            "MERCATO_EMAIL", "set MERCATO_EMAIL and MERCATO_PASSWORD to the provider's login"
        )
    answer = http.post("/v1/auth/login", json={"email": email, "password": password})
    if answer.status_code != 200:
        raise _Refused("log in", answer)
    return {"Authorization": f"Bearer {answer.json()['accessToken']}"}


def _expect(step: str, answer: httpx.Response, *statuses: int) -> dict[str, Any]:
    if answer.status_code not in statuses:
        raise _Refused(step, answer)
    body: dict[str, Any] = answer.json()
    return body


@dataclass(frozen=True)
class _Draft:
    service_code: str
    version: str
    price: int
    connection: str
    display_name: str | None
    description: str | None
    examples: list[Any] | None = None
    publisher: str | None = None


def _push(http: httpx.Client, wanted: _Draft, contract: dict[str, Any]) -> Any:
    headers = _login(http)
    code = wanted.service_code
    listing = http.get(f"/v1/provider/listings/{code}/versions", headers=headers)
    if listing.status_code == 404:
        created = http.post(
            "/v1/provider/listings",
            json={
                "serviceCode": code,
                "displayName": wanted.display_name or code,
                "description": wanted.description or "",
                "publisherName": wanted.publisher,
            },
            headers=headers,
        )
        listing = created
    found = _expect("read the listing", listing, 200, 201)
    _note_kept(found, wanted)
    # The platform folds a name's whitespace; compare the folded name, so a rerun sends nothing.
    name = None if wanted.publisher is None else " ".join(wanted.publisher.split()) or None
    if wanted.publisher is not None and found.get("publisherName") != name:
        named = http.put(
            f"/v1/provider/listings/{code}", json={"publisherName": name}, headers=headers
        )
        _expect("name the publisher", named, 200)
    existing = [v for v in found["versions"] if v["version"] == wanted.version]
    body: dict[str, Any] = {
        "connectionId": wanted.connection,
        "price": wanted.price,
        "contract": contract,
    }
    if wanted.examples is not None:
        body["examples"] = wanted.examples
    if existing:
        version_id = existing[0]["versionId"]
        changed = http.put(f"/v1/provider/versions/{version_id}", json=body, headers=headers)
        draft = _expect("update the draft", changed, 200)
    else:
        made = http.post(
            f"/v1/provider/listings/{code}/versions",
            json={"version": wanted.version, **body},
            headers=headers,
        )
        draft = _expect("create the draft", made, 201)
    if draft["state"] == "PUBLISHED":
        return draft
    submitted = http.post(f"/v1/provider/versions/{draft['versionId']}:submit", headers=headers)
    if draft["state"] in ("SUBMITTED", "APPROVED") and _code(submitted) == "VERSION_STATE_CONFLICT":
        return draft  # nothing changed since it was submitted (its connection neither: 0532)
    return _expect("submit the draft", submitted, 200)


def _note_kept(listing: dict[str, Any], wanted: _Draft) -> None:
    """Say so when the listing already existed with another name or description: they are set
    only when `push` creates it."""
    asked = {"--display-name": wanted.display_name, "--description": wanted.description}
    found = {"--display-name": listing["displayName"], "--description": listing["description"]}
    for flag, value in asked.items():
        if value is not None and value != found[flag]:
            sys.stderr.write(
                f"note: {listing['serviceCode']} already exists; {flag} applies only when push "
                "creates the listing, so it was not changed\n"
            )


def _code(answer: httpx.Response) -> str | None:
    """A problem document's `code` (None for any other answer)."""
    if answer.status_code < 400 or "json" not in answer.headers.get("content-type", ""):
        return None
    code = answer.json().get("code")
    return code if isinstance(code, str) else None


@provider.command(
    "push", cls=MercatoCommand, help="create or update a draft and submit it for review"
)
@click.option("--contract", required=True, metavar="FILE", type=click.Path())
@click.option("--service-code", required=True)
@click.option("--version", required=True, metavar="vN")
@click.option("--price", required=True, type=WholeNumber(1, MAX_PRICE))
@click.option("--connection", required=True, metavar="ID")
@click.option("--display-name", help="the listing's name, set when push creates it")
@click.option(
    "--description", help="what the service does, shown on the listing; set when push creates it"
)
@click.option("--publisher", help="the name callers see the listing published under")
@click.option(
    "--examples",
    metavar="FILE",
    help='JSON: [{"request", "result"}] shown on the listing, each matching the contract',
)
@click.option("--url", help=f"platform URL (env MERCATO_URL, default {DEFAULT_URL})")
@json_option()
def cmd_push(
    contract: str,
    service_code: str,
    version: str,
    price: int,
    connection: str,
    display_name: str | None,
    description: str | None,
    publisher: str | None,
    examples: str | None,
    url: str | None,
    as_json: bool,
) -> int:
    try:
        parse_version_label(version)
    except ValidationFailed as exc:
        raise BadArgument("--version", exc.message) from None
    document = _contract(contract)
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        raise BadArgument("--description", f"at most {MAX_DESCRIPTION_CHARS} characters")
    example_list = _examples(examples)
    draft = _Draft(
        service_code,
        version,
        price,
        connection,
        display_name,
        description,
        example_list,
        publisher,
    )
    base = str(url or CallerSettings().url or DEFAULT_URL).rstrip("/")
    try:
        with httpx.Client(base_url=base, timeout=120) as http:
            pushed = _push(http, draft, document)
    except httpx.HTTPError as exc:
        sys.stderr.write(f"error: cannot reach {base}: {' '.join(str(exc).split())}\n")
        return EXIT_FAILURE
    except _Refused as refused:
        sys.stderr.write(_refusal_text(refused) + "\n")
        return EXIT_FAILURE
    summary = {
        "versionId": pushed["versionId"],
        "serviceCode": pushed["serviceCode"],
        "version": pushed["version"],
        "state": pushed["state"],
        "submittedRunId": pushed["submittedRunId"],
    }
    text = "{serviceCode} {version} is {state} ({versionId})".format(**summary)
    emit(summary, as_json=as_json, text=text)
    return EXIT_OK


def _refusal_text(refused: _Refused) -> str:
    try:
        problem = refused.response.json()
    except ValueError:
        problem = {}
    code = problem.get("code", f"HTTP {refused.response.status_code}")
    message = " ".join(str(problem.get("message", refused.response.text[:200])).split())
    lines = [f"error: could not {refused.step}: {code}: {message}"]
    for error in problem.get("errors", []) if isinstance(problem.get("errors"), list) else []:
        if isinstance(error, dict):
            lines.append(f"  {error.get('pointer') or '/'}: {error.get('detail', '')}")
    return "\n".join(lines)
