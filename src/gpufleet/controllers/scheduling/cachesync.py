"""Keeps the embedded scheduler's cache in step with the store (the Kubernetes world's `kube/cache.py`).

`ClusterCache` (fleet, quota tree, admitted and pending workloads) is built once from a full
listing, then kept up to date from watch events: Node changes move fleet rows (cordon, GPU health),
Workload changes move workloads between pending and admitted, Pod failures mark gangs broken. The
allocations of admitted workloads come from their bound Pods, so after a restart the cache is rebuilt
from exactly what is bound and no GPU can be handed out twice. Queue changes rebuild the cache.

The rebuild deletes any Pod whose workload is not admitted (an orphan): the actions create Pods
before the status says Admitted and write an eviction before deleting Pods, so a crash between the
two writes leaves nothing half-applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from gpufleet.api import evictions
from gpufleet.api.dra import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpufleet.api.errors import GpuFleetError, NotFoundError
from gpufleet.api.pool import GPUPool
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import TOPOLOGY_LEVELS, Node, Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import claims, convert, jobstate, lifecycle, nodesync
from gpufleet.controllers.failures import contained, contained_error
from gpufleet.controllers.scheduling.claimsync import ClaimsNotReady
from gpufleet.controllers.scheduling.devicesync import DeviceSync
from gpufleet.controllers.scheduling.state import (
    Broken,
    SchedulingState,
    gone,
    older,
    restart_decision,
    rv,
)
from gpufleet.controllers.scheduling.status import StatusWriter
from gpufleet.controllers.scheduling.workloadtable import WorkloadTable
from gpufleet.controllers.timeutil import to_seconds
from gpufleet.fleet.state import Allocation, AllocationError, FleetState
from gpufleet.scheduler import explain
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import QuotaTree
from gpufleet.scheduler.workload import Workload
from gpufleet.store.protocol import WatchEvent

log = logging.getLogger(__name__)


class CacheSync:
    """Builds the cache from the store and applies watch events to it."""

    def __init__(self, state: SchedulingState, status: StatusWriter) -> None:
        self.state = state
        self.status = status
        self.devices = DeviceSync()

    def observe(self, event: WatchEvent, now: float) -> None:
        state = self.state
        if state.needs_rebuild or state.cache is None:
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
            elif isinstance(obj, (ResourceSlice, DeviceClass)):
                self.devices.observe(obj, deleted=event.type == "DELETED", fleet=state.cache.fleet)
                state.dirty = True
                self._claims_changed(now)
            elif isinstance(obj, ResourceClaim):
                state.claim_changed(obj, deleted=event.type == "DELETED")
                self._claims_changed(now)
            elif isinstance(obj, ResourceClaimTemplate):
                state.claims.observe(obj, deleted=event.type == "DELETED")
                self._claims_changed(now)
        except (AllocationError, GpuFleetError, KeyError) as exc:
            log.warning("scheduler cache out of step on %s (%s); rebuilding", obj.describe(), exc)
            state.needs_rebuild = True
        except Exception:
            # No user's error: the rebuild lists everything, leaving out a workload or node it fails on.
            state.failures += 1
            contained("scheduler", "applying %s failed; rebuilding the cache", obj.describe())
            state.needs_rebuild = True

    # ======================================================================== rebuild
    def rebuild(self, now: float) -> None:
        """Builds the cache from a full listing (start, restart, queue change)."""
        state = self.state
        store = state.store
        state.stats.rebuilds += 1
        queues = store.list(Queue).items
        state.queue_generations = {q.name: q.metadata.generation for q in queues}
        state.queues = {q.name: q for q in queues}
        state.queues_dirty = True
        state.pools = {p.name: p for p in store.list(GPUPool)}
        state.reasons.clear()
        nodes = store.list(Node).items
        workloads = store.list(WorkloadObject).items
        pods = store.list(Pod).items
        tree, settings = self._quota_tree(queues)
        fleet = FleetState(TOPOLOGY_LEVELS)
        history = (
            state.cache.history if state.cache else UsageHistory(state.config.fair_sharing.half_life_seconds)
        )
        cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=history)
        state.cache = cache
        state.nodes = {}
        state.workloads = WorkloadTable()
        state.pods = {}
        state.backoff.clear()
        state.broken.clear()
        state.unqueued.clear()
        for node in nodes:
            self._add_node(node)
        self.devices.load(store, fleet)
        state.claims.load(store)
        state.claim_workloads.clear()
        for pod in pods:
            state.pods.setdefault(convert.workload_key(pod.namespace, pod.spec.workload), {})[
                convert.core_pod_name(pod)
            ] = pod
        for obj in workloads:
            key = convert.workload_key(obj.namespace, obj.name)
            state.workloads[key] = obj
            if obj.status.phase == "Admitted" and obj.spec.active:
                self._readmit_or_hold(key, obj, now)
            else:
                self.sync_workload(key, now)
        self._delete_orphans()
        for claim, deleted in claims.collect(
            store, list(state.claims.claims.values()), [p for ps in state.pods.values() for p in ps.values()]
        ):
            state.claim_changed(claim, deleted=deleted)
        state.needs_rebuild = False
        state.dirty = True

    def _quota_tree(self, queues: list[Queue]) -> tuple[QuotaTree, dict[str, QueueSettings]]:
        """The quota tree of the queues that can be placed in one. A queue that cannot (unknown parent,
        a loop of parents, or below such a queue) is left out and marked, so one bad object never
        stops scheduling for the rest; workloads submitted to it wait with a reason saying why."""
        tree, settings, broken = convert.placeable_quota_tree(queues)
        for name, message in sorted(broken.items()):
            if self.state.invalid_queues.get(name) != message:
                log.warning("Queue %s is left out of the quota tree: %s", name, message)
        # Its `Valid` condition and Warning Event are written with the queue's status.
        self.state.invalid_queues = broken
        return tree, settings

    def _readmit_or_hold(self, key: str, obj: WorkloadObject, now: float) -> None:
        """Readmits the workload; one left out (`left_out`), or that fails now, keeps its pods' GPUs
        held outside scheduling, as a workload whose queue is gone does (`unqueued`)."""
        state = self.state
        if state.left_out.get(key) != rv(obj):
            try:
                self._readmit(key, obj, now)
                state.left_out.pop(key, None)
                return
            except Exception as exc:
                self.leave_out(key, exc)
        assert state.cache is not None
        if key in state.cache.admitted:
            return  # it failed after it was admitted again: what it holds is held
        fleet = state.cache.fleet
        held = []
        for pod in state.pods.get(key, {}).values():
            if gone(pod) or pod.terminated or pod.spec.node_name not in fleet.index:
                continue
            try:
                fleet.reinstate(convert.allocation(pod, fleet))
                held.append(convert.core_pod_name(pod))
            except (AllocationError, GpuFleetError) as exc:
                log.warning("%s: pod %s cannot hold its GPUs (%s)", obj.describe(), pod.name, exc)
        state.unqueued[key] = held
        state.broken.pop(key, None)

    def _readmit(self, key: str, obj: WorkloadObject, now: float) -> None:
        """Puts an admitted workload back into the cache with the allocations its Pods hold."""
        state = self.state
        cache = state.cache
        assert cache is not None
        admission = obj.status.admission
        pods = [
            p
            for p in state.pods.get(key, {}).values()
            if p.spec.attempt == obj.status.attempts and not gone(p)
        ]
        if admission is None:
            state.broken[key] = Broken("AdmissionLost", "admitted without an admission record")
            pods = []
        workload = self._core(key, obj, admitted=True) or convert.core_workload(obj)
        allocations: list[Allocation] = []
        for pod in pods:
            if pod.spec.node_name not in cache.fleet.index:
                state.broken[key] = Broken(evictions.NODE_LOST, f"node {pod.spec.node_name} is gone")
                continue
            allocation = convert.allocation(pod, cache.fleet)
            if pod.spec.resource_claims:
                # The devices its claims hold, from their stored status: after a restart no device a
                # running pod holds is handed out again.
                try:
                    devices, shared = state.claims.pod_devices(pod)
                    allocation = replace(allocation, devices=devices, shared=shared)
                except NotFoundError as exc:
                    state.broken[key] = Broken("ClaimLost", f"pod {pod.name}: {exc}")
            allocations.append(allocation)
        if workload.queue not in cache.tree.nodes:
            log.warning(
                "%s runs in queue %s, which is not in the quota tree; its quota is not counted",
                obj.describe(),
                workload.queue,
                extra=lifecycle.log_fields(key, queue=obj.spec.queue, uid=obj.metadata.uid),
            )
            for alloc in allocations:
                cache.fleet.reinstate(alloc)
            state.unqueued[key] = [alloc.pod for alloc in allocations]
            state.broken.pop(key, None)  # nothing evicts what the cache does not hold
            return
        counts = tuple(admission.counts) if admission else tuple(ps.count for ps in workload.pod_sets)
        assignment = Assignment(
            admission.gpu_model if admission else None, counts, dict(admission.usage) if admission else {}
        )
        admitted_at = to_seconds(obj.status.admitted_time) or now
        try:
            cache.admit(workload, assignment, allocations, now=admitted_at)
        except AllocationError as exc:
            # Two pods claim the same GPU (a write lost in a crash): trust neither, evict this gang.
            context = lifecycle.log_fields(key, queue=obj.spec.queue, uid=obj.metadata.uid)
            log.error("%s: cannot reinstate its pods (%s)", obj.describe(), exc, extra=context)
            for alloc in allocations:
                if alloc.pod in cache.fleet.allocations and alloc.pod.startswith(key + "/"):
                    cache.fleet.release(alloc.pod)
            cache.admit(workload, assignment, [], now=admitted_at)
            state.broken[key] = Broken("AllocationConflict", str(exc))
            return
        expected = sum(counts)
        failed = [p for p in pods if jobstate.worker_broken(phase=p.status.phase, deleted=False)]
        if failed and key not in state.broken:
            first = failed[0]
            state.broken[key] = Broken(first.status.reason or "PodFailed", first.status.message or "failed")
        if len(allocations) < expected and key not in state.broken:
            missing = expected - len(allocations)
            state.broken[key] = Broken("PodLost", f"{missing} of {expected} pods are gone")

    def _delete_orphans(self) -> None:
        """Deletes running pods no admitted workload accounts for (left by a crash mid-write)."""
        state = self.state
        assert state.cache is not None
        for key, pods in list(state.pods.items()):
            if key in state.unqueued:
                continue
            admitted = state.cache.admitted.get(key)
            for core_name, pod in list(pods.items()):
                if pod.terminated and (admitted is None or core_name not in admitted.pods):
                    continue
                if admitted is None or core_name not in admitted.pods:
                    state.delete_pod(pod)
                    del pods[core_name]

    # ================================================================ queues, pools
    def _observe_queue(self, queue: Queue, *, deleted: bool) -> None:
        """A queue's spec shapes the quota tree (rebuild); its status is ours and changes nothing."""
        state = self.state
        known = state.queue_generations.get(queue.name, -1)
        if deleted or known != queue.metadata.generation:
            state.needs_rebuild = True
        elif rv(queue) > rv(state.queues.get(queue.name, queue)) or queue.name not in state.queues:
            state.queues[queue.name] = queue

    def _observe_pool(self, pool: GPUPool, *, deleted: bool) -> None:
        """Pools decide which waiting workloads more nodes would serve: every demand is looked at again."""
        state = self.state
        known = state.pools.get(pool.name)
        if deleted:
            state.pools.pop(pool.name, None)
        elif known is not None and known.spec == pool.spec:
            state.pools[pool.name] = pool
            return
        else:
            state.pools[pool.name] = pool
        state.reasons.clear()
        state.dirty = True

    # ========================================================================= nodes
    def _add_node(self, node: Node) -> None:
        state = self.state
        assert state.cache is not None
        state.nodes[node.name] = node
        fleet = state.cache.fleet
        try:
            fleet.add_node(convert.node_spec(node))
        except GpuFleetError as exc:
            log.warning("%s cannot join the fleet: %s", node.describe(), exc, extra={"node": node.name})
            return
        except Exception:
            state.failures += 1
            contained("scheduler", "%s is left out of the fleet", node.describe())
            if node.name in fleet.index:
                fleet.remove_node(node.name)
            return
        if node.spec.dra:
            fleet.devices.claims_only.add(node.name)
        self.devices.refresh_node(fleet, node.name)

    def _observe_node(self, node: Node, *, deleted: bool) -> None:
        state = self.state
        assert state.cache is not None
        fleet = state.cache.fleet
        known = state.nodes.get(node.name)
        if known is not None and older(node, known) and not deleted:
            return
        state.dirty = True
        if deleted:
            state.nodes.pop(node.name, None)
            if node.name in fleet.index:
                self._detach_pods(
                    node.name, reason=evictions.NODE_LOST, message=f"node {node.name} was removed"
                )
                fleet.remove_node(node.name)
                fleet.devices.set_node(node.name, None)
                fleet.devices.claims_only.discard(node.name)
            return
        if node.name not in fleet.index:
            self._add_node(node)
            return
        state.nodes[node.name] = node
        if not nodesync.update_in_place(fleet, convert.node_spec(node)):
            self._detach_pods(node.name, reason="NodeChanged", message=f"node {node.name} changed shape")
            fleet.remove_node(node.name)
            self._add_node(node)
            return
        if node.status.phase == "Lost":
            self._detach_pods(node.name, reason=evictions.NODE_LOST, message=f"node {node.name} was lost")

    def _detach_pods(self, node_name: str, *, reason: str, message: str) -> None:
        """Marks every gang with a pod on the node broken; with the node going, its pods leave the cache."""
        state = self.state
        assert state.cache is not None
        for core_pod in state.cache.fleet.pods_on(node_name):
            key, _, _ = convert.split_core_pod(core_pod)
            if key in state.cache.admitted:
                state.broken.setdefault(key, Broken(reason, message))

    # ===================================================================== workloads
    def _observe_workload(self, obj: WorkloadObject, *, deleted: bool, now: float) -> None:
        state = self.state
        key = convert.workload_key(obj.namespace, obj.name)
        known = state.workloads.get(key)
        if deleted:
            state.workloads.pop(key, None)
        elif known is not None and older(obj, known):
            return
        else:
            state.workloads[key] = obj
        state.queues_dirty = True
        self.sync_workload(key, now)

    def refetch(self, key: str, now: float) -> None:
        """Reads the workload again from the store (after a write of ours failed) and syncs it."""
        state = self.state
        namespace, name = convert.split_key(key)
        try:
            state.workloads[key] = state.store.get(WorkloadObject, name, namespace)
        except NotFoundError:
            state.workloads.pop(key, None)
        self.sync_workload(key, now)

    def sync_workload(self, key: str, now: float) -> None:
        """Brings the cache in line with the stored workload (idempotent; our own writes are no-ops).

        A workload it fails on with an error no user caused is left out of scheduling (`leave_out`)
        until the object changes; an error that says the cache is out of step with the store is the
        caller's to handle (a rebuild)."""
        state = self.state
        if state.left_out:
            failed_on = state.left_out.get(key)
            obj = state.workloads.get(key)
            if failed_on is not None and obj is not None and rv(obj) == failed_on:
                return
            state.left_out.pop(key, None)
        try:
            self._sync_workload(key, now)
        except (AllocationError, GpuFleetError):
            raise
        except Exception as exc:
            self.leave_out(key, exc)

    def leave_out(self, key: str, exc: Exception) -> None:
        """Leaves the workload out of scheduling until it changes: it leaves the queue, keeps what it
        holds, and its status says why (`SchedulingError`); `exc` is logged with its traceback and
        counted."""
        state = self.state
        state.failures += 1
        obj = state.workloads.get(key)
        contained_error("scheduler", exc, "workload %s is left out of scheduling until it changes", key)
        if state.cache is not None:
            state.cache.pending.pop(key, None)
        state.backoff.pop(key, None)
        if obj is None:
            return
        state.left_out[key] = rv(obj)
        if obj.status.phase != "Admitted" and obj.metadata.deletion_timestamp is None:
            reason = explain.scheduling_error(exc)
            self.status.out_of_queue(key, obj, reason.type, reason.message)
            written = state.workloads.get(key)
            if written is not None:
                state.left_out[key] = rv(written)

    def _sync_workload(self, key: str, now: float) -> None:
        state = self.state
        cache = state.cache
        assert cache is not None
        obj = state.workloads.get(key)
        is_gone = obj is None or obj.metadata.deletion_timestamp is not None
        if obj is not None and not is_gone and obj.spec.active and obj.status.phase == "Inactive":
            # Resumed (its job's spec.suspend false again): it queues again, in its old place, since
            # its submission time is the workload's and the workload was kept.
            obj = self.status.reactivated(key, obj)
        if obj is not None and not is_gone and not obj.spec.active and self._working(key):
            # Suspended while its pods still work: evicted as a preemption is (the work since its
            # checkpoint lost and counted), then taken out of scheduling below on the next sync.
            state.broken.setdefault(key, Broken(jobstate.SUSPENDED, "suspended (spec.suspend is true)"))
            return
        if is_gone or obj is None or not obj.spec.active or obj.status.phase in ("Inactive", "Failed"):
            if key in cache.admitted:
                self._release(key, now)
            elif key in state.unqueued:
                self._release_unqueued(key)
            cache.pending.pop(key, None)
            state.backoff.pop(key, None)
            state.dirty = True
            if is_gone:
                for pod in list(state.pods.pop(key, {}).values()):
                    if not gone(pod):
                        state.delete_pod(pod)
            elif obj is not None and not obj.spec.active and obj.status.phase not in ("Inactive", "Failed"):
                self.status.inactive(key, obj)
            return
        if obj.status.phase == "Admitted":
            admitted = cache.admitted.get(key)
            if admitted is None:
                if key not in state.unqueued:
                    state.needs_rebuild = True  # admitted by a write this cache never assumed
                return
            checkpoint = to_seconds(obj.spec.last_checkpoint_time)
            if checkpoint is not None and checkpoint != admitted.workload.last_checkpoint_at:
                cache.checkpoint(key, now=checkpoint)
                if sum(admitted.assignment.counts) < admitted.workload.pod_count:
                    state.grow.add(key)
            return
        if key in cache.admitted:
            return  # our eviction is being written; the pending state follows
        # Evicted before: the shared restart rule says when it may be queued again (the backoff counts
        # from the latest eviction), or that it gives up (its maxRestarts lowered since).
        decision = restart_decision(obj, now)
        if decision.verdict == "GiveUp":
            cache.pending.pop(key, None)
            state.backoff.pop(key, None)
            self.status.gave_up(key, obj)
            return
        if decision.verdict == "Backoff":
            assert decision.at is not None
            cache.pending.pop(key, None)
            state.backoff[key] = decision.at
            return
        workload = self._core(key, obj)
        if workload is None:
            cache.pending.pop(key, None)
            return
        if cache.pending.get(key) != workload:
            cache.pending[key] = workload
            state.dirty = True

    def _core(self, key: str, obj: WorkloadObject, *, admitted: bool = False) -> Workload | None:
        """The core workload, with its pods' claims; None while it waits for its claims (its pending
        reason then says why)."""
        state = self.state
        assert state.cache is not None
        if not any(ps.request.resource_claims for ps in obj.spec.pod_sets):
            state.claim_workloads.discard(key)
            return convert.core_workload(obj)
        state.claim_workloads.add(key)
        try:
            return state.claims.core_workload(obj, state.cache.fleet, self._workload_of())
        except GpuFleetError as exc:
            if not admitted:
                kind = (
                    "ClaimsNotReady" if isinstance(exc, (ClaimsNotReady, NotFoundError)) else "InvalidClaims"
                )
                self.status.out_of_queue(key, obj, kind, str(exc))
            return None

    def _workload_of(self) -> Callable[[str], str | None]:
        """A pod's (`namespace/name`) workload key, for whom a shared claim is charged to; the index of
        the pods is made on the first question only (most workloads name no shared claim)."""
        index: dict[str, str] = {}

        def workload_of(pod: str) -> str | None:
            if not index:
                for key, pods in self.state.pods.items():
                    index.update({f"{p.namespace}/{p.name}": key for p in pods.values()})
            return index.get(pod)

        return workload_of

    def _claims_changed(self, now: float) -> None:
        """Claims, templates, classes or devices changed: workloads whose pods name claims are derived
        again (a template now there, a flavor now known, an allocation to respect)."""
        assert self.state.cache is not None
        for key in sorted(self.state.claim_workloads):
            if key not in self.state.cache.admitted:
                self.sync_workload(key, now)

    def _working(self, key: str) -> bool:
        """Whether the workload is admitted and some pod of it has not finished: deactivating it then
        stops work (a suspension), where deactivating a finished one only frees what it held."""
        cache = self.state.cache
        if cache is None or key not in cache.admitted:
            return False
        return any(not p.terminated and not gone(p) for p in self.state.pods.get(key, {}).values())

    def _release(self, key: str, now: float) -> None:
        """A workload left scheduling (finished, deactivated, deleted): its capacity is free again."""
        state = self.state
        assert state.cache is not None
        admitted = state.cache.admitted[key]
        for core in list(admitted.pods):
            if core not in state.cache.fleet.allocations:
                del admitted.pods[core]
        state.cache.finish(key, now=now)
        for pod in list(state.pods.get(key, {}).values()):
            if not pod.terminated and not gone(pod):
                state.delete_pod(pod)

    def _release_unqueued(self, key: str) -> None:
        """A workload that ran outside its (gone) queue left scheduling: its pods' GPUs are free."""
        state = self.state
        assert state.cache is not None
        for core in state.unqueued.pop(key):
            if core in state.cache.fleet.allocations:
                state.cache.fleet.release(core)
        for pod in list(state.pods.get(key, {}).values()):
            if not pod.terminated and not gone(pod):
                state.delete_pod(pod)

    # ========================================================================== pods
    def _observe_pod(self, pod: Pod, *, deleted: bool) -> None:
        state = self.state
        assert state.cache is not None
        key = convert.workload_key(pod.namespace, pod.spec.workload)
        core = convert.core_pod_name(pod)
        if pod.spec.resource_claims and (deleted or pod.terminated):
            # A pod deleted or finished gives its claims back (the resource-claim controller's part).
            for claim, gone_claim in claims.release_pod(state.store, pod):
                state.claim_changed(claim, deleted=gone_claim)
        pods = state.pods.setdefault(key, {})
        known = pods.get(core)
        same = known is not None and known.metadata.uid == pod.metadata.uid
        if deleted:
            if not same:
                return  # a pod of an earlier attempt
            del pods[core]
        else:
            if known is not None and not same and pod.spec.attempt < known.spec.attempt:
                return
            if same and known is not None and older(pod, known):
                return
            pods[core] = pod
        admitted = state.cache.admitted.get(key)
        if admitted is None or core not in admitted.pods or pod.spec.attempt != state.attempt(key):
            return  # not a pod the cache counts (ours being deleted, or an old attempt)
        if not jobstate.worker_broken(phase=pod.status.phase, deleted=deleted):
            return  # running, or deleted after it succeeded
        if deleted:
            state.broken.setdefault(key, Broken("PodDeleted", f"pod {pod.name} was deleted"))
        else:
            reason = pod.status.reason or "PodFailed"
            message = pod.status.message or "failed"
            state.broken.setdefault(key, Broken(reason, f"pod {pod.name}: {message}"))
