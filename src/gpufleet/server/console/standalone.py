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
from gpufleet.server import access
from gpufleet.server.auth import Principal
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
        who = tokens.authenticate(request.headers.get("authorization"))
        access.check_person(who, "read the console's changes")
        if kind != ["Event"]:
            raise ValidationError("this console serves the changes of Events only", field="kind")
        items, cursor = await run_in_threadpool(
            events.changes, resource_version, limit=limit, wait=timeout_seconds
        )
        if not who.admin:
            readable = await run_in_threadpool(_readable_objects, source, who)
            items = [item for item in items if _involved(item) in readable]
        return JSONResponse({"resourceVersion": cursor, "items": items})

    if now is None:
        add_console(app, source, tokens)
    else:
        add_console(app, source, tokens, now=now)
    return app


def _readable_objects(source: ConsoleSource, who: Principal) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of what a queue's token may read, so Events about them are its too:
    its Queue (cluster-wide, so any namespace's Event about it), its jobs and services, and the pods
    of its queue (its work's, and its plain pods while they wait)."""
    out: set[tuple[str, str, str]] = set()
    for kind in ("Queue", "TrainingJob", "InferenceService"):
        for obj in source.resources(kind):
            if access.may_read(who, obj):
                out.add((kind, "*" if kind == "Queue" else obj.namespace or "", obj.name))
    fleet = source.fleet()
    for pod in [*fleet.pods, *fleet.loose_work]:
        spec = pod.get("spec") or {}
        if pod.get("kind") == "Pod" and spec.get("queue") == who.queue:
            out.add(("Pod", pod["metadata"].get("namespace") or "", pod["metadata"]["name"]))
    return out


def _involved(change: dict[str, Any]) -> tuple[str, str, str]:
    event = change.get("object") or {}
    spec, meta = event.get("spec") or {}, event.get("metadata") or {}
    kind = str(spec.get("involvedKind") or "")
    namespace = "*" if kind == "Queue" else str(meta.get("namespace") or "")
    return kind, namespace, str(spec.get("involvedName") or "")
