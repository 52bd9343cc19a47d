"""`mercato provider init|check|push`: provider tooling (DESIGN §10).

`check` runs the nine conformance checks against any URL before it is registered (loopback
allowed: it is the developer's own machine); `push` logs in with MERCATO_EMAIL and
MERCATO_PASSWORD and creates or updates a draft through the provider API, then submits it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from mercato.catalog.contracts import parse_version_label
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, BadArgument, emit, whole_number
from mercato.cli.provider_project import project_files
from mercato.conformance.advice import fix_for
from mercato.conformance.runner import run_conformance
from mercato.core.errors import ValidationFailed
from mercato.dispatch.client import ProviderClient
from mercato.providers.addresses import check_base_url
from mercato.providers.schemas import DispatchTarget
from mercato.settings import CallerSettings, Settings

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_CONTRACT_BYTES = 1024 * 1024
MAX_PRICE = 1_000_000_000


def register(top: Any, _admin: Any) -> None:
    provider = top.add_parser("provider", help="provider tooling: init, check, push")
    commands = provider.add_subparsers(dest="provider_command", required=True)

    init = commands.add_parser("init", help="write a working provider project into DIR")
    init.add_argument("directory", metavar="DIR")
    init.set_defaults(handler=cmd_init)

    check = commands.add_parser("check", help="run the nine conformance checks against URL")
    check.add_argument("url", metavar="URL")
    check.add_argument("--credential", required=True, help="the provider's credential")
    check.add_argument("--json", action="store_true")
    check.set_defaults(handler=cmd_check)

    push = commands.add_parser("push", help="create or update a draft and submit it for review")
    push.add_argument("--contract", required=True, metavar="FILE")
    push.add_argument("--service-code", required=True)
    push.add_argument("--version", required=True, metavar="vN")
    push.add_argument("--price", required=True, type=whole_number(1, MAX_PRICE))
    push.add_argument("--connection", required=True, metavar="ID")
    push.add_argument("--display-name", help="used only when the listing does not exist yet")
    push.add_argument("--url", help=f"platform URL (env MERCATO_URL, default {DEFAULT_URL})")
    push.add_argument("--json", action="store_true")
    push.set_defaults(handler=cmd_push)


# --- init --------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadArgument("DIR", f"{directory} exists and is not an empty directory")
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in project_files().items():
        (directory / name).write_text(content, encoding="utf-8")
    print(f"wrote a provider project to {directory}: " + ", ".join(project_files()))
    print(f"next: cd {directory} && pytest test_provider.py")
    return EXIT_OK


# --- check -------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    url = args.url.strip().rstrip("/")
    reason = check_base_url(url, allow_private=True)
    if reason is not None:
        raise BadArgument("URL", f"not an http(s) base URL ({reason})")
    credential = args.credential
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
        as_json=args.json,
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
    path = Path(path_text)
    try:
        if not path.is_file():
            raise BadArgument("--contract", f"{path_text} is not a readable file")
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONTRACT_BYTES + 1)
    except OSError as exc:
        raise BadArgument("--contract", f"{path_text} cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_CONTRACT_BYTES:
        raise BadArgument("--contract", f"{path_text} is over {MAX_CONTRACT_BYTES} bytes")
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadArgument("--contract", f"{path_text} is not JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise BadArgument("--contract", f"{path_text} must hold a JSON object")
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


def _push(http: httpx.Client, args: argparse.Namespace, contract: dict[str, Any]) -> Any:
    headers = _login(http)
    code = args.service_code
    listing = http.get(f"/v1/provider/listings/{code}/versions", headers=headers)
    if listing.status_code == 404:
        created = http.post(
            "/v1/provider/listings",
            json={"serviceCode": code, "displayName": args.display_name or code},
            headers=headers,
        )
        listing = created
    found = _expect("read the listing", listing, 200, 201)
    existing = [v for v in found["versions"] if v["version"] == args.version]
    body = {"connectionId": args.connection, "price": args.price, "contract": contract}
    if existing:
        version_id = existing[0]["versionId"]
        changed = http.put(f"/v1/provider/versions/{version_id}", json=body, headers=headers)
        draft = _expect("update the draft", changed, 200)
    else:
        made = http.post(
            f"/v1/provider/listings/{code}/versions",
            json={"version": args.version, **body},
            headers=headers,
        )
        draft = _expect("create the draft", made, 201)
    if draft["state"] in ("SUBMITTED", "APPROVED", "PUBLISHED"):
        return draft  # nothing changed since it was submitted (or it is published already)
    submitted = http.post(f"/v1/provider/versions/{draft['versionId']}:submit", headers=headers)
    return _expect("submit the draft", submitted, 200)


def cmd_push(args: argparse.Namespace) -> int:
    try:
        parse_version_label(args.version)
    except ValidationFailed as exc:
        raise BadArgument("--version", exc.message) from None
    contract = _contract(args.contract)
    url = str(args.url or CallerSettings().url or DEFAULT_URL).rstrip("/")
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            version = _push(http, args, contract)
    except httpx.HTTPError as exc:
        sys.stderr.write(f"error: cannot reach {url}: {' '.join(str(exc).split())}\n")
        return EXIT_FAILURE
    except _Refused as refused:
        sys.stderr.write(_refusal_text(refused) + "\n")
        return EXIT_FAILURE
    summary = {
        "versionId": version["versionId"],
        "serviceCode": version["serviceCode"],
        "version": version["version"],
        "state": version["state"],
        "submittedRunId": version["submittedRunId"],
    }
    text = "{serviceCode} {version} is {state} ({versionId})".format(**summary)
    emit(summary, as_json=args.json, text=text)
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
