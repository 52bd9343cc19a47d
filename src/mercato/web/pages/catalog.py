"""Catalog pages: browse and search, one listing with its contract, call it, report it."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from mercato.artifacts import flows as artifact_flows
from mercato.cases import flows as case_flows
from mercato.cases.schemas import Category
from mercato.catalog import search
from mercato.catalog import service as catalog
from mercato.catalog.errors import VersionNotFound
from mercato.catalog.models import Version
from mercato.catalog.schemas import ContractDocument
from mercato.core.errors import MercatoError
from mercato.core.logs import request_id_var
from mercato.invocations import flows as invoke_flows
from mercato.invocations import service as invocations
from mercato.invocations.errors import RequestSchemaViolation, RequestTooLarge
from mercato.providers import service as providers
from mercato.web.deps import runtime_of
from mercato.web.pages import callform
from mercato.web.pages.common import (
    Form,
    User,
    new_idempotency_key,
    redirect,
    render,
    text_of,
)

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50


@router.get("/")
def catalog_page(request: Request, q: str = "", cursor: str = "") -> Response:
    """Public listings, searched in the database with the API's rule (`catalog.search`)."""
    try:
        terms = search.search_terms(q)
        after = search.cursor_after(cursor, terms, check_code=catalog.check_service_code)
    except MercatoError as error:
        return render(
            request, "catalog.html", status=400, title="Catalog", items=[], q=q, error=error.message
        )
    with runtime_of(request).db.read() as session:
        page, more = catalog.public_listings(session, limit=PAGE_SIZE, after=after, terms=terms)
        items = [
            {
                "service_code": listing.service_code,
                "display_name": listing.display_name,
                "description": listing.description,
                "publisher": listing.publisher_name,
                "price": versions[-1].price if versions else None,
                "latest": versions[-1].label if versions else None,
                "versions": [(v.label, v.price) for v in versions],
            }
            for listing, versions in page
        ]
    next_cursor = search.next_cursor(page[-1][0].service_code, terms) if more and page else ""
    return render(
        request, "catalog.html", title="Catalog", items=items, q=q, next_cursor=next_cursor
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _from_shape(shape: dict[str, Any]) -> dict[str, Any]:
    """A guess from the human-readable request shape, e.g. "string: a | b" or "integer 1-9"."""
    example: dict[str, Any] = {}
    for name, hint in shape.items():
        if not isinstance(hint, str) or "optional" in hint:
            continue
        default = re.search(r"default (-?\d+)", hint)
        choices = re.match(r"string:\s*([^|,]+)", hint)
        if hint.startswith("integer"):
            example[name] = int(default.group(1)) if default else 1
        elif choices:
            example[name] = choices.group(1).strip()
    return example


def _skeleton(schema: dict[str, Any], shape: dict[str, Any]) -> str:
    """A starting request body for the call form, from the request schema's properties."""
    example: dict[str, Any] = {}
    for name, spec in (schema.get("properties") or {}).items():
        if not isinstance(spec, dict):
            continue
        if "default" in spec:
            example[name] = spec["default"]
        elif spec.get("enum"):
            example[name] = spec["enum"][0]
        elif spec.get("type") == "integer":
            example[name] = spec.get("minimum", 1)
        elif spec.get("type") == "string":
            example[name] = ""
    example = example or _from_shape(shape)
    return _pretty(example) if example else "{\n  \n}"


def _listing_context(request: Request, service_code: str, version: str | None) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        listing, versions = catalog.public_listing(session, service_code=service_code)
        if not versions:
            raise VersionNotFound(f"{service_code} has no published version.")
        chosen: Version = versions[-1]
        if version is not None:
            chosen = catalog.public_version(session, service_code=service_code, version=version)
        contract = ContractDocument.of(chosen)
        fields = callform.form_fields(contract.request_schema)
        return {
            "listing": {
                "service_code": listing.service_code,
                "display_name": listing.display_name,
                "description": listing.description,
                "publisher": listing.publisher_name,
            },
            "examples": [
                {"request": _pretty(e["request"]), "result": _pretty(e["result"])}
                for e in chosen.examples or []
            ],
            "versions": [
                {"label": v.label, "price": v.price, "published_at": v.published_at}
                for v in versions
            ],
            "version": {
                "label": chosen.label,
                "price": chosen.price,
                "published_at": chosen.published_at,
            },
            "contract": contract,
            "request_schema": _pretty(contract.request_schema),
            "result_schema": _pretty(contract.result_schema),
            "request_shape": _pretty(contract.request_shape),
            "skeleton": _skeleton(contract.request_schema, contract.request_shape),
            "fields": fields,
            "categories": [c.value for c in Category],
        }


def _call_context(
    request: Request, context: dict[str, Any], body: Any | None = None
) -> dict[str, Any]:
    """The form's keys and the same call as curl and Python, from `body` (else the defaults)."""
    fields = context["fields"]
    if body is None:
        body = callform.initial_body(fields) if fields else json.loads(context["skeleton"] or "{}")
    copy_key = new_idempotency_key()
    base = str(request.base_url).rstrip("/")
    code, label = context["listing"]["service_code"], context["version"]["label"]
    return {
        "call_key": new_idempotency_key(),
        "report_key": new_idempotency_key(),
        "copy_key": copy_key,
        "base_url": base,
        "curl": callform.curl_line(base, code, label, copy_key, body),
        "python": callform.client_code(base, code, label, body),
    }


@router.get("/listings/{service_code}")
def listing_page(request: Request, service_code: str, version: str | None = None) -> Response:
    context = _listing_context(request, service_code, version)
    name = context["listing"]["display_name"]
    return render(
        request,
        "listing.html",
        title=f"{name} {context['version']['label']}",
        mode="form" if context["fields"] else "json",
        **_call_context(request, context),
        **context,
    )


@router.post("/listings/{service_code}/versions/{version}/call")
async def call(
    request: Request, service_code: str, version: str, user: User, form: Form
) -> Response:
    """Invoke the exact version with the session, then show the receipt with its result.

    `mode=form` reads the body from the schema's fields; `mode=json` takes the JSON text as is.
    A refusal comes back on the page, each problem detail beside the field it names.

    The call itself is awaited on the event loop (the async flows, as the API's invoke); the
    page's own sync reads and the artifact pull (sync client) run in the thread pool."""
    runtime = runtime_of(request)
    context = await run_in_threadpool(_listing_context, request, service_code, version)
    fields: list[callform.FormField] | None = context["fields"]
    mode = "form" if text_of(form, "mode") == "form" and fields else "json"
    errors: dict[str, str] = {}
    field_values = {f.name: text_of(form, f.input_name) for f in fields or []}
    body_value: Any = None
    if mode == "form" and fields:
        body_value, errors = callform.read_form(fields, {k: text_of(form, k) for k in form})
        body = json.dumps(body_value, ensure_ascii=False, separators=(",", ":"))
    else:
        body = text_of(form, "body")
    if not errors:
        try:
            key = invocations.check_idempotency_key([text_of(form, "idempotency_key")])
            result = await invoke_flows.invoke(
                runtime,
                invoke_flows.InvokeRequest(
                    account_id=user.account_id,
                    channel="SESSION",
                    service_code=service_code,
                    version=version,
                    idempotency_key=key,
                    body=body.encode("utf-8"),
                    request_id=request_id_var.get(),
                ),
            )
        except RequestSchemaViolation as error:
            by_field, rest = callform.field_errors(
                list(error.extra.get("errors") or []), fields if mode == "form" else None
            )
            errors.update(by_field)
            errors["call" if mode == "form" else "body"] = "\n".join([error.message, *rest[:10]])
        except RequestTooLarge as error:
            errors["call" if mode == "form" else "body"] = error.message
        except MercatoError as error:
            errors["call"] = error.message
        else:
            view = result.view
            if view.state == "SUCCEEDED" and view.has_artifact_contract:
                await run_in_threadpool(
                    artifact_flows.ingest_invocation,
                    runtime,
                    runtime.provider_client(),
                    invocation_id=view.invocation_id,
                    resolve_target=providers.get_dispatch_target,
                )
            return redirect(request, f"/receipts/{view.invocation_id}")
    elif mode == "form":
        errors["call"] = "Some fields need a change before the call can be made."
    copied: Any = body_value
    if mode == "json":
        try:
            copied = json.loads(body)
        except ValueError:
            copied = None
    return render(
        request,
        "listing.html",
        status=400,
        title=f"{context['listing']['display_name']} {version}",
        errors=errors,
        mode=mode,
        field_values=field_values,
        values={"body": body} if mode == "json" else {},
        **_call_context(request, context, copied),
        **context,
    )


@router.post("/listings/{service_code}/report")
def report(request: Request, service_code: str, user: User, form: Form) -> Response:
    """A content report against the currently public exact publication."""
    version = text_of(form, "version")
    category, text = text_of(form, "category"), text_of(form, "text")
    errors: dict[str, str] = {}
    status = 400
    if category not in {c.value for c in Category}:
        errors["category"] = "Choose what is wrong."
    if not text.strip():
        errors["text"] = "Say what is wrong (1-2000 characters)."
    if not errors:
        try:
            submitted = case_flows.submit_report(
                runtime_of(request),
                account_id=user.account_id,
                idempotency_key=text_of(form, "idempotency_key"),
                service_code=service_code,
                version=version,
                category=category,
                text=text,
            )
        except MercatoError as error:
            errors["text"], status = error.message, error.status
        else:
            return redirect(request, f"/cases/{submitted.case.case_id}", notice="report-sent")
    context = _listing_context(request, service_code, version or None)
    return render(
        request,
        "listing.html",
        status=status,
        title=f"{context['listing']['display_name']} {context['version']['label']}",
        mode="form" if context["fields"] else "json",
        **_call_context(request, context),
        errors=errors,
        values={"category": category, "text": text},
        **context,
    )
