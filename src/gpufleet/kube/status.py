"""Status writes shared by the operator's reconcilers: timestamps, conditions, merge patches, Events."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.api.errors import GpuFleetError
from gpufleet.kube.actions import Actions
from gpufleet.kube.resources import ResourceType
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

OPERATOR = "gpufleet-operator"


def stamp(now: float) -> str:
    """An API timestamp (RFC 3339, seconds) for a clock reading."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_condition(status: Json, kind: str, value: str, reason: str, message: str, now: float) -> list[Json]:
    """The conditions with `kind` set; its transition time moves only when its status does."""
    conditions = [dict(c) for c in status.get("conditions") or []]
    found = next((c for c in conditions if c.get("type") == kind), None)
    since = found.get("lastTransitionTime") if found is not None and found.get("status") == value else None
    entry = {"type": kind, "status": value, "reason": reason, "message": message}
    entry["lastTransitionTime"] = since or stamp(now)
    return [c for c in conditions if c.get("type") != kind] + [entry]


INVALID_SPEC = "InvalidSpec"
"""The condition reason of an object the API server stored but gpufleet's checks refuse."""


def invalid_spec(raw: Json, condition: str, value: str, exc: GpuFleetError, now: float) -> Json | None:
    """The status update of a stored object gpufleet's checks refuse: Failed, with `condition` set to
    `value` for `InvalidSpec` and the object, field and why as its message. None for an object being
    deleted, which needs none."""
    if raw["metadata"].get("deletionTimestamp"):
        return None
    text = str(exc)
    message = text if len(text) <= 1024 else text[:1024] + "..."
    status = dict(raw.get("status") or {})
    return {
        "phase": "Failed",
        "conditions": with_condition(status, condition, value, INVALID_SPEC, message, now),
    }


def patch_status(api: Transport, resource: ResourceType, raw: Json, update: Json) -> bool:
    """Merges `update` into the object's status unless it already says so; False if the object is gone."""
    meta = raw["metadata"]
    current = raw.get("status") or {}
    if all(current.get(k) == v for k, v in update.items()):
        return True
    path = resource.item(meta["name"], meta.get("namespace"), "status")
    try:
        api.request("PATCH", path, body={"status": update}, content_type=MERGE_PATCH)
    except ApiError as exc:
        if exc.status != 404:
            raise
        return False
    return True


def operator_event(api: Transport, obj: Json, *, reason: str, message: str, type: str = "Normal") -> None:
    """A core/v1 Event from the operator about `obj` (best effort)."""
    Actions(api, identity=OPERATOR, component=OPERATOR).event(obj, reason=reason, message=message, type=type)
