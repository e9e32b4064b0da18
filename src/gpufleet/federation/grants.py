"""The quota a manager gives a worker: each managed job runs in the worker inside a queue of the same
name whose nominal quota is what the manager dispatched there from that queue.

The manager's queue counts its quota over the whole fleet (`federation.dispatch`); the worker needs a
queue to admit the job in, and the quota it gets is the manager's grant: per flavor, the GPUs of the
queue's jobs the manager holds in that worker, the job being sent included. Each job is granted its
full request (every pod, not only `minCount`), so an elastic job can grow to its size in the worker.
The worker's copy is a root queue (the manager's tree is not copied: fair share and borrowing between
queues are the manager's business), keeps the manager's preemption, weight and minimum runtime, and is
marked `gpufleet.io/managed-by`. A worker's own queue of that name (not marked) is left as it is: its
owner's quota applies there. The manager brings its queues in each answering worker to the grant every
pass, so a grant shrinks as work ends or moves away (to no quota at all when none is left).

Pure: no store, no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import FlavorQuota, Queue
from gpufleet.federation.link import MANAGED_BY
from gpufleet.scheduler.flavors import usage_of
from gpufleet.scheduler.workload import Workload

Grant = dict[str, int]
"""Milli-GPU per flavor."""


def full_usage(workload: Workload, model: str | None) -> Grant:
    """What a job may use in its worker: every pod of every pod set, on the model it was charged on."""
    return usage_of(workload, model, tuple(ps.count for ps in workload.pod_sets))


class Grants:
    """What the manager has given each (cluster, queue), built up over one pass."""

    def __init__(self) -> None:
        self._given: defaultdict[tuple[str, str], Grant] = defaultdict(dict)

    def add(self, cluster: str, queue: str, usage: Mapping[str, int]) -> None:
        given = self._given[(cluster, queue)]
        for flavor, milli in usage.items():
            given[flavor] = given.get(flavor, 0) + milli

    def with_(self, cluster: str, queue: str, usage: Mapping[str, int]) -> Grant:
        """The grant of (cluster, queue) once `usage` is added, without adding it."""
        given = dict(self._given.get((cluster, queue), {}))
        for flavor, milli in usage.items():
            given[flavor] = given.get(flavor, 0) + milli
        return given


def worker_queue(queue: Queue, grant: Mapping[str, int], *, manager: str) -> Queue:
    """The worker's copy of the manager's `queue` with `grant` (milli-GPU per flavor) as its quota."""
    quotas = {
        flavor: FlavorQuota(nominal=milli // 1000 if milli % 1000 == 0 else milli / 1000, borrowing_limit=0)
        for flavor, milli in sorted(grant.items())
    }
    spec = queue.spec.model_copy(update={"parent": None, "quotas": quotas, "flavor_order": None})
    return Queue(
        metadata=ObjectMeta(
            name=queue.name, labels=dict(queue.metadata.labels), annotations={MANAGED_BY: manager}
        ),
        spec=spec,
    )


def same_grant(current: Queue, wanted: Queue) -> bool:
    """Whether the worker's queue already has what `wanted` gives it (so nothing is written)."""
    marks = (current.metadata.annotations.get(MANAGED_BY), wanted.metadata.annotations.get(MANAGED_BY))
    return current.spec == wanted.spec and marks[0] == marks[1]
