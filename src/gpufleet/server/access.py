"""What a principal may read and write.

The admin may do anything. A queue's token sees only its queue: the Queue object itself (read
only), the objects submitted to it, i.e. those whose `spec.queue` names it (TrainingJobs,
InferenceServices, Workloads), and the Events about any of these (read only), so that `describe`
shows a team why its job was evicted. Reads of anything else answer as if the object did not
exist, so a team cannot learn the names of another team's jobs; writes that name another queue are
refused with 403. Only the admin writes status (`.../status`).

An Event names its object by kind and name (in the Event's namespace, or none for a cluster-wide
kind); whether it may be read is decided by reading that object, through a `Lookup` the caller
gives. An Event whose object is gone is not shown to queue tokens: nothing says whose it was.

The federation tokens of a join have rules of their own (`federation_access`), checked here first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet.api.errors import NotFoundError
from gpufleet.api.kinds import kind_info
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.server import federation_access as federation
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


Lookup = Callable[[str, str, str | None], Resource | None]
"""(kind, name, namespace) -> the object, or None if there is none."""

EVENT = "Event"


def may_read(principal: Principal, obj: Resource, lookup: Lookup | None = None) -> bool:
    """Whether the principal may see `obj`; for an Event, `lookup` finds its object (none: no)."""
    if principal.admin:
        return True
    if principal.role is not None:
        about = None if lookup is None or obj.kind != EVENT else involved_object(obj, lookup)
        return federation.may_read(principal.role, principal.cluster, obj, about)
    if obj.kind == EVENT:
        involved = None if lookup is None else involved_object(obj, lookup)
        return involved is not None and involved.kind != EVENT and may_read(principal, involved)
    if obj.kind == "Queue":
        return obj.name == principal.queue
    return queue_of(obj) == principal.queue


def involved_object(event: Resource, lookup: Lookup) -> Resource | None:
    """The object an Event is about, as it is now; None if it is gone or its kind is unknown."""
    spec: Any = getattr(event, "spec", None)
    kind, name = getattr(spec, "involved_kind", None), getattr(spec, "involved_name", None)
    info = kind_info(kind) if isinstance(kind, str) else None
    if info is None or not isinstance(name, str):
        return None
    return lookup(info.kind, name, event.namespace if info.namespaced else None)


def check_kind_readable(principal: Principal, info: KindInfo) -> None:
    """A queue's token may list queues, queued kinds and events (each filtered by `may_read`)."""
    if principal.role is not None:
        federation.check_kind_readable(principal.role, principal.cluster, info)
        return
    if principal.admin or info.kind in ("Queue", EVENT) or submits_to_queue(info):
        return
    raise ForbiddenError(f"{principal.describe()} may not read {info.plural}")


def check_readable(principal: Principal, obj: Resource, lookup: Lookup | None = None) -> None:
    if not may_read(principal, obj, lookup):
        raise NotFoundError("not found", obj=obj.describe())


def check_writable(principal: Principal, obj: Resource, existing: Resource | None) -> None:
    """A queue's token may create, change and delete only objects submitted to its own queue."""
    if principal.admin:
        return
    if principal.role is not None:
        federation.check_writable(principal.role, principal.cluster, obj, existing)
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


def check_status_writable(principal: Principal, info: KindInfo, name: str) -> None:
    """Status is the controllers' record of what happened: only the admin (and through it external
    controllers) may write it, and a federation token what its role writes (a worker its own Cluster's).
    The answer depends on no stored object, so it reveals nothing."""
    if principal.role is not None:
        federation.check_status_writable(principal.role, principal.cluster, info, name)
        return
    if not principal.admin:
        raise ForbiddenError(f"{principal.describe()} may not write the status of {info.plural}")


def check_person(principal: Principal, what: str) -> None:
    """The web console is for people: a federation token, one plane's credential in another, is
    refused there rather than shown what the queue tokens' views would make of it."""
    if principal.role is not None:
        raise ForbiddenError(f"{principal.describe()} may not {what}")


def check_status_object(principal: Principal, obj: Resource) -> None:
    """What `check_status_writable` could not tell without the object: a federation token's marks."""
    if principal.role is not None:
        federation.check_status_object(principal.role, principal.cluster, obj)
