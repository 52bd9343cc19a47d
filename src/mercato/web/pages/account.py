"""The account: points and ledger history, API keys, rate-limit status."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from mercato.accounts import service as accounts
from mercato.accounts.errors import ApiKeyNotFound
from mercato.core.errors import MercatoError
from mercato.ledger import service as ledger
from mercato.quotas import service as quotas
from mercato.web.deps import runtime_of
from mercato.web.pages import queries
from mercato.web.pages.common import Form, PageUser, User, redirect, render, text_of

router = APIRouter(include_in_schema=False)


def _account_context(request: Request, user: PageUser) -> dict[str, Any]:
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        balances = ledger.balances(session, account_id=user.account_id)
        history = queries.call_history(session, account_id=user.account_id)
        keys = list(accounts.list_api_keys(session, account_id=user.account_id))
        quota = quotas.current_status(
            session, account_id=user.account_id, settings=runtime.settings, now=runtime.clock.now()
        )
        key_rows = [
            {
                "id": k.id,
                "name": k.name,
                "created_at": k.created_at,
                "last_used_at": k.last_used_at,
                "revoked_at": k.revoked_at,
            }
            for k in keys
        ]
    return {
        "header_balance": balances,
        "balances": balances,
        "history": history,
        "keys": key_rows,
        "quota": quota,
    }


@router.get("/account")
def account_page(request: Request, user: User) -> Response:
    return render(request, "account.html", title="Account", **_account_context(request, user))


@router.post("/account/api-keys")
def create_key(request: Request, user: User, form: Form) -> Response:
    name = text_of(form, "name").strip()
    runtime = runtime_of(request)
    errors: dict[str, str] = {}
    created = None
    if not name or len(name) > 100:
        errors["name"] = "Give the key a name of 1 to 100 characters."
    else:
        try:
            with runtime.db.transaction() as session:
                created = accounts.create_api_key(
                    session, account_id=user.account_id, name=name, now=runtime.clock.now()
                )
        except MercatoError as error:
            errors["name"] = error.message
    return render(
        request,
        "account.html",
        status=201 if created is not None else 400,
        title="Account",
        created=created,
        errors=errors,
        values={"name": name} if errors else {},
        **_account_context(request, user),
    )


def _own_key(request: Request, user: PageUser, key_id: str) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        for key in accounts.list_api_keys(session, account_id=user.account_id):
            if key.id == key_id:
                return {"id": key.id, "name": key.name, "revoked_at": key.revoked_at}
    raise ApiKeyNotFound()


@router.get("/account/api-keys/{key_id}/revoke")
def confirm_revoke(request: Request, key_id: str, user: User) -> Response:
    key = _own_key(request, user, key_id)
    return render(request, "revoke_key.html", title="Revoke API key", key=key)


@router.post("/account/api-keys/{key_id}/revoke")
def revoke_key(request: Request, key_id: str, user: User, _form: Form) -> Response:
    runtime = runtime_of(request)
    _own_key(request, user, key_id)
    with runtime.db.transaction() as session:
        accounts.revoke_api_key(
            session, key_id=key_id, account_id=user.account_id, now=runtime.clock.now()
        )
    return redirect(request, "/account", notice="key-revoked")
