"""Problems become typed exceptions; catalog and receipts pages; the key never shows."""

from __future__ import annotations

import httpx
import pytest

from client_sdk.support import Script, Sleeps, problem, receipt
from mercato.client import (
    InsufficientPoints,
    KeySpendLimitReached,
    ListingUnavailable,
    MercatoAPIError,
    MercatoClient,
    NotFound,
    PaymentRequired,
    ProviderDefinedFailure,
    ProviderUnavailable,
    RequestSchemaViolation,
    ServerError,
    TransportFailed,
    Unauthenticated,
)

API_KEY = "mercato_live_" + "Zq9" * 12


def client(script: Script) -> MercatoClient:
    return MercatoClient(
        "http://mercato.test", API_KEY, transport=script.transport(), sleep=Sleeps()
    )


def test_a_provider_defined_failure_carries_its_error_code_and_status() -> None:
    script = Script(
        problem(
            422,
            "PROVIDER_DEFINED_FAILURE",
            errorCode="INVALID_CHART",
            providerHttpStatus=400,
            invocationId="inv_7",
        )
    )

    with pytest.raises(ProviderDefinedFailure) as caught:
        client(script).invoke("acme.echo", "v1", {"chart": "nope"})

    error = caught.value
    assert (error.code, error.status) == ("PROVIDER_DEFINED_FAILURE", 422)
    assert (error.error_code, error.provider_http_status) == ("INVALID_CHART", 400)
    assert error.invocation_id == "inv_7"
    assert error.problem["errorCode"] == "INVALID_CHART"
    assert error.message == "PROVIDER_DEFINED_FAILURE happened"
    assert len(script.requests) == 1  # a final answer is never retried


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (401, "UNAUTHENTICATED", Unauthenticated),
        (402, "INSUFFICIENT_POINTS", InsufficientPoints),
        (402, "KEY_SPEND_LIMIT_REACHED", KeySpendLimitReached),
        (402, "SOMETHING_NEW", PaymentRequired),
        (403, "LISTING_UNAVAILABLE", ListingUnavailable),
        (404, "VERSION_NOT_FOUND", NotFound),
        (422, "REQUEST_SCHEMA_VIOLATION", RequestSchemaViolation),
        (502, "PROVIDER_UNAVAILABLE", ProviderUnavailable),
        (418, "SOMETHING_NEW", MercatoAPIError),
    ],
)
def test_problem_codes_pick_the_exception_class(
    status: int, code: str, cls: type[MercatoAPIError]
) -> None:
    script = Script(problem(status, code))

    with pytest.raises(MercatoAPIError) as caught:
        client(script).invoke("acme.echo", "v1", {"n": 1})

    assert type(caught.value) is cls
    assert (caught.value.code, caught.value.status) == (code, status)


def test_a_schema_violation_names_each_located_error_in_its_text() -> None:
    """Issue 41 item 5: str() of the exception carries the problem's `errors`, each as
    `pointer: detail` on its own line, not only `CODE: message`."""
    chart = {"pointer": "/chart", "detail": "'weekly' is not one of ['overall', 'manga']"}
    script = Script(
        problem(
            422,
            "REQUEST_SCHEMA_VIOLATION",
            message="The body does not match.",
            errors=[chart, {"detail": "at the root"}],
        )
    )

    with pytest.raises(RequestSchemaViolation) as caught:
        client(script).invoke("acme.echo", "v1", {"chart": "weekly"})

    assert str(caught.value) == (
        "REQUEST_SCHEMA_VIOLATION: The body does not match.\n"
        "  /chart: 'weekly' is not one of ['overall', 'manga']\n"
        "  /: at the root"
    )
    assert caught.value.errors == [chart, {"detail": "at the root"}]


def test_errors_that_are_not_a_list_are_no_errors() -> None:
    script = Script(problem(422, "REQUEST_SCHEMA_VIOLATION", errors="not a list"))

    with pytest.raises(RequestSchemaViolation) as caught:
        client(script).invoke("acme.echo", "v1", {"n": 1})

    assert caught.value.errors == [] and "\n" not in str(caught.value)


def test_a_bare_http_error_still_becomes_a_typed_error() -> None:
    script = Script(httpx.Response(502, text="<html>bad gateway</html>"))

    with pytest.raises(ServerError) as caught:
        client(script).get_listing("acme.echo")

    assert (caught.value.code, caught.value.status) == ("HTTP_502", 502)


def test_the_api_key_never_appears_in_reprs_or_error_texts() -> None:
    script = Script(
        problem(401, "UNAUTHENTICATED"),
        *[httpx.ConnectError("refused") for _ in range(10)],
    )
    mercato = client(script)
    texts = [repr(mercato)]
    for call in (lambda: mercato.balance(), lambda: mercato.invoke("a.b", "v1", {"n": 1})):
        with pytest.raises((MercatoAPIError, TransportFailed)) as caught:
            call()
        texts += [str(caught.value), repr(caught.value), str(vars(caught.value))]
    assert texts and all(API_KEY not in text and "Zq9Zq9" not in text for text in texts)


def test_catalog_pages_follow_next_cursor() -> None:
    def page(items: list[str], cursor: str | None) -> httpx.Response:
        listings = [
            {
                "serviceCode": code,
                "displayName": code.upper(),
                "versions": [{"version": "v1", "price": 10}],
            }
            for code in items
        ]
        return httpx.Response(200, json={"items": listings, "nextCursor": cursor})

    script = Script(page(["a.one", "a.two"], "c1"), page(["b.three"], None))

    listings = list(client(script).iter_listings(page_size=2))

    assert [item.service_code for item in listings] == ["a.one", "a.two", "b.three"]
    assert listings[0].versions[0].price == 10
    assert script.requests[1].url.params["cursor"] == "c1"
    assert script.requests[0].url.params["limit"] == "2"


def test_receipts_list_passes_cursor_and_status() -> None:
    body = receipt("inv_2", status="SUCCEEDED", key="k-2").json()
    script = Script(httpx.Response(200, json={"items": [body], "nextCursor": "n2"}))

    page = client(script).list_receipts(limit=5, cursor="n1", status="SUCCEEDED")

    params = script.requests[0].url.params
    assert (params["limit"], params["cursor"], params["status"]) == ("5", "n1", "SUCCEEDED")
    assert page.next_cursor == "n2"
    (item,) = page.items
    assert (item.invocation_id, item.settlement, item.actual_spend) == ("inv_2", "SETTLED", 10)
    assert item.idempotency_key == "k-2" and not item.pending


def test_rate_limit_and_balance_are_typed() -> None:
    script = Script(
        httpx.Response(
            200,
            json={
                "policy": "standard",
                "limit": 60,
                "windowSeconds": 60,
                "accepted": 3,
                "remaining": 57,
                "resetAt": "2026-01-01T00:01:00Z",
            },
        ),
        httpx.Response(200, json={"available": 90, "reserved": 10}),
    )
    mercato = client(script)

    quota = mercato.rate_limit()
    balance = mercato.balance()

    assert (quota.policy, quota.remaining, quota.window_seconds) == ("standard", 57, 60)
    assert quota.reset_at is not None and quota.reset_at.tzinfo is not None
    assert (balance.available, balance.reserved) == (90, 10)


def test_a_key_over_its_spend_limit_says_its_limit_use_and_reset() -> None:
    script = Script(
        problem(402, "KEY_SPEND_LIMIT_REACHED", limit=10, used=8, resetsAt="2026-12-08T00:00:00Z")
    )

    with pytest.raises(KeySpendLimitReached) as caught:
        client(script).invoke("acme.echo", "v1", {"n": 1})

    assert (caught.value.limit, caught.value.used) == (10, 8)
    assert caught.value.resets_at == "2026-12-08T00:00:00Z"
    assert len(script.requests) == 1  # a refusal that consumed nothing is not retried
