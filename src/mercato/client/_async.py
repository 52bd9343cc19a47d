"""`AsyncMercatoClient`: the same client on httpx.AsyncClient, driving the same flows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from mercato.client import _flows as flows
from mercato.client._flows import RetryPolicy, Send, Sleep, segment
from mercato.client._sync import default_headers, request_body
from mercato.client.models import (
    ArtifactEntry,
    Balance,
    Contract,
    InvocationResult,
    Listing,
    ListingSummary,
    Page,
    RateLimit,
    Receipt,
    Version,
)

T = TypeVar("T")


class AsyncMercatoClient:
    """The asynchronous twin of `MercatoClient`: same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        progress: Callable[[str], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._progress = progress
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=default_headers(api_key),
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"AsyncMercatoClient(base_url={self.base_url!r})"

    async def __aenter__(self) -> AsyncMercatoClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- driving flows -------------------------------------------------------------------

    async def _run(self, flow: flows.Flow[T]) -> T:
        try:
            step = flow.send(None)
            while True:
                if isinstance(step, Sleep):
                    if self._progress is not None:
                        self._progress(step.reason)
                    await self._sleep(step.seconds)
                    step = flow.send(None)
                else:
                    step = flow.send(await self._send(step))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            flow.close()

    async def _send(self, step: Send) -> httpx.Response | httpx.TransportError:
        try:
            if step.sink is None:
                return await self._http.send(step.request)
            response = await self._http.send(step.request, stream=True)
            try:
                if response.is_success:
                    async for chunk in response.aiter_bytes():
                        step.sink.write(chunk)
                else:
                    await response.aread()
            finally:
                await response.aclose()
            return response
        except httpx.TransportError as error:
            return error

    async def _get(self, path: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        flow = flows.request_flow(
            lambda: self._http.build_request("GET", path, params=params), self.retry
        )
        return flows.json_object(await self._run(flow))

    # --- catalog -------------------------------------------------------------------------

    async def list_listings(
        self, *, limit: int = 20, cursor: str | None = None
    ) -> Page[ListingSummary]:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        body = await self._get("/v1/catalog/listings", params)
        items = tuple(ListingSummary.from_json(i) for i in body["items"])
        return Page(items=items, next_cursor=body.get("nextCursor"))

    async def iter_listings(self, *, page_size: int = 100) -> AsyncIterator[ListingSummary]:
        cursor: str | None = None
        while True:
            page = await self.list_listings(limit=page_size, cursor=cursor)
            for item in page.items:
                yield item
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def get_listing(self, service_code: str) -> Listing:
        body = await self._get(f"/v1/catalog/listings/{segment(service_code)}")
        return Listing.from_json(body)

    async def get_version(self, service_code: str, version: str) -> Version:
        path = f"/v1/catalog/listings/{segment(service_code)}/versions/{segment(version)}"
        return Version.from_json(await self._get(path))

    async def get_contract(self, service_code: str, version: str) -> Contract:
        path = f"/v1/catalog/listings/{segment(service_code)}/versions/{segment(version)}"
        return Contract.from_json(await self._get(path + "/contract"))

    # --- calls ---------------------------------------------------------------------------

    async def invoke(
        self,
        service_code: str,
        version: str,
        payload: Mapping[str, Any] | bytes,
        *,
        idempotency_key: str | None = None,
    ) -> InvocationResult:
        """Call one exact version and return its settled result (see `invoke_flow`)."""
        flow = flows.invoke_flow(
            self._http.build_request,
            self.retry,
            service_code=service_code,
            version=version,
            body=request_body(payload),
            idempotency_key=idempotency_key or str(uuid.uuid4()),
        )
        return await self._run(flow)

    async def list_receipts(
        self, *, limit: int = 20, cursor: str | None = None, status: str | None = None
    ) -> Page[Receipt]:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        if status:
            params["status"] = status
        body = await self._get("/v1/invocations", params)
        items = tuple(Receipt.from_json(i) for i in body["items"])
        return Page(items=items, next_cursor=body.get("nextCursor"))

    async def iter_receipts(
        self, *, status: str | None = None, page_size: int = 50
    ) -> AsyncIterator[Receipt]:
        cursor: str | None = None
        while True:
            page = await self.list_receipts(limit=page_size, cursor=cursor, status=status)
            for item in page.items:
                yield item
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def get_receipt(self, invocation_id: str) -> Receipt:
        flow = flows.receipt_flow(self._http.build_request, self.retry, invocation_id)
        return await self._run(flow)

    async def download_artifact(
        self,
        invocation_id: str,
        artifact_id: str,
        path: str | Path,
        *,
        digest: str | None = None,
    ) -> Path:
        """Save one artifact at `path` after checking it against the manifest digest."""
        flow = flows.download_flow(
            self._http.build_request,
            self.retry,
            invocation_id=invocation_id,
            artifact_id=artifact_id,
            path=Path(path),
            digest=digest,
        )
        return await self._run(flow)

    async def download_artifacts(
        self, invocation_id: str, artifacts: tuple[ArtifactEntry, ...], directory: str | Path
    ) -> list[Path]:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        return [
            await self.download_artifact(
                invocation_id, e.artifact_id, folder / flows.file_name(e), digest=e.digest
            )
            for e in artifacts
        ]

    # --- account -------------------------------------------------------------------------

    async def rate_limit(self) -> RateLimit:
        return RateLimit.from_json(await self._get("/v1/rate-limit"))

    async def balance(self) -> Balance:
        return Balance.from_json(await self._get("/v1/balance"))
