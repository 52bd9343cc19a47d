"""`/mcp`: the Model Context Protocol over Streamable HTTP with the official `mcp` SDK
(DESIGN §12, decisions 0540-0542).

Stateless: every request is served on its own (the SDK's in-memory sessions off), so any serve
process answers any request; answers are JSON. The hosts it answers for are
`MERCATO_MCP_ALLOWED_HOSTS` (the SDK's own Host and Origin check). The caller is authenticated
here, as invoke authenticates (Bearer API key or session access token; none or a bad one: 401
with `WWW-Authenticate: Bearer`), before the SDK reads the request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mercato.accounts import service as accounts
from mercato.accounts.schemas import Principal
from mercato.core.errors import Unauthenticated
from mercato.core.logs import request_id_var
from mercato.db.runtime import Runtime
from mercato.settings import Settings
from mercato.web.limits import MCP_BODY_BYTES
from mercato.web.mcp.calls import CallContext, call_tool
from mercato.web.mcp.tools import MAX_NAMED_TOOLS, list_page

PATH = "/mcp"
_PRINCIPAL = "principal"
_REQUEST_ID = "mcp_request_id"
_INVALID_PARAMS = -32602


def security_of(settings: Settings) -> TransportSecuritySettings:
    """The SDK's Host/Origin check over `MERCATO_MCP_ALLOWED_HOSTS` (decision 0540): an Origin
    is allowed when it is http(s) on an allowed host; `*` turns the check off."""
    hosts = settings.mcp_host_list
    if hosts is None:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


async def authenticate(runtime: Runtime, authorization: str | None) -> Principal:
    """The caller of `Authorization: Bearer …`, read from the database (never from a serve
    process's memory); an API key's last use is recorded when due, after the read."""
    token = accounts.bearer_token_of(authorization)
    now = runtime.clock.now()
    last_used = None
    async with runtime.adb.read() as conn:
        if token.startswith(accounts.API_KEY_PREFIX):
            digest = accounts.api_key_digest(token)
            principal, last_used = await accounts.lookup_api_key_digest.aio(conn, digest=digest)
        elif token.startswith(accounts.ACCESS_TOKEN_PREFIX):
            principal = await accounts.resolve_access_token.aio(
                conn, token=token, settings=runtime.settings, now=now
            )
        else:
            raise Unauthenticated("The credential is not valid.")
    if principal.key_id is not None and accounts.touch_due(last_used, now):
        async with runtime.adb.transaction() as write:
            await accounts.touch_api_key.aio(write, key_id=principal.key_id, now=now)
    return principal


def _names(request: Request) -> set[str] | None:
    """`?tools=NAME,NAME`: the tools the list is narrowed to (None: every tool)."""
    raw = request.query_params.get("tools")
    if raw is None:
        return None
    names = {name.strip() for name in raw.split(",") if name.strip()}
    if len(names) > MAX_NAMED_TOOLS:
        raise MCPError(_INVALID_PARAMS, f"?tools= names at most {MAX_NAMED_TOOLS} tools.")
    return names


def no_header_declarations(_name: str) -> None:
    """No tool declares `Mcp-Param-*` headers that Mercato reads (the body is the invoke's
    request; nothing routes on those headers), so there is none to check them against. Without
    this the SDK would list every tool, page by page, on each 2026-era `tools/call` to find the
    called tool's input schema (decision 0541)."""
    return None


class McpEndpoint:
    """The ASGI app of `/mcp`; `running()` is entered by the app's lifespan."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.server: Server[Any] = Server(
            "mercato",
            version="1.0.0",
            title="Mercato",
            instructions=(
                "Every tool but mercato_balance and mercato_receipt calls a paid service. "
                'Put a key of your own in _meta["mercato/idempotencyKey"] and reuse it on a '
                "retry: the call then runs and is charged at most once."
            ),
            get_tool_input_schema=no_header_declarations,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self._manager: StreamableHTTPSessionManager | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve for as long as the app does (a session manager runs once: one per start)."""
        manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            security_settings=security_of(self.runtime.settings),
            max_request_body_size=MCP_BODY_BYTES,
        )
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager
        if manager is None:
            raise RuntimeError("/mcp is served only while the app runs (its lifespan)")
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        # Raised here, a refusal is the app's problem answer (401 + WWW-Authenticate).
        principal = await authenticate(self.runtime, authorization)
        state = scope.setdefault("state", {})
        state[_PRINCIPAL] = principal
        # The SDK serves the request on a task of its own: the id travels in the scope.
        state[_REQUEST_ID] = request_id_var.get()
        await manager.handle_request(scope, receive, send)

    def _call_context(self, ctx: ServerRequestContext[Any]) -> tuple[CallContext, Request]:
        request = ctx.request
        if not isinstance(request, Request):
            raise MCPError(_INVALID_PARAMS, "/mcp is served over HTTP only.")
        state = request.scope["state"]
        call = CallContext(
            self.runtime,
            state[_PRINCIPAL],
            base_url=str(request.base_url),
            request_id=state.get(_REQUEST_ID),
            state=state,
        )
        return call, request

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        _, request = self._call_context(ctx)
        cursor = None if params is None else params.cursor
        try:
            async with self.runtime.adb.read() as conn:
                return await list_page(conn, cursor=cursor, names=_names(request))
        except ValueError as bad:
            raise MCPError(_INVALID_PARAMS, str(bad)) from None

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        call, _ = self._call_context(ctx)
        return await call_tool(call, params)
