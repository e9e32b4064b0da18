"""The web console on its own, for a world that has no gpufleet API server: a Kubernetes cluster.

`gpufleet console --kubeconfig FILE` serves the same page and the same `/v1/console` as `gpufleet up`
(one builder over a `ConsoleSource`), plus the one read of the API the page makes besides: the live
events, `GET /v1/changes?kind=Event`, answered from an `EventFeed` in the embedded API's form (each
change `{type, object}` with the object a gpufleet Event: `spec.time`, `type`, `reason`,
`involvedKind`, `involvedName`, `message`). It writes nothing anywhere.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations at run time.
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Protocol

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from gpufleet.api.errors import ValidationError
from gpufleet.server.console import Authenticator, add_console
from gpufleet.server.errors import install_error_handlers
from gpufleet.store.console import ConsoleSource

MAX_EVENTS = 500
MAX_WAIT_SECONDS = 20.0


class EventFeed(Protocol):
    """The world's Events as changes after a cursor."""

    def changes(self, since: str | None, *, limit: int, wait: float) -> tuple[list[dict[str, Any]], str]:
        """(changes, cursor to resume from). No cursor: the latest `limit` Events. A cursor: those
        recorded after it, waiting up to `wait` seconds for one."""
        ...


def console_app(
    source: ConsoleSource, tokens: Authenticator, events: EventFeed, now: Callable[[], datetime] | None = None
) -> FastAPI:
    """The page at `/`, its view at `/v1/console` and the events at `/v1/changes`, behind `tokens`."""
    app = FastAPI(title="gpufleet console", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/changes", include_in_schema=False)
    async def changes(
        request: Request,
        kind: Annotated[list[str] | None, Query(max_length=4)] = None,
        resource_version: Annotated[str | None, Query(alias="resourceVersion", max_length=32)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_EVENTS)] = 100,
        timeout_seconds: Annotated[float, Query(alias="timeoutSeconds", ge=0, le=MAX_WAIT_SECONDS)] = 0.0,
    ) -> JSONResponse:
        tokens.authenticate(request.headers.get("authorization"))
        if kind != ["Event"]:
            raise ValidationError("this console serves the changes of Events only", field="kind")
        items, cursor = await run_in_threadpool(
            events.changes, resource_version, limit=limit, wait=timeout_seconds
        )
        return JSONResponse({"resourceVersion": cursor, "items": items})

    if now is None:
        add_console(app, source, tokens)
    else:
        add_console(app, source, tokens, now=now)
    return app
