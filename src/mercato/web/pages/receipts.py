"""Receipts (list, detail, artifacts, open a dispute) and the account's cases."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from mercato.artifacts import flows as artifact_flows
from mercato.artifacts import service as artifacts
from mercato.artifacts.errors import InvocationNotSettled, RangeNotSupported
from mercato.artifacts.schemas import StoredArtifact
from mercato.cases import flows as case_flows
from mercato.cases import service as cases
from mercato.core.errors import MercatoError
from mercato.invocations import service as invocations
from mercato.invocations.schemas import public_status
from mercato.providers import service as providers
from mercato.web.api.invocations import provider_client
from mercato.web.deps import runtime_of
from mercato.web.downloads import attachment, extension_of
from mercato.web.pages.common import (
    Form,
    User,
    finish,
    new_idempotency_key,
    redirect,
    render,
    text_of,
)

router = APIRouter(include_in_schema=False)

RANKING_SERVICE = "pixiv.daily-ranking"
TREE_DEPTH = 24  # deeper values are shown as JSON text (results nest at most 64 levels)
TREE_OPEN_DEPTH = 2


@dataclass
class Node:
    """One value of the result tree: a scalar with its JSON text, or an object/array."""

    kind: str  # object | array | string | number | boolean | null | text
    text: str = ""
    children: list[tuple[str, Node]] = field(default_factory=list)


def result_tree(value: Any, depth: int = 0) -> Node:
    """The result as nested nodes for the collapsible, highlighted tree (decision 0235)."""
    if isinstance(value, dict | list) and depth >= TREE_DEPTH:
        return Node("text", json.dumps(value, ensure_ascii=False))
    if isinstance(value, dict):
        return Node(
            "object",
            children=[
                (json.dumps(str(k), ensure_ascii=False), result_tree(v, depth + 1))
                for k, v in value.items()
            ],
        )
    if isinstance(value, list):
        return Node(
            "array", children=[(str(i), result_tree(v, depth + 1)) for i, v in enumerate(value)]
        )
    if value is None:
        return Node("null", "null")
    if isinstance(value, bool):
        return Node("boolean", "true" if value else "false")
    if isinstance(value, int | float):
        return Node("number", json.dumps(value))
    return Node("string", json.dumps(value, ensure_ascii=False))


def _link(value: Any) -> str | None:
    """Only plain web addresses become links."""
    if isinstance(value, str) and value.startswith(("https://", "http://")) and len(value) < 2000:
        return value
    return None


def ranking_rows(result: Any, artifacts_by_digest: dict[str, str]) -> list[dict[str, Any]] | None:
    """`pixiv.daily-ranking`'s chart as table rows (thumbnail = the artifact with its digest)."""
    if not isinstance(result, dict) or not isinstance(result.get("entries"), list):
        return None
    rows = []
    for entry in result["entries"]:
        if not isinstance(entry, dict):
            return None
        digest = entry.get("thumbnailDigest")
        rows.append(
            {
                "rank": entry.get("rank"),
                "title": str(entry.get("title") or ""),
                "author": str(entry.get("author") or ""),
                "link": _link(entry.get("link")),
                "thumb": artifacts_by_digest.get(digest) if isinstance(digest, str) else None,
            }
        )
    return rows


@dataclass(frozen=True)
class ShownArtifact:
    """An artifact as the receipt shows it: inline when an image, else a named download."""

    stored: StoredArtifact
    url: str
    filename: str  # <artifactId>.<extension>, as the download's Content-Disposition says
    image: bool
    ready: bool


def artifact_url(invocation_id: str, artifact_id: str) -> str:
    return f"/receipts/{quote(invocation_id, safe='')}/artifacts/{quote(artifact_id, safe='')}"


@router.get("/receipts")
def receipts_page(request: Request, user: User, cursor: str | None = None) -> Response:
    with runtime_of(request).db.read() as session:
        page = invocations.list_for_owner(
            session, account_id=user.account_id, limit=50, cursor=cursor
        )
    items = [
        {"view": view, "status": public_status(view.state), "receipt": view.receipt()}
        for view in page.items
    ]
    return render(
        request, "receipts.html", title="Receipts", items=items, next_cursor=page.next_cursor
    )


def _receipt_context(request: Request, user_id: str, invocation_id: str) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        view = invocations.get_invocation_for_owner(
            session, account_id=user_id, invocation_id=invocation_id
        )
        stored = artifacts.list_for_invocation(session, invocation_id=invocation_id)
        disputes = [
            case
            for case in cases.list_cases(
                session, account_id=user_id, limit=100, kind="DISPUTE"
            ).items
            if case.invocation_id == invocation_id
        ]
    result = None
    tree = None
    ranking = None
    shown = [
        ShownArtifact(
            stored=a,
            url=artifact_url(invocation_id, a.entry.artifact_id),
            filename=f"{a.entry.artifact_id}.{extension_of(a.entry.media_type)}",
            image=a.entry.media_type.split(";", 1)[0].strip().lower().startswith("image/"),
            ready=view.settlement == "SETTLED" and a.ingested,
        )
        for a in stored
    ]
    if view.result is not None:
        parsed = json.loads(view.result)
        result = json.dumps(parsed, indent=2, ensure_ascii=False)
        tree = result_tree(parsed)
        if view.service_code == RANKING_SERVICE:
            by_digest = {a.stored.entry.digest: a.url for a in shown if a.ready and a.image}
            ranking = ranking_rows(parsed, by_digest)
    return {
        "view": view,
        "receipt": view.receipt(),
        "call_status": public_status(view.state),
        "result": result,
        "tree": tree,
        "tree_open_depth": TREE_OPEN_DEPTH,
        "ranking": ranking,
        "artifacts": shown,
        "disputes": disputes,
        "can_dispute": view.settlement == "SETTLED"
        and view.channel == "SESSION"
        and not any(d.state == "OPEN" for d in disputes),
    }


@router.get("/receipts/{invocation_id}")
def receipt_page(request: Request, invocation_id: str, user: User) -> Response:
    context = _receipt_context(request, user.account_id, invocation_id)
    return render(
        request,
        "receipt.html",
        title=f"Receipt {invocation_id}",
        dispute_key=new_idempotency_key(),
        **context,
    )


@router.get("/receipts/{invocation_id}/artifacts/{artifact_id}")
def artifact(request: Request, invocation_id: str, artifact_id: str, user: User) -> Response:
    """The artifact bytes from the platform's store, under the same checks as the API."""
    if "range" in request.headers:
        raise RangeNotSupported()
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        call = invocations.get_invocation_for_owner(
            session, account_id=user.account_id, invocation_id=invocation_id
        )
        if call.settlement != "SETTLED":
            raise InvocationNotSettled(
                "Artifacts are available once the call is settled, and not after a refund."
            )
        stored = artifacts.get_artifact(
            session, invocation_id=invocation_id, artifact_id=artifact_id
        )
    data = artifact_flows.downloadable(
        runtime, provider_client(request), stored, resolve_target=providers.get_dispatch_target
    )
    headers = {
        "Content-Type": stored.entry.media_type,
        "ETag": f'"{stored.entry.digest}"',
        "Cache-Control": "private, max-age=3600",
        "Content-Security-Policy": "default-src 'none'; sandbox",
    }
    if request.query_params.get("download"):
        headers["Content-Disposition"] = attachment(
            stored.entry.artifact_id, stored.entry.media_type
        )
    return finish(request, Response(content=data, headers=headers))


@router.post("/receipts/{invocation_id}/dispute")
def open_dispute(request: Request, invocation_id: str, user: User, form: Form) -> Response:
    reason = text_of(form, "reason")
    errors: dict[str, str] = {}
    status = 400
    if not reason.strip():
        errors["reason"] = "Say why this call should be refunded (1-2000 characters)."
    else:
        try:
            submitted = case_flows.submit_dispute(
                runtime_of(request),
                account_id=user.account_id,
                idempotency_key=text_of(form, "idempotency_key"),
                invocation_id=invocation_id,
                reason=reason,
            )
        except MercatoError as error:
            errors["reason"], status = error.message, error.status
        else:
            return redirect(request, f"/cases/{submitted.case.case_id}", notice="dispute-opened")
    context = _receipt_context(request, user.account_id, invocation_id)
    return render(
        request,
        "receipt.html",
        status=status,
        title=f"Receipt {invocation_id}",
        dispute_key=new_idempotency_key(),
        errors=errors,
        values={"reason": reason},
        **context,
    )


@router.get("/cases")
def cases_page(request: Request, user: User) -> Response:
    with runtime_of(request).db.read() as session:
        page = cases.list_cases(session, account_id=user.account_id, limit=100)
    return render(request, "cases.html", title="My cases", items=page.items)


@router.get("/cases/{case_id}")
def case_page(request: Request, case_id: str, user: User) -> Response:
    with runtime_of(request).db.read() as session:
        case = cases.get_case_for(
            session, case_id=case_id, account_id=user.account_id, is_staff=False
        )
    return render(request, "case.html", title=f"Case {case_id}", case=case)
