"""The OpenAPI document of the caller API (`/v1` only) and its offline interactive docs.

The routes are written by several domains and mostly return hand-built JSON, so FastAPI alone
would describe them wrongly (422 `HTTPValidationError` for what is really a 400 problem, empty
response schemas). This module overlays what each operation actually answers (decision 0150):
`OPERATIONS` names, per (method, path), the success answers with their schemas and the problem
codes the route can raise; statuses are taken from the error classes themselves. A test fails
when a `/v1` route has no entry here, and another when the served document drifts from the
checked-in `docs/openapi.json`. Regenerate it with:

    python -m mercato.web.openapi > docs/openapi.json
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles

from mercato.accounts import errors as accounts_errors
from mercato.artifacts import errors as artifacts_errors
from mercato.cases import errors as cases_errors
from mercato.catalog import errors as catalog_errors
from mercato.catalog.schemas import ContractDocument, ListingDocument, ListingPage, VersionDocument
from mercato.core.errors import MercatoError
from mercato.invocations import errors as invocations_errors
from mercato.ledger import errors as ledger_errors
from mercato.providers import errors as providers_errors
from mercato.quotas import errors as quotas_errors

OPENAPI_PATH = "/v1/openapi.json"
DOCS_PATH = "/v1/docs"
DOCS_ASSETS = "/v1/docs/assets"
TITLE = "Mercato caller API"
VERSION = "1.0.0"
PROBLEM_MEDIA_TYPE = "application/problem+json"

_ERROR_MODULES = (
    accounts_errors,
    artifacts_errors,
    cases_errors,
    catalog_errors,
    invocations_errors,
    ledger_errors,
    providers_errors,
    quotas_errors,
)
"""Every domain's errors: each MercatoError subclass the platform can raise is defined here."""
_ADDITIONAL_CODES = {
    # Rendered by web.problems from framework exceptions, not from a MercatoError class.
    "INVALID_REQUEST": 400,
}


# --- shapes ------------------------------------------------------------------------------


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ProblemDocument(_Open):
    """RFC 9457 problem details; members beyond these depend on the code."""

    type: str = Field(description="A URI naming the problem type.")
    title: str
    status: int
    code: str = Field(description="Stable upper-snake error code; branch on this.")
    message: str = Field(description="Human-readable explanation of this occurrence.")


class RateLimitProblem(ProblemDocument):
    """The 429 body of spec 2.7 (a problem document with the quota's members)."""

    policy: str = Field(description="Current policy name.")
    limit: int = Field(description="Calls allowed per window.")
    windowSeconds: int = Field(description="Window length.")
    retryAfter: int = Field(description="Suggested wait in seconds; equals Retry-After.")


class TokenPair(BaseModel):
    accessToken: str
    refreshToken: str
    expiresIn: int
    tokenType: str = Field(examples=["Bearer"])


class Me(BaseModel):
    accountId: str
    email: str
    isStaff: bool
    channel: str = Field(description="SESSION (an API key cannot read /v1/me)")


class CreatedApiKey(BaseModel):
    apiKey: str = Field(description="The plaintext key; shown once, only its digest is kept.")
    keyId: str
    name: str
    createdAt: str | None


class ApiKeySummary(BaseModel):
    keyId: str
    name: str
    createdAt: str | None
    lastUsedAt: str | None
    revokedAt: str | None


class ApiKeyList(BaseModel):
    items: list[ApiKeySummary]


class RevokedApiKey(BaseModel):
    keyId: str
    revokedAt: str | None


class Balance(BaseModel):
    available: int
    reserved: int


class RateLimitStatus(BaseModel):
    """Spec 2.6."""

    policy: str
    limit: int
    windowSeconds: int
    accepted: int
    remaining: int
    resetAt: str


class ArtifactEntry(_Open):
    """One manifest entry (spec 2.9): an identifier and a content digest, and more."""

    artifactId: str
    digest: str


class InvokeSuccess(BaseModel):
    """200: the settled result; `artifacts` is present when the version has an artifact
    contract. Replays with the same Idempotency-Key get the same body."""

    invocationId: str
    result: dict[str, Any] | None
    artifacts: list[ArtifactEntry] | None = None


class InvokePending(BaseModel):
    """202: accepted, outcome not yet known; follow `receipt` (also the Location header)."""

    invocationId: str
    status: str = Field(examples=["PENDING"])
    settlement: str
    receipt: str


class Resolution(BaseModel):
    """A staff resolution of a stuck call: settled (SUCCEEDED) or released (FAILED)."""

    decision: str = Field(description="SUCCEEDED or FAILED")
    reason: str
    resolvedAt: str | None


class Receipt(BaseModel):
    """Spec 2.8 / DESIGN §3: never the provider, the split or the parties' identities."""

    invocationId: str
    serviceCode: str
    version: str
    contractDigest: str
    status: str = Field(description="PENDING, SUCCEEDED or FAILED")
    settlement: str = Field(description="PENDING, SETTLED, RELEASED or REFUNDED")
    listedPrice: int
    actualSpend: int | None = Field(description="null while settlement is pending")
    createdAt: str | None
    settledAt: str | None
    refundedAt: str | None
    errorCode: str | None
    artifacts: list[ArtifactEntry]
    idempotencyKey: str
    channel: str
    resolution: Resolution | None = Field(
        description="Staff's decision on a call whose outcome stayed unknown, else null"
    )


class ReceiptPage(BaseModel):
    items: list[Receipt]
    nextCursor: str | None


class CaseDocument(_Open):
    """A dispute (invocationId, reason, refund) or a content report (serviceCode, version,
    category, text); staff also see who submitted and decided."""

    caseId: str
    kind: str
    state: str
    idempotencyKey: str
    createdAt: str | None
    updatedAt: str | None
    decision: dict[str, Any] | None


class CasePage(BaseModel):
    items: list[CaseDocument]
    nextCursor: str | None


class InvokeBody(_Open):
    """The payload: a non-empty JSON object matching the version's requestSchema."""


# --- what each operation answers ---------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    description: str
    model: type[BaseModel] | None = None
    media_type: str = "application/json"
    headers: tuple[str, ...] = ()
    binary: bool = False


@dataclass(frozen=True)
class Operation:
    answers: tuple[Answer, ...]
    errors: tuple[str, ...]
    request_model: type[BaseModel] | None = None
    request_description: str = ""
    idempotency_key: bool = False
    problem_headers: dict[int, tuple[str, ...]] = field(default_factory=dict)


AUTH = ("UNAUTHENTICATED",)
SESSION = ("UNAUTHENTICATED", "SESSION_REQUIRED")
STAFF = ("UNAUTHENTICATED", "SESSION_REQUIRED", "STAFF_REQUIRED")
BAD = ("INVALID_REQUEST",)
TOO_LARGE = ("REQUEST_TOO_LARGE",)  # bodies over the edge's cap (web/limits.py, decision 0180)
# Every request passes web/edge.py first: U+0000 in a header, query or body is a 400, in a path
# segment a 404 (decision 0215); two Authorization headers are a 400 (decision 0216).
EDGE = ("INVALID_TEXT", "AMBIGUOUS_CREDENTIALS")
_CACHED = ("ETag", "Cache-Control")
_NOT_MODIFIED = Answer(304, "Not modified (If-None-Match matched the ETag).", headers=_CACHED)
_QUOTA_HEADERS = ("RateLimit-Policy", "RateLimit")


def _catalog_doc(model: type[BaseModel], what: str) -> Operation:
    return Operation(
        answers=(Answer(200, what, model, headers=_CACHED), _NOT_MODIFIED),
        errors=(*BAD, "LISTING_NOT_FOUND", "VERSION_NOT_FOUND"),
    )


_LISTINGS = Operation(
    answers=(Answer(200, "One page of public listings, filtered by `q` when given.", ListingPage),),
    errors=(*BAD, "INVALID_CURSOR", "INVALID_SEARCH"),
)
_LISTING = Operation(
    answers=(Answer(200, "The listing and its public versions.", ListingDocument),),
    errors=(*BAD, "LISTING_NOT_FOUND"),
)
_VERSION = _catalog_doc(VersionDocument, "The exact published version.")
_CONTRACT = _catalog_doc(ContractDocument, "The version's contract (spec 2.2).")
_CASE_SUBMIT_ERRORS = (
    *BAD,
    *TOO_LARGE,
    *SESSION,
    "IDEMPOTENCY_KEY_MISSING",
    "IDEMPOTENCY_KEY_INVALID",
    "INVALID_CASE_INPUT",
    "IDEMPOTENCY_KEY_REUSED",
)

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("post", "/v1/auth/login"): Operation(
        answers=(Answer(200, "A new session.", TokenPair),),
        errors=(*BAD, *TOO_LARGE, "INVALID_CREDENTIALS", "LOGIN_THROTTLED"),
        problem_headers={429: ("Retry-After",)},
    ),
    ("post", "/v1/auth/refresh"): Operation(
        answers=(Answer(200, "The rotated token pair.", TokenPair),),
        errors=(*BAD, *TOO_LARGE, "INVALID_REFRESH_TOKEN"),
    ),
    ("post", "/v1/auth/logout"): Operation(
        answers=(Answer(204, "The session family is revoked."),),
        errors=(*BAD, *TOO_LARGE, *SESSION, "INVALID_REFRESH_TOKEN"),
    ),
    ("get", "/v1/me"): Operation(
        answers=(Answer(200, "The session's account (API keys get 403).", Me),), errors=SESSION
    ),
    ("get", "/v1/api-keys"): Operation(
        answers=(Answer(200, "The account's API keys (never the plaintext).", ApiKeyList),),
        errors=SESSION,
    ),
    ("post", "/v1/api-keys"): Operation(
        answers=(Answer(201, "The new key; the plaintext is shown only now.", CreatedApiKey),),
        errors=(*BAD, *TOO_LARGE, *SESSION, "INVALID_API_KEY_NAME"),
    ),
    ("post", "/v1/api-keys/{key_id}:revoke"): Operation(
        answers=(Answer(200, "The key is revoked (idempotent).", RevokedApiKey),),
        errors=(*SESSION, "API_KEY_NOT_FOUND"),
    ),
    ("get", "/v1/catalog/listings"): _LISTINGS,
    ("get", "/v1/catalog/listings/{service_code}"): _LISTING,
    ("get", "/v1/catalog/listings/{service_code}/versions/{version}"): _VERSION,
    ("get", "/v1/catalog/listings/{service_code}/versions/{version}/contract"): _CONTRACT,
    ("get", "/v1/catalog/services"): _LISTINGS,
    ("get", "/v1/catalog/services/{service_code}"): _LISTING,
    ("get", "/v1/catalog/services/{service_code}/versions/{version}"): _VERSION,
    ("get", "/v1/catalog/services/{service_code}/versions/{version}/contract"): _CONTRACT,
    ("post", "/v1/services/{service_code}/versions/{version}:invoke"): Operation(
        answers=(
            Answer(200, "Succeeded and settled.", InvokeSuccess, headers=_QUOTA_HEADERS),
            Answer(
                202,
                "Accepted; the outcome is pending. Follow the receipt.",
                InvokePending,
                headers=("Location", *_QUOTA_HEADERS),
            ),
        ),
        errors=(
            *AUTH,
            "IDEMPOTENCY_KEY_MISSING",
            "IDEMPOTENCY_KEY_INVALID",
            "INSUFFICIENT_POINTS",
            "LISTING_UNAVAILABLE",
            "VERSION_NOT_FOUND",
            "IDEMPOTENCY_KEY_IN_USE",
            "REQUEST_TOO_LARGE",
            "IDEMPOTENCY_KEY_REUSED",
            "REQUEST_SCHEMA_VIOLATION",
            "PROVIDER_DEFINED_FAILURE",
            "RATE_LIMIT_EXCEEDED",
            "PROVIDER_CONTRACT_VIOLATION",
            "PROVIDER_UNAVAILABLE",
            "PROVIDER_NOT_APPROVED",
        ),
        request_model=InvokeBody,
        request_description="Send with an `Idempotency-Key` header; reuse it on every retry.",
        idempotency_key=True,
        problem_headers={409: ("Retry-After",), 429: ("Retry-After", *_QUOTA_HEADERS)},
    ),
    ("get", "/v1/invocations"): Operation(
        answers=(Answer(200, "The caller's receipts, newest first.", ReceiptPage),),
        errors=(*BAD, *AUTH, "INVALID_CURSOR", "INVALID_QUERY"),
    ),
    ("get", "/v1/invocations/{invocation_id}"): Operation(
        answers=(Answer(200, "The receipt.", Receipt),),
        errors=(*AUTH, "INVOCATION_NOT_FOUND"),
    ),
    ("get", "/v1/invocations/{invocation_id}/artifacts/{artifact_id}"): Operation(
        answers=(
            Answer(
                200,
                "The whole artifact, re-verified against its digest; `Content-Disposition` names "
                "it `<artifactId>.<extension>` from its media type (decision 0232).",
                media_type="application/octet-stream",
                headers=("ETag", "Content-Disposition"),
                binary=True,
            ),
        ),
        errors=(
            *AUTH,
            "INVOCATION_NOT_FOUND",
            "ARTIFACT_NOT_FOUND",
            "INVOCATION_NOT_SETTLED",
            "RANGE_NOT_SUPPORTED",
            "ARTIFACT_CORRUPTED",
            "ARTIFACT_NOT_READY",
        ),
        problem_headers={503: ("Retry-After",)},
    ),
    ("get", "/v1/balance"): Operation(
        answers=(Answer(200, "The caller's points.", Balance),), errors=AUTH
    ),
    ("get", "/v1/rate-limit"): Operation(
        answers=(
            Answer(200, "The current quota window.", RateLimitStatus, headers=_QUOTA_HEADERS),
        ),
        errors=AUTH,
    ),
    ("post", "/v1/disputes"): Operation(
        answers=(
            Answer(201, "The dispute was opened.", CaseDocument),
            Answer(200, "A replay: the dispute opened earlier with this key.", CaseDocument),
        ),
        errors=(
            *_CASE_SUBMIT_ERRORS,
            "INVOCATION_NOT_FOUND",
            "DISPUTE_NOT_ELIGIBLE",
            "DISPUTE_ALREADY_OPEN",
        ),
        idempotency_key=True,
    ),
    ("post", "/v1/content-reports"): Operation(
        answers=(
            Answer(201, "The report was filed.", CaseDocument),
            Answer(200, "A replay: the report filed earlier with this key.", CaseDocument),
        ),
        errors=(*_CASE_SUBMIT_ERRORS, "LISTING_NOT_FOUND", "VERSION_NOT_FOUND"),
        idempotency_key=True,
    ),
    ("get", "/v1/cases"): Operation(
        answers=(Answer(200, "The caller's cases (staff: all), newest first.", CasePage),),
        errors=(*BAD, *SESSION, "INVALID_CURSOR", "INVALID_CASE_INPUT"),
    ),
    ("get", "/v1/cases/{case_id}"): Operation(
        answers=(Answer(200, "The case.", CaseDocument),),
        errors=(*SESSION, "CASE_NOT_FOUND"),
    ),
    ("post", "/v1/cases/{case_id}:decide"): Operation(
        answers=(Answer(200, "The decided case.", CaseDocument),),
        errors=(
            *BAD,
            *TOO_LARGE,
            *STAFF,
            "INVALID_CASE_INPUT",
            "CASE_NOT_FOUND",
            "INVALID_CASE_TRANSITION",
        ),
    ),
}


# --- building the document ---------------------------------------------------------------


def error_statuses() -> dict[str, int]:
    """Every problem code the platform can answer, with its HTTP status."""
    found: dict[str, int] = dict(_ADDITIONAL_CODES)
    stack: list[type[MercatoError]] = [MercatoError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.code, cls.status)
        stack.extend(cls.__subclasses__())
    return found


def _schemas_of(models: list[type[BaseModel]]) -> dict[str, Any]:
    from pydantic.json_schema import models_json_schema

    _, top = models_json_schema(
        [(m, "serialization") for m in models],
        by_alias=True,
        ref_template="#/components/schemas/{model}",
    )
    return dict(top.get("$defs", {}))


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _headers(names: tuple[str, ...]) -> dict[str, Any]:
    return {name: {"schema": {"type": "string"}} for name in names}


def _overlay(operation: dict[str, Any], spec: Operation, statuses: dict[str, int]) -> None:
    responses: dict[str, Any] = {}
    for answer in spec.answers:
        entry: dict[str, Any] = {"description": answer.description}
        if answer.model is not None:
            entry["content"] = {answer.media_type: {"schema": _ref(answer.model)}}
        elif answer.binary:
            entry["content"] = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
        if answer.headers:
            entry["headers"] = _headers(answer.headers)
        responses[str(answer.status)] = entry
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys((*spec.errors, *EDGE)):
        by_status.setdefault(statuses[code], []).append(code)
    if any(p.get("in") == "path" for p in operation.get("parameters", [])):
        by_status.setdefault(404, []).append("INVALID_TEXT")
    for status in sorted(by_status):
        codes = by_status[status]
        model = RateLimitProblem if "RATE_LIMIT_EXCEEDED" in codes else ProblemDocument
        entry = {
            "description": "Problem codes: " + ", ".join(f"`{c}`" for c in codes) + ".",
            "content": {PROBLEM_MEDIA_TYPE: {"schema": _ref(model)}},
        }
        headers = spec.problem_headers.get(status, ())
        if status == 401:
            headers = ("WWW-Authenticate", *headers)
        if headers:
            entry["headers"] = _headers(headers)
        responses[str(status)] = entry
    operation["responses"] = responses
    if spec.request_model is not None:
        operation["requestBody"] = {
            "required": True,
            "description": spec.request_description,
            "content": {"application/json": {"schema": _ref(spec.request_model)}},
        }
    if spec.idempotency_key:
        parameters = operation.setdefault("parameters", [])
        parameters.append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": True,
                "schema": {"type": "string", "minLength": 1, "maxLength": 191},
            }
        )
    needs_auth = any(code in spec.errors for code in ("UNAUTHENTICATED",))
    if needs_auth:
        operation["security"] = [{"bearer": []}]


def _referenced(node: Any, into: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            into.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            _referenced(value, into)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, into)


def _prune(schemas: dict[str, Any], roots: Any) -> dict[str, Any]:
    """Only the component schemas reachable from `roots`, sorted by name."""
    keep: set[str] = set()
    _referenced(roots, keep)
    pending = list(keep)
    while pending:
        found: set[str] = set()
        _referenced(schemas.get(pending.pop(), {}), found)
        for name in found - keep:
            keep.add(name)
            pending.append(name)
    return {name: schemas[name] for name in sorted(keep) if name in schemas}


class MissingDeclaration(LookupError):
    """A `/v1` route has no entry in OPERATIONS: declare what it answers."""


def build_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of `app`'s `/v1` routes, with the declared answers overlaid."""
    generated = get_openapi(title=TITLE, version=VERSION, routes=app.routes)
    statuses = error_statuses()
    paths: dict[str, Any] = {}
    for path in sorted(generated.get("paths", {})):
        if not path.startswith("/v1/") or path in (OPENAPI_PATH, DOCS_PATH):
            continue
        operations = copy.deepcopy(generated["paths"][path])
        for method, operation in operations.items():
            spec = OPERATIONS.get((method, path))
            if spec is None:
                raise MissingDeclaration(f"{method.upper()} {path} is not in OPERATIONS")
            _overlay(operation, spec, statuses)
        paths[path] = operations
    generated_schemas = generated.get("components", {}).get("schemas", {})
    own = _schemas_of(
        [
            ProblemDocument,
            RateLimitProblem,
            *{a.model for s in OPERATIONS.values() for a in s.answers if a.model is not None},
            *{s.request_model for s in OPERATIONS.values() if s.request_model is not None},
        ]
    )
    schemas = {**generated_schemas, **own}
    return {
        "openapi": generated.get("openapi", "3.1.0"),
        "info": {
            "title": TITLE,
            "version": VERSION,
            "description": (
                "The caller-facing API of the Mercato marketplace. Errors are RFC 9457 problem "
                "documents (`application/problem+json`) with a stable `code`."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": _prune(schemas, paths),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key (`mercato_live_…`) or a session access token.",
                }
            },
        },
    }


def document_bytes(app: FastAPI) -> bytes:
    """The document as stable, pretty JSON (what docs/openapi.json holds)."""
    return (
        orjson.dumps(build_document(app), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )


# --- serving -----------------------------------------------------------------------------


def _assets_dir() -> Path | None:
    """Swagger UI 5's files, from the `swagger-ui-py` package (located, not imported)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        return None
    static = Path(next(iter(spec.submodule_search_locations))) / "static"
    return static if (static / "swagger-ui-bundle.js").is_file() else None


_DOCS_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Mercato caller API</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="{assets}/swagger-ui-standalone-preset.js"></script>
<script src="{assets}/docs-init.js"></script>
</body>
</html>
"""

# Swagger UI sets inline styles; everything else comes from this origin.
_DOCS_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"

_INIT_JS = (
    """window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "__OPENAPI_URL__",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    layout: "StandaloneLayout"
  });
};
"""
).replace("__OPENAPI_URL__", OPENAPI_PATH)


def install(app: FastAPI) -> None:
    """Serve `/v1/openapi.json` and `/v1/docs` (assets from the local Swagger UI package), and
    drop FastAPI's own `/openapi.json`, which would describe the pages too."""
    app.router.routes[:] = [
        r for r in app.router.routes if getattr(r, "path", None) != app.openapi_url
    ]
    router = APIRouter(include_in_schema=False)
    cache: dict[str, bytes] = {}

    @router.get(OPENAPI_PATH)
    def openapi_json(request: Request) -> Response:
        if "doc" not in cache:
            cache["doc"] = document_bytes(request.app)
        return Response(cache["doc"], media_type="application/json")

    @router.get(DOCS_PATH)
    def docs() -> HTMLResponse:
        return HTMLResponse(
            _DOCS_HTML.format(assets=DOCS_ASSETS),
            headers={"Content-Security-Policy": _DOCS_CSP},
        )

    @router.get(DOCS_ASSETS + "/docs-init.js")
    def docs_init() -> Response:
        return Response(_INIT_JS, media_type="application/javascript")

    app.include_router(router)
    assets = _assets_dir()
    if assets is not None:
        app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs-assets")
    else:  # pragma: no cover - the package is a dependency

        @app.get(DOCS_ASSETS + "/{name}", include_in_schema=False)
        def no_assets(name: str) -> JSONResponse:
            return JSONResponse({"detail": "swagger-ui-py is not installed"}, 404)


def main() -> int:
    """Print the document of an app built on a throwaway dev runtime (no database is opened)."""
    from mercato.db.runtime import Runtime
    from mercato.settings import Settings
    from mercato.web.app import create_app

    settings = Settings(env="dev", database_url="sqlite://")
    app = create_app(Runtime.from_settings(settings))
    sys.stdout.buffer.write(document_bytes(app))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
