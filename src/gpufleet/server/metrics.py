"""`GET /metrics`: the process's Prometheus metrics (prometheus_client's default registry).

In `gpufleet up` the controllers run in the API's process, so this is where the control plane's
metrics (`gpufleet.observability.metrics`) are scraped from. They name every queue and TrainingJob,
so only the admin token reads them (a Prometheus scrape job sends it with `authorization:
{credentials_file: ...}`); a queue's token is refused with 403. `collectors` add series of this
server's own beside the default registry's (`gpufleet up`: its nodes' state, `server/nodestate.py`).
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint's annotations at run time.
from collections.abc import Iterator, Sequence

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpufleet.server.auth import TokenRegistry
from gpufleet.server.errors import ForbiddenError, error_responses

PATH = "/metrics"


class _Joined(Collector):
    """The default registry and this server's own collectors, rendered as one."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()
        for collector in self._collectors:
            yield from collector.collect()


def add_metrics_route(app: FastAPI, tokens: TokenRegistry, collectors: Sequence[Collector] = ()) -> None:
    """Serves the default registry (and `collectors`) on `/metrics` of `app`, to the admin token."""
    source: Collector = _Joined(collectors) if collectors else REGISTRY

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
        body = await run_in_threadpool(encoder, source)
        return Response(body, media_type=content_type)
