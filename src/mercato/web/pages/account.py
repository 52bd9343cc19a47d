"""The account: points and ledger history, API keys, rate-limit status."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from mercato.accounts import service as accounts
from mercato.accounts.errors import ApiKeyNotFound, InvalidSpendLimit
from mercato.core.errors import MercatoError
from mercato.invocations import spend
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
        now = runtime.clock.now()
        key_rows = [
            {
                "id": k.id,
                "name": k.name,
                "created_at": k.created_at,
                "last_used_at": k.last_used_at,
                "revoked_at": k.revoked_at,
                "spend": spend.spend_of(k, now),
            }
            for k in keys
        ]
    return {
        "header_balance": balances,
        "balances": balances,
        "history": history,
        "keys": key_rows,
        "quota": quota,
        "spend_periods": _PERIODS,
    }


_PERIODS = (
    ("DAY", "day (UTC)"),
    ("WEEK", "week (from Monday)"),
    ("MONTH", "month"),
    ("TOTAL", "in all"),
)


def _form_limit(form: Any, errors: dict[str, str]) -> tuple[int, spend.Period] | None:
    """The spend limit the creation form asks for (None: none); a bad value goes to `errors`."""
    points = text_of(form, "spend_limit").strip()
    if not points:
        return None
    try:
        return spend.parse_limit(points, text_of(form, "spend_period") or "DAY")
    except InvalidSpendLimit as error:
        field = "spend_period" if error.extra.get("field") == "spendLimit.period" else "spend_limit"
        errors[field] = error.message
        return None


@router.get("/account")
def account_page(request: Request, user: User) -> Response:
    return render(request, "account.html", title="Account", **_account_context(request, user))


@router.post("/account/api-keys")
def create_key(request: Request, user: User, form: Form) -> Response:
    name = text_of(form, "name").strip()
    runtime = runtime_of(request)
    errors: dict[str, str] = {}
    created = None
    limit = _form_limit(form, errors)
    if not name or len(name) > 100:
        errors["name"] = "Give the key a name of 1 to 100 characters."
    elif not errors:
        now = runtime.clock.now()
        try:
            with runtime.db.transaction() as session:
                created = spend.create_key(
                    session, account_id=user.account_id, name=name, limit=limit, now=now
                )
        except MercatoError as error:
            errors["name"] = error.message
    values = {
        "name": name,
        "spend_limit": text_of(form, "spend_limit"),
        "spend_period": text_of(form, "spend_period"),
    }
    return render(
        request,
        "account.html",
        status=201 if created is not None else 400,
        title="Account",
        created=created,
        errors=errors,
        values=values if errors else {},
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
