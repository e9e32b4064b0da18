"""The web console: a read-only page of the fleet, served by the API server at `/`.

GET /                     the page (HTML, CSS and JS shipped in this package: nothing from the internet)
GET /console/{file}       its script and style
GET /v1/console           what it shows, as JSON: fleet map, queues, jobs and services, cost (per pool,
                          per queue, and per job as `gpufleet history` accounts it)

The view is built from a `ConsoleSource` (`console.source`), which the embedded world (`StoreSource`)
and the Kubernetes world (`gpufleet.kube.console`) both implement: one builder, one JSON shape, one
page. `gpufleet up` adds the console to its API; `gpufleet console --kubeconfig` serves it alone
(`console.standalone`), with its own events feed.

The page signs in with a bearer token like the CLI and sends it with every request, so it sees what
the CLI would: the admin everything; a queue's token its queue and its work only, with no map of the
fleet (nodes and pools are not its to read). Events come live from `/v1/changes` (long poll).
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations at run time.
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from gpufleet.server import access
from gpufleet.server.auth import Principal
from gpufleet.server.console import view
from gpufleet.server.errors import error_responses
from gpufleet.store.console import ConsoleSource

CONSOLE_PATH = "/v1/console"
_STATIC = "static"
_WORK = ("TrainingJob", "InferenceService")
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def _static_dir() -> str:
    # The package is installed as files (setuptools, editable or not), so the folder has a path.
    return str(resources.files("gpufleet.server.console").joinpath(_STATIC))


def _wall_clock() -> datetime:
    return datetime.now(UTC)


class Authenticator(Protocol):
    """Who an `Authorization` header stands for (`TokenRegistry` is one); raises UnauthorizedError."""

    def authenticate(self, authorization: str | None) -> Principal: ...


def add_console(
    app: FastAPI, source: ConsoleSource, tokens: Authenticator, now: Callable[[], datetime] = _wall_clock
) -> None:
    """Adds the page at `/`, its files under `/console/` and its data at `/v1/console`. `now` is the
    world's clock (the twin's, which may run faster than real time): running jobs' GPU-hours count to it."""
    static = _static_dir()
    app.mount("/console", StaticFiles(directory=static), name="console")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        # The page runs only its own files: an injected script or a foreign asset is refused by the
        # browser, and no other site may frame it.
        return FileResponse(f"{static}/index.html", media_type="text/html", headers=_PAGE_HEADERS)

    @app.get(
        CONSOLE_PATH,
        tags=["server"],
        summary="What the web console shows: fleet map, queues, jobs and services, cost",
        response_model=None,
        responses={200: {"description": "The console's view for this token."}, **error_responses(401, 403)},
    )
    async def console_view(request: Request) -> JSONResponse:
        who = tokens.authenticate(request.headers.get("authorization"))
        access.check_person(who, "read the console's view")
        return JSONResponse(await run_in_threadpool(build_view, source, who, now()))


def build_view(source: ConsoleSource, who: Principal, now: datetime) -> dict[str, Any]:
    """The view for `who`: every object it shows is one the token may read through the API."""

    def readable(kind: str) -> list[dict[str, Any]]:
        return [obj.to_dict() for obj in source.resources(kind) if access.may_read(who, obj)]

    queues = readable("Queue")
    work = [obj for kind in _WORK for obj in readable(kind)]
    jobs = [obj for obj in work if obj.get("kind") == "TrainingJob"]
    # Nodes, pods, pools and loose work (pods of no gpufleet object) are the admin's to read; the
    # cost of a queue's own pods is computed from them here but only that queue's figure is given to
    # its token.
    fleet = source.fleet()
    answer: dict[str, Any] = {
        "who": {"admin": who.admin, "queue": who.queue},
        "queues": view.queue_rows(queues),
        "work": view.work_rows(work + (fleet.loose_work if who.admin else [])),
    }
    cost: dict[str, Any] = dict(view.cost_rows(fleet.pools, fleet.nodes, fleet.pods))
    # Only the jobs the token may read are accounted: a queue's token gets its own.
    cost["jobs"] = view.job_cost_rows(jobs, fleet.pods, fleet.nodes, fleet.pools, now)
    services = [obj for obj in work if obj.get("kind") == "InferenceService"]
    cost["services"] = view.service_cost_rows(services, fleet.pods, fleet.nodes, fleet.pools, now)
    if who.admin:
        answer["map"] = view.fleet_map(fleet.pools, fleet.nodes, fleet.pods)
        answer["cost"] = cost
    else:
        answer["map"] = None
        mine = [q for q in cost["queues"] if q["name"] == who.queue]
        jobs_cost = [dict(row, pool=None) for row in cost["jobs"]]  # pools are not its to read
        services_cost = [dict(row, pool=None) for row in cost["services"]]
        answer["cost"] = {"pools": [], "queues": mine, "jobs": jobs_cost, "services": services_cost}
    return answer
