"""`MercatoClient`: the synchronous caller-API client on httpx.Client."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from mercato.client import _flows as flows
from mercato.client._flows import RetryPolicy, Send, Sleep, segment
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
USER_AGENT = "mercato-client/0.1"


def request_body(payload: Mapping[str, Any] | bytes) -> bytes:
    """The exact bytes sent on every attempt of one logical call."""
    if isinstance(payload, bytes):
        return payload
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def default_headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class MercatoClient:
    """A typed client for Mercato's caller API (catalog, invoke, receipts, artifacts, quota).

    `sleep` and `transport` are seams for tests; `progress` is told why the client waits.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        progress: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._progress = progress
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=default_headers(api_key),
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"MercatoClient(base_url={self.base_url!r})"

    def __enter__(self) -> MercatoClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- driving flows -------------------------------------------------------------------

    def _run(self, flow: flows.Flow[T]) -> T:
        try:
            step = flow.send(None)
            while True:
                if isinstance(step, Sleep):
                    if self._progress is not None:
                        self._progress(step.reason)
                    self._sleep(step.seconds)
                    step = flow.send(None)
                else:
                    step = flow.send(self._send(step))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            flow.close()

    def _send(self, step: Send) -> httpx.Response | httpx.TransportError:
        try:
            if step.sink is None:
                return self._http.send(step.request)
            response = self._http.send(step.request, stream=True)
            try:
                if response.is_success:
                    for chunk in response.iter_bytes():
                        step.sink.write(chunk)
                else:
                    response.read()
            finally:
                response.close()
            return response
        except httpx.TransportError as error:
            return error

    def _get(self, path: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        flow = flows.request_flow(
            lambda: self._http.build_request("GET", path, params=params), self.retry
        )
        return flows.json_object(self._run(flow))

    # --- catalog -------------------------------------------------------------------------

    def list_listings(self, *, limit: int = 20, cursor: str | None = None) -> Page[ListingSummary]:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        body = self._get("/v1/catalog/listings", params)
        items = tuple(ListingSummary.from_json(i) for i in body["items"])
        return Page(items=items, next_cursor=body.get("nextCursor"))

    def iter_listings(self, *, page_size: int = 100) -> Iterator[ListingSummary]:
        cursor: str | None = None
        while True:
            page = self.list_listings(limit=page_size, cursor=cursor)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def get_listing(self, service_code: str) -> Listing:
        return Listing.from_json(self._get(f"/v1/catalog/listings/{segment(service_code)}"))

    def get_version(self, service_code: str, version: str) -> Version:
        path = f"/v1/catalog/listings/{segment(service_code)}/versions/{segment(version)}"
        return Version.from_json(self._get(path))

    def get_contract(self, service_code: str, version: str) -> Contract:
        path = f"/v1/catalog/listings/{segment(service_code)}/versions/{segment(version)}"
        return Contract.from_json(self._get(path + "/contract"))

    # --- calls ---------------------------------------------------------------------------

    def invoke(
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
        return self._run(flow)

    def list_receipts(
        self, *, limit: int = 20, cursor: str | None = None, status: str | None = None
    ) -> Page[Receipt]:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        if status:
            params["status"] = status
        body = self._get("/v1/invocations", params)
        items = tuple(Receipt.from_json(i) for i in body["items"])
        return Page(items=items, next_cursor=body.get("nextCursor"))

    def iter_receipts(self, *, status: str | None = None, page_size: int = 50) -> Iterator[Receipt]:
        cursor: str | None = None
        while True:
            page = self.list_receipts(limit=page_size, cursor=cursor, status=status)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def get_receipt(self, invocation_id: str) -> Receipt:
        return self._run(flows.receipt_flow(self._http.build_request, self.retry, invocation_id))

    def download_artifact(
        self,
        invocation_id: str,
        artifact_id: str,
        path: str | Path,
        *,
        digest: str | None = None,
    ) -> Path:
        """Save one artifact at `path` after checking it against the manifest digest (read
        from the receipt unless given); on a mismatch raise ArtifactDigestMismatch, no file."""
        flow = flows.download_flow(
            self._http.build_request,
            self.retry,
            invocation_id=invocation_id,
            artifact_id=artifact_id,
            path=Path(path),
            digest=digest,
        )
        return self._run(flow)

    def download_artifacts(
        self, invocation_id: str, artifacts: tuple[ArtifactEntry, ...], directory: str | Path
    ) -> list[Path]:
        """Save every entry of a manifest into `directory` (created if missing), verified."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        return [
            self.download_artifact(
                invocation_id, e.artifact_id, folder / flows.file_name(e), digest=e.digest
            )
            for e in artifacts
        ]

    # --- account -------------------------------------------------------------------------

    def rate_limit(self) -> RateLimit:
        return RateLimit.from_json(self._get("/v1/rate-limit"))

    def balance(self) -> Balance:
        return Balance.from_json(self._get("/v1/balance"))
