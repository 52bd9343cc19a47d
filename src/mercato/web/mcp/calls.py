"""`tools/call` (DESIGN §12): a version's tool IS an invoke through `flows.invoke`, the same
flow `POST …:invoke` runs (quota, points, receipt, idempotency); the account tools read."""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar
from urllib.parse import quote

import anyio
import anyio.to_thread
import orjson
from mcp import types

from mercato.accounts.schemas import Principal
from mercato.catalog.errors import VersionNotFound
from mercato.core.errors import MercatoError
from mercato.db.runtime import Runtime
from mercato.invocations import flows
from mercato.invocations import service as invocations
from mercato.invocations.errors import InvocationNotFound
from mercato.invocations.schemas import InvocationView
from mercato.ledger import service as ledger
from mercato.ledger.schemas import Balances
from mercato.web.api.invocations import failure_of
from mercato.web.mcp.tools import BALANCE_TOOL, RECEIPT_TOOL, find_shortened, version_of
from mercato.web.problems import error_document

IDEMPOTENCY_KEY = "mercato/idempotencyKey"
INVOCATION_ID = "mercato/invocationId"
SETTLEMENT = "mercato/settlement"


class OutcomePending(MercatoError):
    """The call was accepted and its outcome is not known yet (the invoke's 202)."""

    code: ClassVar[str] = "OUTCOME_PENDING"
    status: ClassVar[int] = 202
    title: ClassVar[str] = "The outcome is not known yet"


class CallContext:
    """Who calls, from which request, and where artifacts are downloaded from."""

    __slots__ = ("base_url", "principal", "request_id", "runtime", "state")

    def __init__(
        self,
        runtime: Runtime,
        principal: Principal,
        *,
        base_url: str,
        request_id: str | None,
        state: dict[str, Any],
    ) -> None:
        self.runtime = runtime
        self.principal = principal
        self.base_url = base_url.rstrip("/")
        self.request_id = request_id
        self.state = state


def _meta(key: str | None, view: InvocationView | None, settlement: str | None) -> dict[str, Any]:
    return {
        INVOCATION_ID: None if view is None else view.invocation_id,
        IDEMPOTENCY_KEY: key,
        SETTLEMENT: settlement if view is None else view.settlement,
    }


def refused(
    error: MercatoError,
    *,
    key: str | None = None,
    view: InvocationView | None = None,
    settlement: str | None = None,
) -> types.CallToolResult:
    """An `isError` result carrying `error`'s problem document, so a model can correct itself."""
    document = error_document(error)  # with `retryAfter` where the error asks to wait
    meta = _meta(key, view, settlement)
    if view is None and isinstance(error.extra.get("invocationId"), str):
        # The key's call, accepted by an earlier request and still in flight.
        meta[INVOCATION_ID] = error.extra["invocationId"]
        meta[SETTLEMENT] = "PENDING"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=error.message)],
        structured_content=document,
        is_error=True,
        _meta=meta,
    )


def _settled(call: CallContext, key: str, view: InvocationView) -> types.CallToolResult:
    body = view.success_body()
    result = body["result"]
    content: list[types.ContentBlock] = [
        types.TextContent(type="text", text=orjson.dumps(result).decode())
    ]
    for artifact in view.manifest():
        artifact_id = str(artifact.get("artifactId"))
        # The provider named it (printable, no "/"): one path segment, percent-encoded.
        path = f"/v1/invocations/{quote(view.invocation_id, safe='')}/artifacts/"
        content.append(
            types.ResourceLink(
                type="resource_link",
                name=artifact_id,
                uri=call.base_url + path + quote(artifact_id, safe=""),
                mime_type=artifact.get("mediaType"),
                size=artifact.get("size"),
            )
        )
    return types.CallToolResult(
        content=content,
        structured_content=result if isinstance(result, dict) else None,
        is_error=False,
        _meta=_meta(key, view, None),
    )


def outcome(call: CallContext, key: str, view: InvocationView) -> types.CallToolResult:
    """The tool result of an invoke's outcome: settled, pending or failed."""
    if view.pending:
        pending = OutcomePending(
            f"The call {view.invocation_id} was accepted but its outcome is not known yet. Do "
            f"not call again: read its receipt with the mercato_receipt tool "
            f'({{"invocationId": "{view.invocation_id}"}}), or repeat this call with the same '
            f"{IDEMPOTENCY_KEY}, which answers the settled result once there is one.",
            invocationId=view.invocation_id,
            receipt=f"/v1/invocations/{view.invocation_id}",
        )
        return refused(pending, key=key, view=view)
    if view.state == "SUCCEEDED":
        return _settled(call, key, view)
    return refused(failure_of(view), key=key, view=view)


def _body(arguments: dict[str, Any]) -> bytes:
    """`arguments` as the invoke's JSON body; an integer past 64 bits (which orjson refuses)
    is written as the JSON it came as, for the request schema to judge as invoke would."""
    try:
        return orjson.dumps(arguments)
    except orjson.JSONEncodeError:
        return json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode()


def _key_of(meta: Any) -> str:
    """The call's Idempotency-Key: `_meta["mercato/idempotencyKey"]` under the header's rules,
    or a new one (then a retry is a new call)."""
    given = None if meta is None else meta.get(IDEMPOTENCY_KEY)
    if given is None:
        return f"mcp-{uuid.uuid4().hex}"
    return invocations.check_idempotency_key([given if isinstance(given, str) else ""])


async def invoke_tool(
    call: CallContext, name: str, arguments: dict[str, Any] | None, meta: Any
) -> types.CallToolResult:
    """Invoke the version tool `name` with `arguments` as the body (DESIGN §12)."""
    runtime = call.runtime
    key: str | None = None
    try:
        key = _key_of(meta)
        found = version_of(name)  # a whole name is read as it stands: no read
        if found is None:
            async with runtime.adb.read() as conn:
                found = await find_shortened(conn, name)
        if found is None:
            raise VersionNotFound(f"There is no tool {name}; list the tools for their names.")
        service_code, version = found
        invoke = flows.InvokeRequest(
            account_id=call.principal.account_id,
            channel=call.principal.channel,
            key_id=call.principal.key_id,
            service_code=service_code,
            version=version,
            idempotency_key=key,
            body=_body({} if arguments is None else arguments),
            request_id=call.request_id,
        )
        # The SDK cancels a request's task when its client goes away; an invoke, once begun,
        # runs to its conclusion as the invoke route's does (bounded by the provider timeout),
        # rather than leaving an accepted call to the worker's reconciliation.
        with anyio.CancelScope(shield=True):
            result = await flows.invoke(runtime, invoke)
    except MercatoError as error:
        return refused(error, key=key)
    call.state["invocation_id"] = result.view.invocation_id  # the request's log line names it
    return outcome(call, key, result.view)


async def balance_tool(call: CallContext) -> types.CallToolResult:
    def read() -> Balances:
        with call.runtime.db.read() as session:
            return ledger.balances(session, account_id=call.principal.account_id)

    current = await anyio.to_thread.run_sync(read)
    body = {"available": current.available, "reserved": current.reserved}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=orjson.dumps(body).decode())],
        structured_content=body,
        is_error=False,
    )


async def receipt_tool(call: CallContext, arguments: dict[str, Any] | None) -> types.CallToolResult:
    invocation_id = (arguments or {}).get("invocationId")
    try:
        if not isinstance(invocation_id, str) or not invocation_id or len(invocation_id) > 64:
            raise InvocationNotFound("Give the invocationId of one of your calls.")
        async with call.runtime.adb.read() as conn:
            view = await invocations.get_view.aio(conn, invocation_id=invocation_id)
        if view.account_id != call.principal.account_id:
            raise InvocationNotFound()  # another's call: its existence never leaks
    except MercatoError as error:
        return refused(error)
    body = view.receipt()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=orjson.dumps(body).decode())],
        structured_content=body,
        is_error=False,
        _meta=_meta(view.idempotency_key, view, None),
    )


async def call_tool(call: CallContext, params: types.CallToolRequestParams) -> types.CallToolResult:
    """Answer one `tools/call`."""
    if params.name == BALANCE_TOOL:
        return await balance_tool(call)
    if params.name == RECEIPT_TOOL:
        return await receipt_tool(call, params.arguments)
    return await invoke_tool(call, params.name, params.arguments, params.meta)
