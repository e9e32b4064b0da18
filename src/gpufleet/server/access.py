"""What a principal may read and write.

The admin may do anything. A queue's token sees only its queue: the Queue object itself (read
only) and the objects submitted to it, i.e. those whose `spec.queue` names it (TrainingJobs,
InferenceServices). Reads of anything else answer as if the object did not exist, so a team
cannot learn the names of another team's jobs; writes that name another queue are refused with 403.
"""

from __future__ import annotations

from typing import Any

from gpufleet.api.errors import NotFoundError
from gpufleet.api.resource import KindInfo, Resource, kind_info
from gpufleet.server.auth import Principal
from gpufleet.server.errors import ForbiddenError


def queue_of(obj: Resource) -> str | None:
    """The queue an object was submitted to (`spec.queue`), or None for objects outside queues."""
    spec: Any = getattr(obj, "spec", None)
    queue = getattr(spec, "queue", None)
    return queue if isinstance(queue, str) else None


def submits_to_queue(info: KindInfo) -> bool:
    """Whether objects of the kind carry a `spec.queue` (jobs and services)."""
    spec = info.model.model_fields.get("spec")
    annotation = getattr(spec, "annotation", None)
    fields = getattr(annotation, "model_fields", {})
    return "queue" in fields


def may_read(principal: Principal, obj: Resource) -> bool:
    if principal.admin:
        return True
    if obj.kind == "Queue":
        return obj.name == principal.queue
    return queue_of(obj) == principal.queue


def check_kind_readable(principal: Principal, info: KindInfo) -> None:
    """A queue's token may list queues and queued kinds only."""
    if principal.admin or info.kind == "Queue" or submits_to_queue(info):
        return
    raise ForbiddenError(f"{principal.describe()} may not read {info.plural}")


def check_readable(principal: Principal, obj: Resource) -> None:
    if not may_read(principal, obj):
        raise NotFoundError("not found", obj=obj.describe())


def check_writable(principal: Principal, obj: Resource, existing: Resource | None) -> None:
    """A queue's token may create, change and delete only objects submitted to its own queue."""
    if principal.admin:
        return
    if not submits_to_queue(_info_of(obj)):
        raise ForbiddenError(f"{principal.describe()} may not write {obj.kind} objects", obj=obj.describe())
    if queue_of(obj) != principal.queue:
        raise ForbiddenError(
            f"{principal.describe()} may only submit to queue {principal.queue}, not {queue_of(obj)}",
            obj=obj.describe(),
            field="spec.queue",
        )
    if existing is not None and queue_of(existing) != principal.queue:
        raise ForbiddenError(
            f"the object exists in queue {queue_of(existing)}; {principal.describe()} may not change it",
            obj=obj.describe(),
            field="spec.queue",
        )


def _info_of(obj: Resource) -> KindInfo:
    info = kind_info(obj.kind)
    if info is None:  # pragma: no cover - objects are built from registered kinds only
        raise ForbiddenError(f"kind {obj.kind} is not served", obj=obj.describe())
    return info
