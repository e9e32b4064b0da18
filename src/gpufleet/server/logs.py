"""`GET /v1/logs/{namespace}/{kind}/{name}`: the log of a pod, or of every pod of a job or service.

The server keeps no logs itself: whoever runs a digital twin next to it hands over the twin's pod
log book (`twin.podlogs`), which this module knows only by the `LogSource` protocol below, since the
server imports no world. The object asked about must exist and be readable with the caller's token,
as for a `get`; a job's log includes the pods of its earlier attempts, which are gone.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint's annotations at run time.

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import pydantic
from fastapi import Depends, FastAPI, Query
from fastapi.responses import JSONResponse

from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.kinds import kind_info
from gpufleet.api.resource import KindInfo
from gpufleet.server.auth import Principal
from gpufleet.server.errors import error_responses
from gpufleet.server.operations import Operations

LOGGED_KINDS = ("Pod", "TrainingJob", "InferenceService")


class LogLineView(Protocol):
    @property
    def number(self) -> int: ...
    @property
    def pod(self) -> str: ...
    @property
    def text(self) -> str: ...


class LogPageView(Protocol):
    @property
    def lines(self) -> Sequence[LogLineView]: ...
    @property
    def next(self) -> int: ...


class LogSource(Protocol):
    """The pods' logs of a world (the twin's log book)."""

    def pods_of(self, namespace: str, kind: str, name: str) -> list[str]: ...

    def read(self, namespace: str, pods: Iterable[str], *, after: int = 0) -> LogPageView: ...


class LogEntry(pydantic.BaseModel):
    pod: str = pydantic.Field(description="The pod the line is of.")
    line: str = pydantic.Field(description="The line: the fleet time it happened at, then what happened.")


class LogAnswer(pydantic.BaseModel):
    items: list[LogEntry] = pydantic.Field(description="The lines after `after`, oldest first.")
    next: int = pydantic.Field(description="Ask with after=this for the lines still to come (following).")


def add_log_route(
    app: FastAPI, ops: Operations, logs: LogSource | None, authenticate: Callable[..., Any]
) -> None:
    @app.get(
        "/v1/logs/{namespace}/{kind}/{name}",
        tags=["server"],
        summary="Read the log of a pod, or of every pod of a job or service",
        response_model=LogAnswer,
        responses=error_responses(401, 403, 404, 422),
    )
    def read_logs(
        namespace: str,
        kind: str,
        name: str,
        after: int = Query(default=0, ge=0, description="Only lines numbered after this (from `next`)."),
        who: Principal = Depends(authenticate),
    ) -> JSONResponse:
        info = _logged_kind(kind)
        ops.get(who, info, name, namespace)  # it exists and the token may read it
        if logs is None:
            raise NotFoundError("this server runs no digital twin whose pods have logs")
        pods = [name] if info.kind == "Pod" else logs.pods_of(namespace, info.kind, name)
        page = logs.read(namespace, pods, after=after)
        items = [{"pod": line.pod, "line": line.text} for line in page.lines]
        return JSONResponse({"items": items, "next": page.next})


def _logged_kind(name: str) -> KindInfo:
    """The kind a path names by its plural (`trainingjobs`) or its name (`TrainingJob`)."""
    for kind in LOGGED_KINDS:
        info = kind_info(kind)
        if info is not None and name in (info.kind, info.plural):
            return info
    raise ValidationError(f"no logs of {name!r}: give pods, trainingjobs or inferenceservices", field="kind")
