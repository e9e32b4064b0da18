"""The scheduling controller: keeps the scheduler's cache from the store and carries out its decisions.

Cache. `ClusterCache` (fleet, quota tree, admitted and pending workloads) is built once from a full
listing, then kept up to date from watch events: Node changes move fleet rows (cordon, GPU health),
Workload changes move workloads between pending and admitted, Pod failures mark gangs broken. The
allocations of admitted workloads come from their bound Pods, so after a restart the cache is rebuilt
from exactly what is bound and no GPU can be handed out twice. Queue changes rebuild the cache.

Decisions (Kueue's assume-then-write). An admission is assumed in the cache at once; then the bound
Pods are created and the Workload's status is written. If a write fails the assumption is forgotten,
the Pods already created are deleted and the workload is tried again. Order matters for crashes:
Pods are created before the status says Admitted, and an eviction writes the status before deleting
Pods; the rebuild deletes any Pod whose workload is not admitted (an orphan), so a crash between the
two writes leaves nothing half-applied.

Evictions. A gang with a failed or vanished pod, or one on a lost node, is evicted whole. Every
eviction is recorded in the Workload's status with its cause and the work it lost (GPUs times the
seconds since the later of the run's start and a checkpoint taken during it: the core's rule in
`scheduler.lostwork`); the workload then waits `backoffSeconds` before it is queued again, or fails
once it was evicted more than `maxRestarts` times.

Elastic workloads. The core admits one with as many pods as fit (at least its minimum) and shrinks it
toward the minimum before evicting anyone; a shrink deletes only the pods it takes and is not an
eviction. The core never grows an admitted workload, so this controller does, by restart at the
larger size right after the workload checkpoints, and only while nothing else waits (`_grow`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass

from gpufleet.api.errors import ConflictError, GpuFleetError, NotFoundError
from gpufleet.api.labels import JOB_LABEL, SERVICE_LABEL, WORKLOAD_LABEL
from gpufleet.api.meta import Condition, ObjectMeta, PendingReason, set_condition
from gpufleet.api.pool import GPUPool
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import (
    TOPOLOGY_LEVELS,
    Admission,
    Eviction,
    MigAssignment,
    Node,
    NodeDemand,
    Pod,
    PodSpec,
)
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import capacity, convert, events, jobstate, nodesync, queuestatus
from gpufleet.controllers.decisions import Carrier, run_cycles
from gpufleet.controllers.queuestatus import queue_reason
from gpufleet.controllers.timeutil import to_datetime, to_seconds
from gpufleet.fleet.state import Allocation, AllocationError, FleetState
from gpufleet.scheduler import explain
from gpufleet.scheduler.cache import Admitted, ClusterCache
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.cycle import CycleResult, Scheduler
from gpufleet.scheduler.explain import Admit, Preempt, Reason
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.lostwork import attempt_start, lost_gpu_seconds
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import QuotaTree
from gpufleet.store.protocol import Store, WatchEvent

log = logging.getLogger(__name__)

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


class SchedulingController:
    """Owns the scheduler cache and is the only writer of Workload status and of Pod creation."""

    name = "scheduling"
    kinds: tuple[str, ...] = ("Node", "Pod", "Workload", "Queue", "GPUPool")

    def __init__(
        self,
        store: Store,
        *,
        config: SchedulerConfig | None = None,
        resync_seconds: float = 30.0,
    ) -> None:
        self.store = store
        self.config = config or SchedulerConfig()
        self.scheduler = Scheduler(self.config)
        self.resync_seconds = resync_seconds
        self.cache: ClusterCache | None = None
        self.workloads: dict[str, WorkloadObject] = {}
        self.pods: dict[str, dict[str, Pod]] = {}
        self.nodes: dict[str, Node] = {}
        self.pools: dict[str, GPUPool] = {}
        self.queue_generations: dict[str, int | None] = {}
        self.queues: dict[str, Queue] = {}
        self.queues_dirty = True
        self.invalid_queues: dict[str, str] = {}
        """Queues left out of the quota tree, with why (shown as their `Valid` condition)."""
        self.backoff: dict[str, float] = {}
        self.broken: dict[str, Broken] = {}
        self.reasons: dict[str, dict[str, object]] = {}
        self.grow: set[str] = set()
        """Elastic workloads running short that just checkpointed: candidates to restart larger."""
        self.dirty = True
        self.needs_rebuild = True
        self.next_periodic = 0.0
        self.last_now = 0.0
        self.stats = SchedulingStats()

    # ================================================================ manager interface
    def resync(self, now: float) -> None:
        self.needs_rebuild = True

    def observe(self, event: WatchEvent, now: float) -> None:
        if self.needs_rebuild or self.cache is None:
            return  # the rebuild lists everything
        obj = event.object
        try:
            if isinstance(obj, Queue):
                self._observe_queue(obj, deleted=event.type == "DELETED")
            elif isinstance(obj, GPUPool):
                self._observe_pool(obj, deleted=event.type == "DELETED")
            elif isinstance(obj, Node):
                self._observe_node(obj, deleted=event.type == "DELETED")
            elif isinstance(obj, WorkloadObject):
                self._observe_workload(obj, deleted=event.type == "DELETED", now=now)
            elif isinstance(obj, Pod):
                self._observe_pod(obj, deleted=event.type == "DELETED")
        except (AllocationError, GpuFleetError, KeyError) as exc:
            log.warning("scheduler cache out of step on %s (%s); rebuilding", obj.describe(), exc)
            self.needs_rebuild = True

    def step(self, now: float) -> float | None:
        self.last_now = now
        if self.needs_rebuild or self.cache is None:
            self._rebuild(now)
        for name, at in sorted(self.backoff.items()):
            if at <= now:
                del self.backoff[name]
                self._sync_workload(name, now)
        for name in sorted(self.broken):
            cause = self.broken.pop(name)
            if self.cache is not None and name in self.cache.admitted:
                self._evict(name, now, reason=cause.reason, message=cause.message)
        if self.dirty or now >= self.next_periodic:
            self._schedule(now)
        if self.grow:
            self._grow(now)
        if self.queues_dirty:
            self._write_queue_status()
        wakes = list(self.backoff.values())
        assert self.cache is not None
        if self.cache.pending:
            wakes.append(self.next_periodic)
        return min(wakes, default=None)

    # ======================================================================== rebuild
    def _rebuild(self, now: float) -> None:
        """Builds the cache from a full listing (start, restart, queue change)."""
        self.stats.rebuilds += 1
        queues = self.store.list(Queue).items
        self.queue_generations = {q.name: q.metadata.generation for q in queues}
        self.queues = {q.name: q for q in queues}
        self.queues_dirty = True
        self.pools = {p.name: p for p in self.store.list(GPUPool)}
        self.reasons.clear()
        nodes = self.store.list(Node).items
        workloads = self.store.list(WorkloadObject).items
        pods = self.store.list(Pod).items
        tree, settings = self._quota_tree(queues)
        fleet = FleetState(TOPOLOGY_LEVELS)
        history = (
            self.cache.history if self.cache else UsageHistory(self.config.fair_sharing.half_life_seconds)
        )
        cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=history)
        self.cache = cache
        self.nodes = {}
        self.workloads = {}
        self.pods = {}
        self.backoff.clear()
        self.broken.clear()
        for node in nodes:
            self._add_node(node)
        for pod in pods:
            self.pods.setdefault(convert.workload_key(pod.namespace, pod.spec.workload), {})[
                convert.core_pod_name(pod)
            ] = pod
        for obj in workloads:
            key = convert.workload_key(obj.namespace, obj.name)
            self.workloads[key] = obj
            if obj.status.phase == "Admitted" and obj.spec.active:
                self._readmit(key, obj, now)
            else:
                self._sync_workload(key, now)
        self._delete_orphans()
        self.needs_rebuild = False
        self.dirty = True

    def _quota_tree(self, queues: list[Queue]) -> tuple[QuotaTree, dict[str, QueueSettings]]:
        """The quota tree of the queues that can be placed in one. A queue that cannot (unknown parent,
        a loop of parents, or below such a queue) is left out and marked, so one bad object never
        stops scheduling for the rest; workloads submitted to it wait with a reason saying why."""
        tree, settings, broken = convert.placeable_quota_tree(queues)
        for name, message in sorted(broken.items()):
            if self.invalid_queues.get(name) != message:
                log.warning("Queue %s is left out of the quota tree: %s", name, message)
        # Its `Valid` condition and Warning Event are written with the queue's status.
        self.invalid_queues = broken
        return tree, settings

    def _readmit(self, key: str, obj: WorkloadObject, now: float) -> None:
        """Puts an admitted workload back into the cache with the allocations its Pods hold."""
        assert self.cache is not None
        admission = obj.status.admission
        pods = [
            p
            for p in self.pods.get(key, {}).values()
            if p.spec.attempt == obj.status.attempts and not _gone(p)
        ]
        if admission is None:
            self.broken[key] = Broken("AdmissionLost", "admitted without an admission record")
            pods = []
        workload = convert.core_workload(obj)
        allocations: list[Allocation] = []
        for pod in pods:
            if pod.spec.node_name not in self.cache.fleet.index:
                self.broken[key] = Broken("NodeLost", f"node {pod.spec.node_name} is gone")
                continue
            allocations.append(convert.allocation(pod, self.cache.fleet))
        counts = tuple(admission.counts) if admission else tuple(ps.count for ps in workload.pod_sets)
        assignment = Assignment(
            admission.gpu_model if admission else None, counts, dict(admission.usage) if admission else {}
        )
        admitted_at = to_seconds(obj.status.admitted_time) or now
        try:
            self.cache.admit(workload, assignment, allocations, now=admitted_at)
        except AllocationError as exc:
            # Two pods claim the same GPU (a write lost in a crash): trust neither, evict this gang.
            log.error("%s: cannot reinstate its pods (%s)", obj.describe(), exc)
            for alloc in allocations:
                if alloc.pod in self.cache.fleet.allocations and alloc.pod.startswith(key + "/"):
                    self.cache.fleet.release(alloc.pod)
            self.cache.admit(workload, assignment, [], now=admitted_at)
            self.broken[key] = Broken("AllocationConflict", str(exc))
            return
        expected = sum(counts)
        failed = [p for p in pods if p.status.phase == "Failed"]
        if failed and key not in self.broken:
            first = failed[0]
            self.broken[key] = Broken(first.status.reason or "PodFailed", first.status.message or "failed")
        if len(allocations) < expected and key not in self.broken:
            self.broken[key] = Broken("PodLost", f"{expected - len(allocations)} of {expected} pods are gone")

    def _delete_orphans(self) -> None:
        """Deletes running pods no admitted workload accounts for (left by a crash mid-write)."""
        assert self.cache is not None
        for key, pods in list(self.pods.items()):
            admitted = self.cache.admitted.get(key)
            for core_name, pod in list(pods.items()):
                if pod.terminated and (admitted is None or core_name not in admitted.pods):
                    continue
                if admitted is None or core_name not in admitted.pods:
                    self._delete_pod(pod)
                    del pods[core_name]

    # ================================================================ queues, pools
    def _observe_queue(self, queue: Queue, *, deleted: bool) -> None:
        """A queue's spec shapes the quota tree (rebuild); its status is ours and changes nothing."""
        known = self.queue_generations.get(queue.name, -1)
        if deleted or known != queue.metadata.generation:
            self.needs_rebuild = True
        elif _rv(queue) > _rv(self.queues.get(queue.name, queue)) or queue.name not in self.queues:
            self.queues[queue.name] = queue

    def _observe_pool(self, pool: GPUPool, *, deleted: bool) -> None:
        """Pools decide which waiting workloads more nodes would serve: every demand is looked at again."""
        known = self.pools.get(pool.name)
        if deleted:
            self.pools.pop(pool.name, None)
        elif known is not None and known.spec == pool.spec:
            self.pools[pool.name] = pool
            return
        else:
            self.pools[pool.name] = pool
        self.reasons.clear()
        self.dirty = True

    # ========================================================================= nodes
    def _add_node(self, node: Node) -> None:
        assert self.cache is not None
        self.nodes[node.name] = node
        try:
            self.cache.fleet.add_node(convert.node_spec(node))
        except GpuFleetError as exc:
            log.warning("%s cannot join the fleet: %s", node.describe(), exc)

    def _observe_node(self, node: Node, *, deleted: bool) -> None:
        assert self.cache is not None
        fleet = self.cache.fleet
        known = self.nodes.get(node.name)
        if known is not None and _older(node, known) and not deleted:
            return
        self.dirty = True
        if deleted:
            self.nodes.pop(node.name, None)
            if node.name in fleet.index:
                self._detach_pods(node.name, reason="NodeLost", message=f"node {node.name} was removed")
                fleet.remove_node(node.name)
            return
        if node.name not in fleet.index:
            self._add_node(node)
            return
        self.nodes[node.name] = node
        if not nodesync.update_in_place(fleet, convert.node_spec(node)):
            self._detach_pods(node.name, reason="NodeChanged", message=f"node {node.name} changed shape")
            fleet.remove_node(node.name)
            self._add_node(node)
            return
        if node.status.phase == "Lost":
            self._detach_pods(node.name, reason="NodeLost", message=f"node {node.name} was lost")

    def _detach_pods(self, node_name: str, *, reason: str, message: str) -> None:
        """Marks every gang with a pod on the node broken; with the node going, its pods leave the cache."""
        assert self.cache is not None
        for core_pod in self.cache.fleet.pods_on(node_name):
            key, _, _ = convert.split_core_pod(core_pod)
            if key in self.cache.admitted:
                self.broken.setdefault(key, Broken(reason, message))

    # ===================================================================== workloads
    def _observe_workload(self, obj: WorkloadObject, *, deleted: bool, now: float) -> None:
        key = convert.workload_key(obj.namespace, obj.name)
        known = self.workloads.get(key)
        if deleted:
            self.workloads.pop(key, None)
        elif known is not None and _older(obj, known):
            return
        else:
            self.workloads[key] = obj
        self.queues_dirty = True
        self._sync_workload(key, now)

    def _sync_workload(self, key: str, now: float) -> None:
        """Brings the cache in line with the stored workload (idempotent; our own writes are no-ops)."""
        cache = self.cache
        assert cache is not None
        obj = self.workloads.get(key)
        gone = obj is None or obj.metadata.deletion_timestamp is not None
        if gone or obj is None or not obj.spec.active or obj.status.phase in ("Inactive", "Failed"):
            if key in cache.admitted:
                self._release(key, now)
            cache.pending.pop(key, None)
            self.backoff.pop(key, None)
            self.dirty = True
            if gone:
                for pod in list(self.pods.pop(key, {}).values()):
                    if not _gone(pod):
                        self._delete_pod(pod)
            elif obj is not None and not obj.spec.active and obj.status.phase not in ("Inactive", "Failed"):
                self._write_inactive(key, obj, now)
            return
        if obj.status.phase == "Admitted":
            admitted = cache.admitted.get(key)
            if admitted is None:
                self.needs_rebuild = True  # admitted by a write this cache never assumed
                return
            checkpoint = to_seconds(obj.spec.last_checkpoint_time)
            if checkpoint is not None and checkpoint != admitted.workload.last_checkpoint_at:
                cache.checkpoint(key, now=checkpoint)
                if sum(admitted.assignment.counts) < admitted.workload.pod_count:
                    self.grow.add(key)
            return
        if key in cache.admitted:
            return  # our eviction is being written; the pending state follows
        requeue = to_seconds(obj.status.requeue_at)
        if requeue is not None and requeue > now:
            cache.pending.pop(key, None)
            self.backoff[key] = requeue
            return
        workload = convert.core_workload(obj)
        if cache.pending.get(key) != workload:
            cache.pending[key] = workload
            self.dirty = True

    def _release(self, key: str, now: float) -> None:
        """A workload left scheduling (finished, deactivated, deleted): its capacity is free again."""
        assert self.cache is not None
        admitted = self.cache.admitted[key]
        for core in list(admitted.pods):
            if core not in self.cache.fleet.allocations:
                del admitted.pods[core]
        self.cache.finish(key, now=now)
        for pod in list(self.pods.get(key, {}).values()):
            if not pod.terminated and not _gone(pod):
                self._delete_pod(pod)

    def _write_inactive(self, key: str, obj: WorkloadObject, now: float) -> None:
        status = obj.status.model_copy(deep=True)
        status.phase = "Inactive"
        status.pending_reason = None
        status.requeue_at = None
        self._write_status(key, obj, status)

    # ========================================================================== pods
    def _observe_pod(self, pod: Pod, *, deleted: bool) -> None:
        assert self.cache is not None
        key = convert.workload_key(pod.namespace, pod.spec.workload)
        core = convert.core_pod_name(pod)
        pods = self.pods.setdefault(key, {})
        known = pods.get(core)
        same = known is not None and known.metadata.uid == pod.metadata.uid
        if deleted:
            if not same:
                return  # a pod of an earlier attempt
            del pods[core]
        else:
            if known is not None and not same and pod.spec.attempt < known.spec.attempt:
                return
            if same and known is not None and _older(pod, known):
                return
            pods[core] = pod
        admitted = self.cache.admitted.get(key)
        if admitted is None or core not in admitted.pods or pod.spec.attempt != self._attempt(key):
            return  # not a pod the cache counts (ours being deleted, or an old attempt)
        if deleted:
            self.broken.setdefault(key, Broken("PodDeleted", f"pod {pod.name} was deleted"))
        elif pod.status.phase == "Failed":
            reason = pod.status.reason or "PodFailed"
            message = pod.status.message or "failed"
            self.broken.setdefault(key, Broken(reason, f"pod {pod.name}: {message}"))

    def _delete_pod(self, pod: Pod) -> None:
        with contextlib.suppress(NotFoundError):
            self.store.delete(Pod, pod.name, pod.namespace)

    # ==================================================================== scheduling
    def _schedule(self, now: float) -> None:
        cache = self.cache
        assert cache is not None
        self.dirty = False
        self.next_periodic = now + self.resync_seconds
        # The cycle loop is shared with the Kubernetes world; this world's carrier creates bound Pods.
        outcome = run_cycles(
            scheduler=self.scheduler,
            cache=cache,
            carrier=Carrier(preempt=self._preempt, admit=self._admit),
            now=now,
            max_cycles=self.config.max_cycles,
        )
        self.stats.cycles += outcome.cycles
        self._write_reasons(outcome.last, now)
        self._write_short_demand()

    def _admit(self, admit: Admit, now: float) -> None:
        cache = self.cache
        assert cache is not None
        key = admit.workload
        workload = cache.pending.get(key)
        obj = self.workloads.get(key)
        if workload is None or obj is None:
            return
        cache.admit(workload, admit.assignment, admit.allocations, now=now)  # assume
        attempt = obj.status.attempts + 1
        created: list[Pod] = []
        try:
            for alloc in admit.allocations:
                created.append(self.store.create(self._pod_for(obj, alloc, attempt)))
            status = obj.status.model_copy(deep=True)
            status.phase = "Admitted"
            status.attempts = attempt
            status.admission = Admission(
                gpu_model=admit.assignment.model,
                counts=list(admit.assignment.counts),
                usage=dict(admit.assignment.usage),
            )
            status.admitted_time = to_datetime(now)
            status.pending_reason = None
            status.requeue_at = None
            status.node_demand = None
            status.conditions = set_condition(
                status.conditions,
                Condition(type="Admitted", status="True", reason="Admitted", message=_where(admit)),
                now=to_datetime(now),
            )
            written = self.store.update_status(obj.model_copy(update={"status": status}))
        except GpuFleetError as exc:
            # Forget the assumption: free what it took, undo the pods, and try again next cycle.
            log.info("admission of %s not written (%s); requeued", key, exc)
            self.stats.forgotten += 1
            cache.evict(key, now=now)
            for pod in created:
                self._delete_pod(pod)
            self._refetch(key, now)
            self.dirty = True
            return
        self.workloads[key] = written
        pods = self.pods.setdefault(key, {})
        for pod in created:
            pods[convert.core_pod_name(pod)] = pod
        self.reasons.pop(key, None)
        self.queues_dirty = True
        self.stats.admitted += 1
        events.record(self.store, written, reason="Admitted", message=_where(admit), now=now, source=SOURCE)

    # ======================================================================== growth
    def _grow(self, now: float) -> None:
        """Restarts elastic workloads that run short at a larger size, right after a checkpoint.

        The core admits an elastic gang with as many pods as fit (at least its minimum) and never
        grows an admitted one. So the controller does, by restart: when such a workload has just
        checkpointed (nothing to lose) and nothing waits (growing must not take room from waiting
        work), a trial cycle with the workload's own capacity freed says how many pods it would get
        now. If more, its pods are replaced by the larger gang; the restart is not an eviction (no
        restart counted, no backoff). Jobs without a checkpoint policy keep the size they started with.
        """
        cache = self.cache
        assert cache is not None
        candidates, self.grow = sorted(self.grow), set()
        if cache.pending or self.backoff:
            return
        for key in candidates:
            admit = self._trial_admission(key, now)
            if admit is not None:
                self._resize(key, admit, now)

    def _trial_admission(self, key: str, now: float) -> Admit | None:
        """The admission the workload would get if it were waiting now; None unless it is larger.

        The cache is left exactly as it was (the workload keeps its pods and admission time)."""
        cache = self.cache
        assert cache is not None
        admitted = cache.admitted.get(key)
        if admitted is None or sum(admitted.assignment.counts) >= admitted.workload.pod_count:
            return None
        workload, assignment = admitted.workload, admitted.assignment
        allocations = [alloc for pod, alloc in admitted.pods.items() if pod in cache.fleet.allocations]
        cache.evict(key, now=now)
        try:
            result = self.scheduler.cycle(cache, now=now, learn=False)  # a trial: nothing to learn
        finally:
            cache.pending.pop(key, None)
            restored = cache.admit(workload, assignment, allocations, now=now)
            restored.workload = workload  # keeps its admission time (minimum runtime, lost work)
        admit = next((a for a in result.admitted if a.workload == key), None)
        if admit is None or sum(admit.assignment.counts) <= sum(assignment.counts):
            return None
        return admit

    def _resize(self, key: str, admit: Admit, now: float) -> None:
        """Replaces the workload's pods with the larger gang of `admit` (a new attempt, not an eviction)."""
        cache = self.cache
        assert cache is not None
        obj = self.workloads.get(key)
        if obj is None or obj.status.admission is None:
            return
        counts = list(obj.status.admission.counts)
        before = sum(counts)
        cache.evict(key, now=now)
        for pod in list(self.pods.pop(key, {}).values()):
            if not _gone(pod):
                self._delete_pod(pod)
        self._admit(admit, now)
        admitted = cache.admitted.get(key)
        if admitted is not None:  # carried out: the pods it adds are learnt (the trial cycle taught nothing)
            grown = zip(admitted.workload.pod_sets, admit.assignment.counts, counts, strict=True)
            self.scheduler.learn(pod_set.request for pod_set, new, old in grown for _ in range(new - old))
        after = sum(admit.assignment.counts)
        events.record(
            self.store,
            self.workloads.get(key, obj),
            reason="Resized",
            message=f"restarted from its last checkpoint with {after} pods (was {before})",
            now=now,
            source=SOURCE,
        )

    def _pod_for(self, obj: WorkloadObject, alloc: Allocation, attempt: int) -> Pod:
        assert self.cache is not None
        fleet = self.cache.fleet
        _, pod_set, index = convert.split_core_pod(alloc.pod)
        labels = {WORKLOAD_LABEL: obj.name}
        owner = obj.spec.owner
        if owner.kind == "TrainingJob":
            labels[JOB_LABEL] = owner.name
        elif owner.kind == "InferenceService":
            labels[SERVICE_LABEL] = owner.name
        for label, value in obj.metadata.labels.items():
            labels.setdefault(label, value)
        mig = None
        if alloc.mig is not None:
            mig = MigAssignment(gpu=alloc.mig.gpu, profile=alloc.mig.profile, start=alloc.mig.start)
        return Pod(
            metadata=ObjectMeta(
                name=convert.pod_object_name(obj.name, pod_set, index), namespace=obj.namespace, labels=labels
            ),
            spec=PodSpec(
                workload=obj.name,
                owner=owner,
                pod_set=pod_set,
                index=index,
                node_name=fleet.names[alloc.node],
                gpus=list(alloc.gpus),
                gpu_milli=alloc.milli,
                mig=mig,
                cpu_milli=alloc.cpu_milli,
                memory_mib=alloc.memory_mib,
                attempt=attempt,
            ),
        )

    def _preempt(self, preempt: Preempt, now: float) -> None:
        cache = self.cache
        assert cache is not None
        if preempt.victim not in cache.admitted:
            return
        if preempt.whole:
            self._evict(
                preempt.victim, now, reason="Preempted", message=preempt.message, preemptor=preempt.preemptor
            )
            return
        cache.shrink(preempt.victim, preempt.pods, preempt.counts, now=now)
        self.queues_dirty = True
        obj = self.workloads.get(preempt.victim)
        pods = self.pods.get(preempt.victim, {})
        if obj is not None and obj.status.admission is not None:
            status = obj.status.model_copy(deep=True)
            assert status.admission is not None
            status.admission.counts = list(preempt.counts)
            status.admission.usage = dict(cache.admitted[preempt.victim].assignment.usage)
            self._write_status(preempt.victim, obj, status)
            events.record(
                self.store,
                obj,
                reason="Shrunk",
                message=preempt.message,
                now=now,
                type="Warning",
                source=SOURCE,
            )
        for core in preempt.pods:
            pod = pods.pop(core, None)
            if pod is not None:
                self._delete_pod(pod)

    def _evict(
        self, key: str, now: float, *, reason: str, message: str, preemptor: str | None = None
    ) -> None:
        """Evicts a whole gang: status first (with what it lost), then its pods."""
        cache = self.cache
        assert cache is not None
        admitted = cache.admitted[key]
        obj = self.workloads.get(key)
        pods = self.pods.get(key, {})
        lost = self._lost_gpu_seconds(key, now)
        for core in list(admitted.pods):
            if core not in cache.fleet.allocations:
                del admitted.pods[core]  # its node is already gone
        cache.evict(key, now=now)
        self.queues_dirty = True
        self.stats.evicted += 1
        if obj is not None:
            status = obj.status.model_copy(deep=True)
            status.evictions.append(
                Eviction(
                    time=to_datetime(now),
                    reason=reason,
                    message=message,
                    preemptor=preemptor,
                    lost_gpu_seconds=round(lost, 3),
                    attempt=max(status.attempts, 1),
                )
            )
            status.admission = None
            status.admitted_time = None
            status.node_demand = None
            # The eviction just recorded ends an attempt; the restarts before it decide whether another
            # is allowed, by the rule the Kubernetes operator follows too.
            restarts = len(status.evictions) - 1
            failed = not jobstate.restart_allowed(restarts=restarts, max_restarts=obj.spec.max_restarts)
            backoff = obj.spec.backoff_seconds
            cache.pending.pop(key, None)
            if failed:
                status.phase = "Failed"
                status.pending_reason = None
            else:
                status.phase = "Pending"
                if backoff > 0:
                    status.requeue_at = to_datetime(now + backoff)
                    self.backoff[key] = now + backoff
                    status.pending_reason = PendingReason(
                        type="Backoff", message=f"evicted ({reason}); requeued after {backoff:g}s"
                    )
                else:
                    status.requeue_at = None
                    self.backoff[key] = now  # queued again on the next step, after owners have seen it
            status.conditions = set_condition(
                status.conditions,
                Condition(type="Admitted", status="False", reason=reason, message=message),
                now=to_datetime(now),
            )
            self._write_status(key, obj, status)
            events.record(
                self.store,
                obj,
                reason="Evicted",
                message=f"{reason}: {message}; lost {lost:g} GPU-seconds",
                now=now,
                type="Warning",
                source=SOURCE,
            )
        for core, pod in list(pods.items()):
            if not _gone(pod):
                self._delete_pod(pod)
            del pods[core]
        self.dirty = True

    def _lost_gpu_seconds(self, key: str, now: float) -> float:
        """GPUs x seconds of work since the later of the run's start (its first pod's, else its
        admission) and a checkpoint taken during it: the core's rule (`lostwork`), as the Kubernetes
        operator records it too."""
        assert self.cache is not None
        admitted = self.cache.admitted[key]
        attempt = self._attempt(key)
        starts = (
            to_seconds(p.status.start_time)
            for p in self.pods.get(key, {}).values()
            if p.spec.attempt == attempt
        )
        started = attempt_start(starts, admitted.workload.admitted_at)
        return lost_gpu_seconds(
            admitted.assignment.gpu_milli, started, admitted.workload.last_checkpoint_at, now
        )

    def _attempt(self, key: str) -> int:
        obj = self.workloads.get(key)
        return obj.status.attempts if obj is not None else 0

    # ====================================================================== writing
    def _write_status(self, key: str, obj: WorkloadObject, status: object) -> None:
        """Writes a workload status computed from `obj`; on a conflict, once more on the fresh object."""
        for _ in range(2):
            try:
                written = self.store.update_status(obj.model_copy(update={"status": status}))
                self.workloads[key] = written
                return
            except ConflictError:
                try:
                    fresh = self.store.get(WorkloadObject, obj.name, obj.namespace)
                except NotFoundError:
                    return
                obj = fresh
            except NotFoundError:
                return
        log.warning("status of workload %s not written after a conflict", key)

    def _write_queue_status(self) -> None:
        """Per queue: its `Valid` condition, waiting and admitted workloads and GPUs in use per flavor,
        its subtree included (what `gpufleet get queues` and `top` show beside the nominal quota), by
        the rule both worlds share (`queuestatus`). Written only on change; a queue that becomes
        invalid, or whose problem changes, gets one Warning `InvalidQueue` Event."""
        cache = self.cache
        assert cache is not None
        self.queues_dirty = False
        # Every Pending workload waits, those in backoff after an eviction included (the core holds
        # only the ones it may admit now).
        pending = [
            obj.spec.queue
            for obj in self.workloads.values()
            if obj.status.phase == "Pending" and obj.spec.active and obj.metadata.deletion_timestamp is None
        ]
        reports = queuestatus.reports(cache, self.queues, invalid=self.invalid_queues, pending=pending)
        for name, report in reports.items():
            queue = self.queues[name]
            before = _validity(queue)
            status = queue.status.model_copy(
                update={
                    "pending_workloads": report.pending_workloads,
                    "admitted_workloads": report.admitted_workloads,
                    "usage": report.usage,
                    "conditions": self._valid_condition(queue, report.valid),
                }
            )
            if status == queue.status:
                continue
            try:
                self.queues[name] = self.store.update_status(queue.model_copy(update={"status": status}))
            except (ConflictError, NotFoundError):
                self.queues_dirty = True  # a newer queue is on its way in; written next step
                continue
            if queuestatus.warns(before, report.valid):
                events.record(
                    self.store,
                    queue,
                    reason=queuestatus.INVALID_QUEUE_EVENT,
                    message=report.valid.message,
                    now=self.last_now,
                    type="Warning",
                    source=SOURCE,
                )

    def _valid_condition(self, queue: Queue, valid: queuestatus.Validity) -> list[Condition]:
        wanted = Condition(
            type=queuestatus.VALID, status=valid.status, reason=valid.reason, message=valid.message
        )
        return set_condition(queue.status.conditions, wanted, now=to_datetime(self.last_now))

    def _refetch(self, key: str, now: float) -> None:
        namespace, name = convert.split_key(key)
        try:
            self.workloads[key] = self.store.get(WorkloadObject, name, namespace)
        except NotFoundError:
            self.workloads.pop(key, None)
        self._sync_workload(key, now)

    def _write_reasons(self, result: CycleResult | None, now: float) -> None:
        """Writes each pending workload's reason, only when it changed."""
        if result is None:
            return
        for key, pending in result.pending.items():
            obj = self.workloads.get(key)
            if obj is None or obj.status.phase != "Pending":
                continue
            queue_reason = self._queue_reason(obj.spec.queue)
            if queue_reason is not None:
                pending = dataclasses.replace(pending, reason=queue_reason)
            demand = self._node_demand(obj, pending.reason)
            reason = _reason_dict(pending.reason)
            reason["nodeDemand"] = None if demand is None else demand.pools
            if self.reasons.get(key) == reason:
                continue
            before = obj.status.pending_reason
            if before is None or before.type != pending.reason.type:
                self._failed_scheduling(obj, pending.reason, now)
            status = obj.status.model_copy(deep=True)
            status.pending_reason = PendingReason(
                type=pending.reason.type, message=pending.reason.message, details=_details(pending.reason)
            )
            status.node_demand = demand
            status.conditions = set_condition(
                status.conditions,
                Condition(
                    type="Admitted",
                    status="False",
                    reason=pending.reason.type,
                    message=pending.reason.message,
                ),
                now=to_datetime(now),
            )
            self._write_status(key, obj, status)
            self.reasons[key] = reason

    def _failed_scheduling(self, obj: WorkloadObject, reason: Reason, now: float) -> None:
        """A Warning event, on the workload's owner (what `describe` shows), when the reason it waits
        first appears or changes type: once per change rather than once per cycle."""
        owner = obj.spec.owner
        events.record_about(
            self.store,
            owner.kind or obj.kind,
            owner.name or obj.name,
            obj.namespace,
            reason="FailedScheduling",
            message=f"{reason.type}: {reason.message}",
            now=now,
            type="Warning",
            source=SOURCE,
        )

    def _write_short_demand(self) -> None:
        """Marks admitted elastic workloads that run short with the pools whose new nodes could give
        them their missing pods (`status.nodeDemand`), and clears the mark once it is stale.

        Such a workload is not waiting, so nothing else would ask for nodes: after a spot node is
        taken back from under it, the pool would not replace the node and the job would stay short.
        Only workloads that can grow are marked: growth happens at a checkpoint (`_grow`), so one that
        has checkpointed, and only while its queue's quota would hold its full size."""
        cache = self.cache
        assert cache is not None
        for key, obj in list(self.workloads.items()):
            if obj.status.phase != "Admitted":
                continue
            admitted = cache.admitted.get(key)
            wanted = None
            if admitted is not None and obj.spec.last_checkpoint_time is not None:
                wanted = self._short_demand(obj, admitted)
            if obj.status.node_demand != wanted:
                status = obj.status.model_copy(deep=True)
                status.node_demand = wanted
                self._write_status(key, obj, status)

    def _short_demand(self, obj: WorkloadObject, admitted: Admitted) -> NodeDemand | None:
        cache = self.cache
        assert cache is not None
        running = sum(admitted.assignment.counts)
        missing = admitted.workload.pod_count - running
        queue = cache.tree.nodes.get(obj.spec.queue)
        if missing <= 0 or running <= 0 or queue is None:
            return None
        # What the missing pods would charge, at the rate the running ones do.
        extra = {flavor: milli * missing // running for flavor, milli in admitted.assignment.usage.items()}
        if cache.usage.fits(admitted.queue, extra) is not None:
            return None
        flavors = None if queue.unlimited else set(queue.quotas)
        pools = capacity.serving_pools(obj.spec, self.pools.values(), flavors=flavors)
        return NodeDemand(pools=pools) if pools else None

    def _queue_reason(self, queue: str) -> Reason | None:
        assert self.cache is not None
        return queue_reason(self.cache.tree, self.invalid_queues, queue)

    def _node_demand(self, obj: WorkloadObject, reason: Reason) -> NodeDemand | None:
        """The pools whose new nodes could serve a workload that waits for nodes; None if it waits for
        something else (quota, a preemption, the head of its queue).

        It waits for nodes when no existing node can hold it (NoFit), including when its queue has
        unlimited quota and the fleet has no node of a GPU model it accepts yet."""
        cache = self.cache
        assert cache is not None
        queue = cache.tree.nodes.get(obj.spec.queue)
        if queue is None or reason.type != explain.NO_FIT:
            return None
        flavors = None if queue.unlimited else set(queue.quotas)
        return NodeDemand(pools=capacity.serving_pools(obj.spec, self.pools.values(), flavors=flavors))


def _reason_dict(reason: Reason) -> dict[str, object]:
    return {"type": reason.type, "message": reason.message, "details": _details(reason)}


def _details(reason: Reason) -> dict[str, object]:
    import json

    return dict(json.loads(json.dumps(dict(reason.details), default=str)))


def _where(admit: Admit) -> str:
    nodes: dict[str, int] = {}
    for node in admit.nodes:
        nodes[node] = nodes.get(node, 0) + 1
    placed = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in nodes.items())
    model = f" on {admit.assignment.model}" if admit.assignment.model else ""
    return f"admitted{model}: {placed}"


def _validity(queue: Queue) -> queuestatus.Validity | None:
    """The `Valid` condition the queue carries now, if any."""
    found = next((c for c in queue.status.conditions if c.type == queuestatus.VALID), None)
    if found is None:
        return None
    return queuestatus.Validity(found.status, found.reason or "", found.message or "")


def _gone(pod: Pod) -> bool:
    return pod.metadata.deletion_timestamp is not None


def _older(new: Node | Pod | WorkloadObject, known: Node | Pod | WorkloadObject) -> bool:
    """Whether `new` is a state we already saw or one before it (our own writes are applied at once)."""
    if new.metadata.uid != known.metadata.uid:
        return False
    return _rv(new) <= _rv(known) and _rv(new) != 0


def _rv(obj: Node | Pod | WorkloadObject | Queue) -> int:
    return int(obj.metadata.resource_version or 0)
