"""Checks a write must pass that look at other stored objects: a Queue's parent, a queue in use.

A Queue whose parent does not exist (or whose parent links would loop) cannot be part of the quota
tree; stored, it would leave the scheduler without a tree. So a write is checked against the queues
the store would hold after it: the stored ones with the request's own queues laid over them, which
lets one multi-document apply create a parent after its children (it is applied all or none).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence

from gpufleet.api.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.api.meta import check_name
from gpufleet.api.queue import Queue
from gpufleet.api.resource import Resource
from gpufleet.store.protocol import Store

DEFAULT_QUEUE = "default"
"""The one queue there is while no Queue is stored (see `controllers.convert.quota_tree`)."""

# Kinds submitted to a queue (`spec.queue`) and the phases in which they no longer use it.
QUEUED_KINDS = ("TrainingJob", "InferenceService", "Workload")
_FINISHED = frozenset({"Succeeded", "Failed", "Inactive"})


def queues_after(store: Store, objects: Sequence[Resource]) -> dict[str, Queue]:
    """The queues the store would hold once `objects` are written (by name)."""
    queues: dict[str, Queue] = {q.name: q for q in store.list(Queue).items}
    for obj in objects:
        if isinstance(obj, Queue):
            queues[obj.name] = obj
    return queues


def check_queues(store: Store, objects: Sequence[Resource]) -> None:
    """Every Queue written names an existing parent (or one written with it) and forms no cycle."""
    written = [obj for obj in objects if isinstance(obj, Queue)]
    if not written:
        return
    queues = queues_after(store, objects)
    for queue in written:
        problem = parent_problem(queue.name, queues)
        if problem is not None:
            raise ValidationError(problem, obj=queue.describe(), field="spec.parent")


def check_queue_refs(store: Store, objects: Sequence[Resource]) -> None:
    """Every job, service or workload written names a leaf queue that exists (or is written with it).

    Only once queues are configured: with none at all the store is not set up for quotas yet (the
    tree is one unlimited queue `default`), and objects may be written before their queues; those
    that name a missing queue then wait with the reason `QueueNotFound`."""
    queued = [obj for obj in objects if obj.kind in QUEUED_KINDS]
    if not queued:
        return
    queues = queues_after(store, objects)
    if not queues:
        return
    parents = {q.spec.parent for q in queues.values()}
    for obj in queued:
        name = getattr(getattr(obj, "spec", None), "queue", None)
        if not isinstance(name, str):
            continue
        if name not in queues:
            leaves = sorted(q for q in queues if q not in parents)
            raise ValidationError(unknown_queue_message(name, leaves), obj=obj.describe(), field="spec.queue")
        if name in parents:
            raise ValidationError(
                f"queue {name!r} has child queues; submit to one of its leaf queues",
                obj=obj.describe(),
                field="spec.queue",
            )


LISTED_QUEUES = 5
"""How many leaf queues an unknown-queue error names: a fleet may have thousands."""


def unknown_queue_message(name: str, known: Sequence[str], what: str = "leaf queues") -> str:
    """Why `name` is refused: the closest of the `known` queues, and a few of them (a fleet may have
    thousands; the message stays one line)."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if len(known) <= LISTED_QUEUES:
        listed = f"{what}: {', '.join(known)}"
    else:
        listed = (
            f"{len(known)} {what}, among them {', '.join(known[:LISTED_QUEUES])}; "
            "`gpufleet get queues` lists them all"
        )
    return f"unknown queue {name!r}{hint} ({listed})"


def check_queue_exists(store: Store, name: str) -> None:
    """A token is made only for a queue there is: `default` while no queue is stored, else a stored one."""
    try:
        check_name(name)
    except ValueError as exc:
        raise ValidationError(str(exc), field="queue") from None
    queues = queues_after(store, ())
    if name in queues or (not queues and name == DEFAULT_QUEUE):
        return
    known = sorted(queues) or [DEFAULT_QUEUE]
    raise NotFoundError(unknown_queue_message(name, known, "queues"), obj=f"Queue {name}")


def parent_problem(name: str, queues: Mapping[str, Queue]) -> str | None:
    """Why the queue `name` cannot hang in the tree of `queues`, or None if it can."""
    seen = {name}
    current = queues[name]
    while current.spec.parent is not None:
        parent = current.spec.parent
        if parent not in queues:
            if current.name == name:
                return f"unknown queue {parent!r} (create the parent queue first, or in the same apply)"
            return f"its ancestor {current.name!r} has an unknown parent queue {parent!r}"
        if parent in seen:
            return f"parent links would form a cycle through {parent!r}"
        seen.add(parent)
        current = queues[parent]
    return None


def check_queue_delete(store: Store, name: str) -> None:
    """A queue with child queues, or with unfinished work submitted to it, is not deleted (409):
    its children would be left without a parent and its workloads without a queue."""
    check_queue_deletes(store, [name], ())


def check_queue_deletes(store: Store, names: Sequence[str], going: Collection[ObjectKey]) -> None:
    """`check_queue_delete` for queues deleted together, with the objects `going` in the same
    request: a child queue deleted with its parent, or work deleted with its queue (a job or service
    and the Workloads it owns), does not hold the queue back. Each kind is listed once, however
    many queues are deleted."""
    if not names:
        return
    deleted = set(names)
    kept: dict[str, list[str]] = {}
    for queue in store.list(Queue).items:
        if queue.spec.parent in deleted and queue.name not in deleted:
            kept.setdefault(queue.spec.parent, []).append(queue.name)
    for parent in names:
        if parent in kept:
            raise ConflictError(
                f"has child queues {', '.join(sorted(kept[parent]))}; delete or move them first",
                obj=f"Queue {parent}",
            )
    for kind in QUEUED_KINDS:
        for obj in store.list(kind).items:
            spec = getattr(obj, "spec", None)
            queue_name = getattr(spec, "queue", None)
            if queue_name not in deleted or _goes(obj, going):
                continue
            phase = getattr(getattr(obj, "status", None), "phase", None)
            if phase not in _FINISHED:
                raise ConflictError(
                    f"{obj.describe()} is submitted to it; delete it or wait until it finishes",
                    obj=f"Queue {queue_name}",
                )


ObjectKey = tuple[str, str | None, str]
"""(kind, namespace or None, name) of an object a request deletes."""


def _goes(obj: Resource, going: Collection[ObjectKey]) -> bool:
    """Whether `obj` is deleted by the request, itself or through the job or service that owns it."""
    if (obj.kind, obj.namespace, obj.name) in going:
        return True
    owner = getattr(getattr(obj, "spec", None), "owner", None)
    kind, name = getattr(owner, "kind", None), getattr(owner, "name", None)
    return isinstance(kind, str) and isinstance(name, str) and (kind, obj.namespace, name) in going
