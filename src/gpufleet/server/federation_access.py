"""What the two federation tokens of a join may do (`gpufleet cluster join` mints them).

A joined worker and its manager each hold a token of the other plane. Neither is the admin token, so
a leaked one cannot do what the admin can there:

- `federation-manager`, in a worker: what the manager's `WorkerClient` does there. It reads the
  worker's TrainingJobs and InferenceServices (all of them: a queue the manager made is deleted only
  once no job or service there names it), its Queues (a queue of the worker's own is left alone), its
  Checkpoints (one the worker already holds is not carried there again) and the Events about managed
  work; it creates, changes and deletes only objects marked
  `gpufleet.io/managed-by` (copies, the queues it grants quota in, carried Checkpoints), before and
  after the write, and writes the status of such Checkpoints only (marked Complete).
- `federation-worker`, in the manager: what one worker's `ManagerLink` does there. It reads its own
  Cluster and writes that Cluster's status (the heartbeat and summary), nothing else; other Clusters
  answer as if they did not exist.

What a role may not do is refused with 403 naming the role, the verb and the kind; a read of a single
object it may not see answers 404, as for a queue token. Both roles are checked before anything else,
so nothing of the queue tokens' rules applies to them.
"""

from __future__ import annotations

from typing import Literal

from gpufleet.api.labels import MANAGED_BY_ANNOTATION
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.server.errors import ForbiddenError

Role = Literal["federation-manager", "federation-worker"]
MANAGER_ROLE: Role = "federation-manager"
WORKER_ROLE: Role = "federation-worker"
ROLES: tuple[Role, ...] = (MANAGER_ROLE, WORKER_ROLE)

EVENT = "Event"
MANAGED_KINDS = frozenset({"TrainingJob", "InferenceService"})
_MANAGER_READS = MANAGED_KINDS | {"Queue", "Checkpoint", EVENT}
_MANAGER_WRITES = MANAGED_KINDS | {"Queue", "Checkpoint"}
_MANAGER_STATUS = frozenset({"Checkpoint"})
_CLUSTER = "Cluster"


def describe(role: Role, cluster: str | None) -> str:
    if role == WORKER_ROLE:
        return f"the federation token of cluster {cluster}"
    return "the federation manager's token"


def managed(obj: Resource) -> bool:
    return MANAGED_BY_ANNOTATION in obj.metadata.annotations


def may_read(role: Role, cluster: str | None, obj: Resource, involved: Resource | None) -> bool:
    """Whether the role sees `obj`; for an Event, `involved` is the object it is about (None: gone)."""
    if role == WORKER_ROLE:
        return obj.kind == _CLUSTER and obj.name == cluster
    if obj.kind == EVENT:
        return involved is not None and involved.kind in MANAGED_KINDS and managed(involved)
    return obj.kind in _MANAGER_READS


def check_kind_readable(role: Role, cluster: str | None, info: KindInfo) -> None:
    kinds = {_CLUSTER} if role == WORKER_ROLE else _MANAGER_READS
    if info.kind not in kinds:
        raise ForbiddenError(f"{describe(role, cluster)} may not read {info.plural}")


def check_writable(role: Role, cluster: str | None, obj: Resource, existing: Resource | None) -> None:
    """The manager's token writes only managed objects of its kinds; the worker's token writes no
    object (its Cluster's status is `check_status_writable`'s)."""
    verb = "create" if existing is None else "change or delete"
    who = describe(role, cluster)
    if role == WORKER_ROLE or obj.kind not in _MANAGER_WRITES:
        raise ForbiddenError(f"{who} may not {verb} {obj.kind} objects", obj=obj.describe())
    field = f"metadata.annotations[{MANAGED_BY_ANNOTATION}]"
    if existing is not None and not managed(existing):
        raise ForbiddenError(
            f"{who} may not {verb} {obj.kind} objects of the cluster's own (not marked "
            f"{MANAGED_BY_ANNOTATION})",
            obj=obj.describe(),
            field=field,
        )
    if not managed(obj):
        raise ForbiddenError(
            f"{who} may {verb} only {obj.kind} objects marked {MANAGED_BY_ANNOTATION} (the manager's)",
            obj=obj.describe(),
            field=field,
        )


def check_status_writable(role: Role, cluster: str | None, info: KindInfo, name: str) -> None:
    """The worker's token writes its own Cluster's status; the manager's token a Checkpoint's."""
    if role == WORKER_ROLE:
        allowed = info.kind == _CLUSTER and name == cluster
    else:
        allowed = info.kind in _MANAGER_STATUS
    if not allowed:
        target = f"{info.kind} {name}" if role == WORKER_ROLE and info.kind == _CLUSTER else info.plural
        raise ForbiddenError(f"{describe(role, cluster)} may not write the status of {target}")


def check_status_object(role: Role, cluster: str | None, obj: Resource) -> None:
    """The manager's token marks Complete only the Checkpoints it carried (managed ones)."""
    if role == MANAGER_ROLE and not managed(obj):
        raise ForbiddenError(
            f"{describe(role, cluster)} may write the status only of {obj.kind} objects the manager made",
            obj=obj.describe(),
        )
