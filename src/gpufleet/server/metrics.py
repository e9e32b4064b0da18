"""`GET /metrics`: the process's Prometheus metrics (prometheus_client's default registry).

In `gpufleet up` the controllers run in the API's process, so this is where the control plane's
metrics (`gpufleet.observability.metrics`) are scraped from. They name every queue and TrainingJob,
so only the admin token reads them (a Prometheus scrape job sends it with `authorization:
{credentials_file: ...}`); a queue's token is refused with 403.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint's annotations at run time.
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from gpufleet.server.auth import TokenRegistry
from gpufleet.server.errors import ForbiddenError, error_responses

PATH = "/metrics"


def add_metrics_route(app: FastAPI, tokens: TokenRegistry) -> None:
    """Serves the default registry on `/metrics` of `app`, to the admin token."""

    @app.get(
        PATH,
        tags=["server"],
        summary="The control plane's Prometheus metrics (admin only)",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}, **error_responses(401, 403)},
    )
    async def metrics(request: Request) -> Response:
        who = tokens.authenticate(request.headers.get("authorization"))
        if not who.admin:
            raise ForbiddenError(f"{who.describe()} may not read the server's metrics")
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        # Rendering walks every series under the registry's locks: off the event loop.
        body = await run_in_threadpool(encoder, REGISTRY)
        return Response(body, media_type=content_type)
