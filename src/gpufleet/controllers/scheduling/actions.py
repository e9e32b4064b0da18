"""Carrying out the embedded scheduler's decisions: create bound Pods, shrink, evict (the Kubernetes
world's `kube/actions.py`).

Kueue's assume-then-write. An admission is assumed in the cache at once; then the bound Pods are
created and the Workload's status is written. If a write fails the assumption is forgotten, the Pods
already created are deleted and the workload is tried again. Order matters for crashes: Pods are
created before the status says Admitted, and an eviction writes the status before deleting Pods (the
cache's rebuild deletes orphans).

Evictions. A gang with a failed or vanished pod, or one on a lost node, is evicted whole. Every
eviction is recorded in the Workload's status with its cause and the work it lost (GPUs times the
seconds since the later of the run's start and a checkpoint taken during it: the core's rule in
`scheduler.lostwork`); what follows is the restart rule both worlds share
(`jobstate.restart_decision`): the workload waits `backoffSeconds` from the eviction before it is
queued again, or fails once it was evicted more times than `maxRestarts` allows. A shrink (an
elastic victim) deletes only the pods it takes and is not an eviction.
"""

from __future__ import annotations

import logging
import time
import uuid

from gpufleet.api import evictions
from gpufleet.api.dra_claims import PodResourceClaimStatus
from gpufleet.api.errors import ConflictError, GpuFleetError
from gpufleet.api.labels import JOB_LABEL, SERVICE_LABEL, WORKLOAD_LABEL
from gpufleet.api.meta import Condition, ObjectMeta, PendingReason, set_condition
from gpufleet.api.runtime import Admission, Eviction, MigAssignment, Pod, PodSpec
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import claims, convert, events, lifecycle
from gpufleet.controllers.scheduling.cachesync import CacheSync
from gpufleet.controllers.scheduling.state import SOURCE, SchedulingState, gone, restart_decision
from gpufleet.controllers.scheduling.status import StatusWriter
from gpufleet.controllers.timeutil import to_datetime, to_seconds
from gpufleet.fleet.devices import DeviceId
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.fleet.state import Allocation
from gpufleet.observability import metrics
from gpufleet.scheduler.explain import Admit, Preempt
from gpufleet.scheduler.lostwork import attempt_start, lost_gpu_seconds

log = logging.getLogger(__name__)


class Actions:
    """The embedded world's carrier of decisions (`controllers.decisions.Carrier`)."""

    def __init__(self, state: SchedulingState, sync: CacheSync, status: StatusWriter) -> None:
        self.state = state
        self.sync = sync
        self.status = status
        self.stale: list[tuple[str, tuple[DeviceId, ...]]] = []
        """DRA: claims an admission found still holding its devices in the store (with their devices)."""

    def admit(self, admit: Admit, now: float) -> None:
        state = self.state
        cache = state.cache
        assert cache is not None
        key = admit.workload
        workload = cache.pending.get(key)
        obj = state.workloads.get(key)
        if workload is None or obj is None:
            return
        cache.admit(workload, admit.assignment, admit.allocations, now=now)  # assume
        self.stale = []
        attempt = obj.status.attempts + 1
        created: list[Pod] = []
        try:
            for index, alloc in enumerate(admit.allocations):
                started = time.perf_counter()
                pod = self._pod_for(obj, alloc, attempt)
                if pod.spec.resource_claims:
                    # DRA: the claims are allocated and reserved for the pod before it is bound.
                    self._reserve(obj, pod, admit.claims[index])
                try:
                    created.append(state.store.create(pod))
                except GpuFleetError:
                    state.delete_pod(pod)  # releases the claims just reserved
                    raise
                if state.export_metrics:  # a pod created bound
                    metrics.BIND_SECONDS.observe(time.perf_counter() - started)
            # Every field it changes is assigned anew, so a copy of the top level is enough.
            status = obj.status.model_copy(
                update={
                    "phase": "Admitted",
                    "attempts": attempt,
                    "admission": Admission(
                        gpu_model=admit.assignment.model,
                        counts=list(admit.assignment.counts),
                        usage=dict(admit.assignment.usage),
                    ),
                    "admitted_time": to_datetime(now),
                    "pending_reason": None,
                    "requeue_at": None,
                    "node_demand": None,
                    "conditions": set_condition(
                        obj.status.conditions,
                        Condition(type="Admitted", status="True", reason="Admitted", message=_where(admit)),
                        now=to_datetime(now),
                    ),
                }
            )
            written = state.store.update_status(obj.model_copy(update={"status": status}))
        except GpuFleetError as exc:
            context = lifecycle.log_fields(key, queue=workload.queue, uid=obj.metadata.uid)
            log.info("admission of %s not written (%s); requeued", key, exc, extra=context)
            self._forget(key, created, now)
            self.sync.refetch(key, now)
            return
        except Exception as exc:  # no user's error: this workload waits until it changes, not the others
            self._forget(key, created, now)
            self.sync.leave_out(key, exc)
            return
        state.workloads[key] = written
        pods = state.pods.setdefault(key, {})
        for pod in created:
            pods[convert.core_pod_name(pod)] = pod
        state.reasons.pop(key, None)
        state.queues_dirty = True
        state.stats.admitted += 1
        events.record(state.store, written, reason="Admitted", message=_where(admit), now=now, source=SOURCE)

    def _forget(self, key: str, created: list[Pod], now: float) -> None:
        """Forgets an admission that was not written: frees what it took and deletes the pods made."""
        state = self.state
        assert state.cache is not None
        state.stats.forgotten += 1
        state.cache.evict(key, now=now)
        for pod in created:
            state.delete_pod(pod)
        for holder, devices in self.stale:
            # held in the store by a claim not yet deallocated: kept from the next cycles until it is
            state.cache.fleet.devices.pin(holder, devices)
        state.dirty = True

    def _reserve(self, obj: WorkloadObject, pod: Pod, allocations: tuple[ClaimAllocation, ...]) -> None:
        """Writes the pod's claims (allocation and reservedFor) before the pod exists. A device still
        allocated to another claim in the store (one whose pods left, not yet deallocated) fails the
        admission, as a failed write does: it is tried again."""
        state = self.state
        conflict = state.claims.conflict(allocations)
        if conflict is not None:
            holder, devices = conflict
            self.stale.append((holder, devices))
            raise ConflictError(
                f"a device is still allocated to ResourceClaim {holder}",
                obj=f"Pod {pod.namespace}/{pod.name}",
            )
        pod_set = next(ps for ps in obj.spec.pod_sets if ps.name == pod.spec.pod_set)
        for written in claims.reserve(
            state.store,
            pod,
            pod_set.request.resource_claims,
            allocations,
            templates=state.claims.templates,
        ):
            state.claims.written(written.claim)

    def _pod_for(self, obj: WorkloadObject, alloc: Allocation, attempt: int) -> Pod:
        assert self.state.cache is not None
        fleet = self.state.cache.fleet
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
        entries = next(ps.request.resource_claims for ps in obj.spec.pod_sets if ps.name == pod_set)
        names = claims.claim_names(obj.name, pod_set, index, entries)
        return Pod(
            metadata=ObjectMeta(
                name=convert.pod_object_name(obj.name, pod_set, index),
                namespace=obj.namespace,
                labels=labels,
                # known before the pod exists, so that its claims are reserved for it first
                uid=str(uuid.uuid4()) if entries else None,
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
                resource_claims=[
                    PodResourceClaimStatus(name=e.name, resource_claim_name=n)
                    for e, n in zip(entries, names, strict=True)
                ],
            ),
        )

    def preempt(self, preempt: Preempt, now: float) -> None:
        state = self.state
        cache = state.cache
        assert cache is not None
        if preempt.victim not in cache.admitted:
            return
        if preempt.whole:
            self.evict(
                preempt.victim,
                now,
                reason=evictions.PREEMPTED,
                message=preempt.message,
                preemptor=preempt.preemptor,
            )
            return
        cache.shrink(preempt.victim, preempt.pods, preempt.counts, now=now)
        state.queues_dirty = True
        obj = state.workloads.get(preempt.victim)
        pods = state.pods.get(preempt.victim, {})
        if obj is not None and obj.status.admission is not None:
            status = obj.status.model_copy(deep=True)
            assert status.admission is not None
            status.admission.counts = list(preempt.counts)
            status.admission.usage = dict(cache.admitted[preempt.victim].assignment.usage)
            self.status.write(preempt.victim, obj, status)
            events.record(
                state.store,
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
                state.delete_pod(pod)

    def evict(self, key: str, now: float, *, reason: str, message: str, preemptor: str | None = None) -> None:
        """Evicts a whole gang: status first (with what it lost), then its pods."""
        state = self.state
        cache = state.cache
        assert cache is not None
        admitted = cache.admitted[key]
        obj = state.workloads.get(key)
        pods = state.pods.get(key, {})
        lost = self._lost_gpu_seconds(key, now)
        for core in list(admitted.pods):
            if core not in cache.fleet.allocations:
                del admitted.pods[core]  # its node is already gone
        cache.evict(key, now=now)
        state.queues_dirty = True
        state.stats.evicted += 1
        if state.export_metrics:
            metrics.record_eviction(admitted.queue, reason)
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
            # The eviction just recorded ends an attempt: what follows is the rule the Kubernetes
            # operator follows too, its backoff counted from the eviction's time as stored (read again
            # from the status after a restart of this controller).
            decision = restart_decision(obj.model_copy(update={"status": status}), now)
            cache.pending.pop(key, None)
            if decision.verdict == "GiveUp":
                status.phase = "Failed"
                status.pending_reason = None
            else:
                status.phase = "Pending"
                if decision.verdict == "Backoff":
                    assert decision.at is not None
                    status.requeue_at = to_datetime(decision.at)
                    state.backoff[key] = decision.at
                    status.pending_reason = PendingReason(type="Backoff", message=decision.reason)
                else:
                    status.requeue_at = None
                    state.backoff[key] = now  # queued again on the next step, after owners have seen it
            if not obj.spec.active and status.phase == "Pending":
                # Out of scheduling (a suspended job): it waits to be made active again, not to restart.
                status.phase = "Inactive"
                status.pending_reason = None
                status.requeue_at = None
                state.backoff.pop(key, None)
            status.conditions = set_condition(
                status.conditions,
                Condition(type="Admitted", status="False", reason=reason, message=message),
                now=to_datetime(now),
            )
            self.status.write(key, obj, status)
            events.record(
                state.store,
                obj,
                reason="Evicted",
                message=f"{reason}: {message}; lost {lost:g} GPU-seconds",
                now=now,
                type="Warning",
                source=SOURCE,
            )
        for core, pod in list(pods.items()):
            if not gone(pod):
                state.delete_pod(pod)
            del pods[core]
        state.dirty = True

    def _lost_gpu_seconds(self, key: str, now: float) -> float:
        """GPUs x seconds of work since the later of the run's start (its first pod's, else its
        admission) and a checkpoint taken during it: the core's rule (`lostwork`), as the Kubernetes
        operator records it too."""
        state = self.state
        assert state.cache is not None
        admitted = state.cache.admitted[key]
        attempt = state.attempt(key)
        starts = (
            to_seconds(p.status.start_time)
            for p in state.pods.get(key, {}).values()
            if p.spec.attempt == attempt
        )
        started = attempt_start(starts, admitted.workload.admitted_at)
        return lost_gpu_seconds(
            admitted.assignment.gpu_milli, started, admitted.workload.last_checkpoint_at, now
        )


def _where(admit: Admit) -> str:
    nodes: dict[str, int] = {}
    for node in admit.nodes:
        nodes[node] = nodes.get(node, 0) + 1
    placed = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in nodes.items())
    model = f" on {admit.assignment.model}" if admit.assignment.model else ""
    return f"admitted{model}: {placed}"
