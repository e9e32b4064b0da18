"""What the embedded scheduling controller knows between steps, shared by its four parts.

The cache part fills it from the store, the actions part and the growth part change it as they carry
out decisions, the status part writes what it says back. One object holds it so that each part is a
module of its own (as `kube/cache.py`, `kube/actions.py` and `kube/queues.py` are in the Kubernetes
world) without any part reaching into another's attributes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from gpufleet.api.dra import ResourceClaim
from gpufleet.api.errors import NotFoundError
from gpufleet.api.pool import GPUPool
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import Node, Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import claims, convert, jobstate
from gpufleet.controllers.scheduling.claimsync import ClaimSync
from gpufleet.controllers.scheduling.workloadtable import WorkloadTable
from gpufleet.controllers.timeutil import to_seconds
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.store.protocol import Store

SOURCE = "scheduler"


@dataclass(slots=True)
class Broken:
    reason: str
    message: str


@dataclass(slots=True)
class SchedulingStats:
    """Counters for tests and the dashboard."""

    cycles: int = 0
    admitted: int = 0
    evicted: int = 0
    forgotten: int = 0
    rebuilds: int = 0


@dataclass(slots=True, eq=False)
class SchedulingState:
    """The scheduler cache and the store's objects it was built from, with what is still to do."""

    store: Store
    config: SchedulerConfig
    export_metrics: bool = True
    """Whether cycles, admissions, binds, evictions, waiting workloads, queues' quota and the fleet's
    GPUs are kept in the process's Prometheus series (the job simulator's process serves none)."""
    cache: ClusterCache | None = None
    workloads: WorkloadTable = field(default_factory=WorkloadTable)
    pods: dict[str, dict[str, Pod]] = field(default_factory=dict)
    """Per workload key, its pods by core pod name."""
    nodes: dict[str, Node] = field(default_factory=dict)
    pools: dict[str, GPUPool] = field(default_factory=dict)
    queue_generations: dict[str, int | None] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    queues_dirty: bool = True
    invalid_queues: dict[str, str] = field(default_factory=dict)
    """Queues left out of the quota tree, with why (shown as their `Valid` condition)."""
    backoff: dict[str, float] = field(default_factory=dict)
    """Evicted workloads waiting out their backoff, with when they may be queued again."""
    broken: dict[str, Broken] = field(default_factory=dict)
    """Admitted gangs to evict whole at the next step, with why."""
    unqueued: dict[str, list[str]] = field(default_factory=dict)
    """Admitted workloads whose queue is gone (deleted, or left out of the quota tree), with their pods'
    core names: as in the Kubernetes world, they run on with their GPUs held and their quota not
    counted, outside the cache's admitted set (nothing charges or evicts them), until they end or their
    queue is back."""
    reasons: dict[str, object] = field(default_factory=dict)
    """The pending reason last written per workload, as the core or the claim check gave it (written
    again only when it changes)."""
    claims: ClaimSync = field(default_factory=ClaimSync)
    """The stored ResourceClaims and templates (DRA)."""
    claim_workloads: set[str] = field(default_factory=set)
    """Workloads whose pods name ResourceClaims: derived again when claims, templates or devices change."""
    grow: set[str] = field(default_factory=set)
    """Elastic workloads running short that just checkpointed: candidates to restart larger."""
    left_out: dict[str, int] = field(default_factory=dict)
    """Workloads the scheduler failed on with an error no user caused (`controllers.failures`), with the
    resource version it failed on: out of scheduling until the object changes, so one bad object does
    not stop every pass. What such a workload holds stays held."""
    failures: int = 0
    """Workloads and nodes the scheduler failed on that way (each time it failed)."""
    dirty: bool = True
    needs_rebuild: bool = True
    last_now: float = 0.0
    stats: SchedulingStats = field(default_factory=SchedulingStats)

    def attempt(self, key: str) -> int:
        obj = self.workloads.get(key)
        return obj.status.attempts if obj is not None else 0

    def delete_pod(self, pod: Pod) -> None:
        """Deletes the pod, and releases its ResourceClaims at once (as the resource-claim controller
        would), so their devices are free in the store when the scheduler frees them in its cache."""
        with contextlib.suppress(NotFoundError):
            self.store.delete(Pod, pod.name, pod.namespace)
        if pod.spec.resource_claims:
            for claim, deleted in claims.release_pod(self.store, pod):
                self.claim_changed(claim, deleted=deleted)

    def claim_changed(self, claim: ResourceClaim, *, deleted: bool) -> None:
        """A stored claim changed: the index follows, and devices pinned to it are free once it no
        longer holds them."""
        self.claims.observe(claim, deleted=deleted)
        if self.cache is not None and (deleted or claim.status.allocation is None):
            self.cache.fleet.devices.unpin(convert.workload_key(claim.namespace, claim.name))


def restart_decision(obj: WorkloadObject, now: float) -> jobstate.RestartDecision:
    """The shared restart rule (`jobstate.restart_decision`) over what this world records: every
    eviction in the workload's status, the latest with its time, and the workload's restart policy."""
    evictions = obj.status.evictions
    last = None
    if evictions:
        latest = evictions[-1]
        last = jobstate.Disruption(latest.reason, latest.message, at=to_seconds(latest.time))
    return jobstate.restart_decision(
        restarts=len(evictions),
        last=last,
        max_restarts=obj.spec.max_restarts,
        backoff_seconds=obj.spec.backoff_seconds,
        now=now,
    )


def gone(pod: Pod) -> bool:
    return pod.metadata.deletion_timestamp is not None


def older(new: Node | Pod | WorkloadObject, known: Node | Pod | WorkloadObject) -> bool:
    """Whether `new` is a state we already saw or one before it (our own writes are applied at once)."""
    if new.metadata.uid != known.metadata.uid:
        return False
    return rv(new) <= rv(known) and rv(new) != 0


def rv(obj: Node | Pod | WorkloadObject | Queue) -> int:
    return int(obj.metadata.resource_version or 0)
