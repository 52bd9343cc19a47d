"""`GET /v1/invocations/{invocationId}/artifacts/{artifactId}`: the whole, re-verified object."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from mercato.accounts.schemas import Principal
from mercato.artifacts import flows
from mercato.artifacts import service as artifacts
from mercato.artifacts.errors import (
    ArtifactCorrupted,
    ArtifactNotFound,
    ArtifactNotReady,
    InvocationNotSettled,
    RangeNotSupported,
)
from mercato.core.errors import Unauthenticated
from mercato.invocations import service as invocations
from mercato.invocations.errors import InvocationNotFound
from mercato.providers import service as providers
from mercato.web.api.invocations import provider_client
from mercato.web.deps import current_principal, runtime_of
from mercato.web.downloads import attachment
from mercato.web.problems import declare, success_headers

router = APIRouter()


_BINARY = {"*/*": {"schema": {"type": "string", "format": "binary"}}}


@router.get(
    "/v1/invocations/{invocation_id}/artifacts/{artifact_id}",
    response_class=Response,
    **declare(
        Unauthenticated,
        InvocationNotFound,
        ArtifactNotFound,
        InvocationNotSettled,
        RangeNotSupported,
        ArtifactCorrupted,
        ArtifactNotReady,
        path_params=True,
        headers={503: ("Retry-After",)},
        answers={
            200: {
                "description": (
                    "The whole artifact, re-verified against its digest; `Content-Disposition` "
                    "names it `<artifactId>.<extension>` from its media type (decision 0232)."
                ),
                "content": _BINARY,
                "headers": success_headers("ETag", "Content-Disposition"),
            }
        },
    ),
)
def download_artifact(
    invocation_id: str,
    artifact_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(current_principal)],
) -> Response:
    """Serve an artifact of the caller's settled call, after re-checking its digest.

    One not yet pulled from the provider is pulled now (decision 0206).
    """
    if "range" in request.headers:
        raise RangeNotSupported()
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        call = invocations.get_invocation_for_owner(
            session, account_id=principal.account_id, invocation_id=invocation_id
        )
        if call.settlement != "SETTLED":
            # REFUNDED included: see docs/decisions/0081-refunded-calls-serve-no-artifacts.md.
            raise InvocationNotSettled(
                "Artifacts are available once the call is settled, and not after a refund.",
                settlement=call.settlement,
            )
        artifact = artifacts.get_artifact(
            session, invocation_id=invocation_id, artifact_id=artifact_id
        )
    data = flows.downloadable(
        runtime,
        provider_client(request),
        artifact,
        resolve_target=providers.get_dispatch_target,
    )
    entry = artifact.entry
    return Response(
        content=data,
        headers={
            "Content-Type": entry.media_type,
            "Content-Disposition": attachment(entry.artifact_id, entry.media_type),
            "ETag": f'"{entry.digest}"',
            "Accept-Ranges": "none",
            "Cache-Control": "private",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
        },
    )
