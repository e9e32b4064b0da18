"""The web console's live events in the Kubernetes world: core/v1 Events, in every namespace, as the
changes of gpufleet Events the page reads from `GET /v1/changes?kind=Event`.

No cursor: the latest Events of a list, and the list's resourceVersion. A cursor: a watch from it that
the server ends after a short window (`WINDOW_SECONDS`), so an Event reaches the page within that;
a cursor the server has compacted away (410) starts again from a list.
"""

from __future__ import annotations

import math
from typing import Any

from gpufleet.kube.transport import ApiError, Json, Transport

EVENTS = "/api/v1/events"
WINDOW_SECONDS = 2
"""How long one long poll watches at most. A watch cannot be left early without abandoning its
connection, so the window is short: it bounds how late a new Event is shown."""


def gpufleet_event(raw: Json) -> Json:
    """A core/v1 Event as a gpufleet Event's JSON form (what the page draws)."""
    meta = raw.get("metadata") or {}
    involved = raw.get("involvedObject") or {}
    time = (
        raw.get("eventTime")
        or raw.get("lastTimestamp")
        or raw.get("firstTimestamp")
        or meta.get("creationTimestamp")
    )
    return {
        "kind": "Event",
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace") or ""},
        "spec": {
            "involvedKind": involved.get("kind") or "",
            "involvedName": involved.get("name") or "",
            "type": raw.get("type") or "Normal",
            "reason": raw.get("reason") or "",
            "message": raw.get("message") or "",
            "time": time,
            "source": raw.get("reportingComponent") or (raw.get("source") or {}).get("component") or "",
        },
    }


class KubeEvents:
    """The `EventFeed` of `gpufleet.server.console.standalone` over one API server."""

    def __init__(self, api: Transport) -> None:
        self._api = api

    def changes(self, since: str | None, *, limit: int, wait: float) -> tuple[list[dict[str, Any]], str]:
        if since is not None:
            try:
                return self._watched(since, limit, wait)
            except ApiError as exc:
                if exc.status != 410:
                    raise
        return self._listed(limit)

    def _listed(self, limit: int) -> tuple[list[dict[str, Any]], str]:
        answer = self._api.request("GET", EVENTS)
        events = sorted((gpufleet_event(e) for e in answer.get("items") or []), key=_time)[-limit:]
        cursor = str((answer.get("metadata") or {}).get("resourceVersion") or "0")
        return [{"type": "ADDED", "object": e} for e in events], cursor

    def _watched(self, since: str, limit: int, wait: float) -> tuple[list[dict[str, Any]], str]:
        seconds = max(1, min(WINDOW_SECONDS, math.ceil(wait)))
        query: dict[str, str | int | bool] = {
            "resourceVersion": since,
            "timeoutSeconds": seconds,
            "allowWatchBookmarks": True,
        }
        changes: list[dict[str, Any]] = []
        cursor = since
        for event in self._api.watch(EVENTS, query=query, timeout=seconds + 10):
            obj = event.get("object") or {}
            cursor = str((obj.get("metadata") or {}).get("resourceVersion") or cursor)
            if event.get("type") in ("ADDED", "MODIFIED"):
                changes.append({"type": event["type"], "object": gpufleet_event(obj)})
        return changes[-limit:], cursor


def _time(event: Json) -> str:
    return str(event["spec"]["time"] or "")
