"""The InferenceService controller: replicas kept placed, autoscaled, and rolled out without downtime.

Replicas. Each replica is its own Workload `svc-{service}-{n}` (one pod), so replicas are admitted,
placed and evicted one by one, and labelled with the model version (revision) they serve.

Autoscaling. The desired count is the largest of: requests per second over `targetRequestsPerReplica`;
one more than the ready replicas while p99 latency is above `targetLatencyP99Ms`; and, with
`predictive`, the load forecast for the next `lead_seconds` from the same time one season (a day)
earlier, so capacity is in place before a known daily peak. It is clamped to [min, max]. Scaling up is
immediate; scaling down follows the highest recommendation of the last `stabilization_seconds` (as
Kubernetes' HPA does), so noise does not make replicas come and go.

Rollout. When `spec.modelVersion` names another version, replicas of the new revision are added while
the total stays within desired + maxSurge, and replicas of the old one are removed only while the
ready replicas stay at least desired - maxUnavailable. A version that does not exist yet is not
rolled out to (the service keeps serving the old one).

The forecast (requests/s per bucket of the season) and the stabilization window are written into the
ServiceLoad's status with each observation the controller uses, and read back after a restart, so a
restarted controller still scales before the daily peak and does not drop replicas early.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from gpufleet.api.errors import ConflictError, NotFoundError
from gpufleet.api.fields import priority_value
from gpufleet.api.inference import InferenceService, InferenceServiceStatus
from gpufleet.api.meta import Condition, ObjectMeta, PendingReason, set_condition
from gpufleet.api.model_version import ModelVersion
from gpufleet.api.runtime import (
    REVISION_LABEL,
    SERVICE_LABEL,
    OwnerRef,
    Pod,
    Recommendation,
    ServiceLoad,
    WorkloadPodSet,
    WorkloadSpec,
)
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import events
from gpufleet.controllers.manager import Key, Reconciler
from gpufleet.controllers.serving import AutoscalerConfig as AutoscalerConfig  # re-exported (plane, tests)
from gpufleet.controllers.serving import (
    LoadSample,
    ScalerMemory,
    ScalingTargets,
    choose_revision,
    plan_rollout,
    recommend,
)
from gpufleet.controllers.timeutil import to_datetime, to_seconds
from gpufleet.store.protocol import Store, WatchEvent

PREFIX = "svc-"
NO_VERSION = "none"


@dataclass(slots=True)
class _Replica:
    workload: WorkloadObject
    revision: str
    index: int
    ready: bool

    @property
    def placed(self) -> bool:
        return self.workload.status.phase == "Admitted"


class InferenceServiceController(Reconciler):
    name = "inferenceservice"
    kinds: tuple[str, ...] = ("InferenceService", "Workload", "Pod", "ServiceLoad", "ModelVersion")
    primary = "InferenceService"

    def __init__(self, store: Store, *, config: AutoscalerConfig | None = None) -> None:
        super().__init__(store)
        self.config = config or AutoscalerConfig()
        self.memory: dict[Key, ScalerMemory] = {}

    def keys_for(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        ns = obj.namespace or ""
        if isinstance(obj, InferenceService | ServiceLoad):
            return [(ns, obj.name)]
        if isinstance(obj, WorkloadObject) and obj.spec.owner.kind == "InferenceService":
            return [(ns, obj.spec.owner.name)]
        if isinstance(obj, Pod) and SERVICE_LABEL in obj.metadata.labels:
            return [(ns, obj.metadata.labels[SERVICE_LABEL])]
        if isinstance(obj, ModelVersion):
            return [
                (s.namespace or "", s.name)
                for s in self.store.list(InferenceService)
                if s.spec.model_version == obj.name
            ]
        return []

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, key: Key, now: float) -> float | None:
        namespace, name = key
        try:
            service = self.store.get(InferenceService, name, namespace)
        except NotFoundError:
            for workload in self._workloads(namespace, name):
                with contextlib.suppress(NotFoundError):
                    self.store.delete(WorkloadObject, workload.name, namespace)
            self.memory.pop(key, None)
            return None
        replicas = self._replicas(service)
        for replica in [r for r in replicas if r.workload.status.phase in ("Failed", "Inactive")]:
            self.store.delete(WorkloadObject, replica.workload.name, namespace)
            replicas.remove(replica)
        target, missing = self._target_revision(service, replicas)
        desired = self._desired(service, key, replicas, now)
        new = [r for r in replicas if r.revision == target]
        old = [r for r in replicas if r.revision != target]
        next_index = max((r.index for r in replicas), default=-1) + 1
        rollout = service.spec.rollout
        plan = plan_rollout(
            desired=desired,
            new=new,
            old=old,
            max_surge=rollout.max_surge,
            max_unavailable=rollout.max_unavailable,
        )
        for _ in range(plan.create):
            self._create(service, target, next_index)
            next_index += 1
        for replica in plan.remove:
            self._delete(replica)
            (old if replica in old else new).remove(replica)
        self._write_status(service, new + old, desired, target, missing, bool(old), now)
        return None

    def _workloads(self, namespace: str, name: str) -> list[WorkloadObject]:
        return self.store.list(
            WorkloadObject, namespace=namespace, label_selector={SERVICE_LABEL: name}
        ).items

    def _replicas(self, service: InferenceService) -> list[_Replica]:
        namespace = service.namespace or "default"
        pods = self.store.list(Pod, namespace=namespace, label_selector={SERVICE_LABEL: service.name}).items
        ready = {p.spec.workload for p in pods if p.status.phase == "Running" and p.status.ready}
        out = []
        for workload in self._workloads(namespace, service.name):
            index = int(workload.name.rsplit("-", 1)[1])
            revision = workload.metadata.labels.get(REVISION_LABEL, NO_VERSION)
            out.append(_Replica(workload, revision, index, workload.name in ready))
        return out

    def _target_revision(self, service: InferenceService, replicas: list[_Replica]) -> tuple[str, str | None]:
        """The revision to run, and the name of a requested version that does not exist (if any)."""
        wanted = service.spec.model_version or NO_VERSION
        exists = wanted == NO_VERSION
        if not exists:
            try:
                self.store.get(ModelVersion, wanted, service.namespace)
                exists = True
            except NotFoundError:
                pass
        return choose_revision(wanted=wanted, exists=exists, current=[r.revision for r in replicas])

    def _create(self, service: InferenceService, revision: str, index: int) -> None:
        spec = service.spec
        namespace = service.namespace or "default"
        self.store.create(
            WorkloadObject(
                metadata=ObjectMeta(
                    name=f"{PREFIX}{service.name}-{index}",
                    namespace=namespace,
                    labels={SERVICE_LABEL: service.name, REVISION_LABEL: revision},
                ),
                spec=WorkloadSpec(
                    owner=OwnerRef(kind="InferenceService", name=service.name),
                    workload_class="inference",
                    queue=spec.queue,
                    priority=priority_value(spec.priority_class),
                    pod_sets=[WorkloadPodSet(name="server", count=1, request=spec.replica)],
                    preemptible=spec.preemptible,
                    backoff_seconds=self.config.replica_backoff_seconds,
                ),
            )
        )

    def _delete(self, replica: _Replica) -> None:
        with contextlib.suppress(NotFoundError):
            self.store.delete(WorkloadObject, replica.workload.name, replica.workload.namespace)

    # ----------------------------------------------------------------- autoscale
    def _desired(self, service: InferenceService, key: Key, replicas: list[_Replica], now: float) -> int:
        targets = ScalingTargets.of(service.spec)
        if not targets.enabled:
            return targets.low
        try:
            observed: ServiceLoad | None = self.store.get(ServiceLoad, service.name, service.namespace)
        except NotFoundError:
            observed = None
        memory = self.memory.get(key)
        if memory is None:
            memory = self.memory[key] = _restore(observed)
        load = None
        if observed is not None:
            spec_load = observed.spec
            load = LoadSample(
                spec_load.time.timestamp(), spec_load.requests_per_second, spec_load.p99_latency_ms
            )
        result = recommend(
            targets=targets,
            current=service.status.desired_replicas,
            ready=sum(r.ready for r in replicas),
            load=load,
            memory=memory,
            now=now,
            config=self.config,
        )
        if result.fresh and observed is not None:
            self._persist(observed, memory)
        return result.replicas

    def _persist(self, observed: ServiceLoad, memory: ScalerMemory) -> None:
        status = observed.status.model_copy(
            update={
                "season": {str(bucket): rps for bucket, rps in sorted(memory.season.items())},
                "recent": [Recommendation(time=to_datetime(t), replicas=n) for t, n in memory.recent],
            }
        )
        if status != observed.status:
            with contextlib.suppress(NotFoundError, ConflictError):
                self.store.update_status(observed.model_copy(update={"status": status}))

    # -------------------------------------------------------------------- status
    def _write_status(
        self,
        service: InferenceService,
        replicas: list[_Replica],
        desired: int,
        target: str,
        missing: str | None,
        rolling: bool,
        now: float,
    ) -> None:
        when = to_datetime(now)
        ready = sum(r.ready for r in replicas)
        status: InferenceServiceStatus = service.status.model_copy(deep=True)
        status.observed_generation = service.metadata.generation
        status.desired_replicas = desired
        status.ready_replicas = ready
        status.phase = "Running" if ready else "Pending"
        waiting = [r for r in replicas if r.workload.status.phase == "Pending"]
        reason = waiting[0].workload.status.pending_reason if waiting and not ready else None
        status.pending_reason = (
            PendingReason(type=reason.type, message=reason.message, details=reason.details)
            if reason
            else None
        )
        minimum = service.spec.replicas.min
        status.conditions = set_condition(
            status.conditions,
            Condition(
                type="Ready",
                status="True" if ready >= minimum and ready else "False",
                reason="MinimumReplicasReady" if ready >= minimum else "ReplicasNotReady",
                message=f"{ready}/{desired} replicas ready",
            ),
            now=when,
        )
        if missing is not None:
            rolled = Condition(
                type="RolledOut",
                status="False",
                reason="ModelVersionNotFound",
                message=f"no ModelVersion {missing}",
            )
        elif rolling:
            rolled = Condition(type="RolledOut", status="False", reason="RollingOut", message=f"to {target}")
        else:
            rolled = Condition(
                type="RolledOut", status="True", reason="Complete", message=f"serving {target}"
            )
        status.conditions = set_condition(status.conditions, rolled, now=when)
        if status == service.status:
            return
        if status.desired_replicas != service.status.desired_replicas:
            events.record(
                self.store,
                service,
                reason="Scaled",
                message=f"desired replicas {service.status.desired_replicas} -> {desired}",
                now=now,
            )
        self.store.update_status(service.model_copy(update={"status": status}))


def _restore(observed: ServiceLoad | None) -> ScalerMemory:
    """The autoscaler's memory of a service as its ServiceLoad status kept it (empty if none)."""
    memory = ScalerMemory()
    if observed is None:
        return memory
    memory.season = {int(bucket): rps for bucket, rps in observed.status.season.items()}
    memory.recent.extend((to_seconds(r.time) or 0.0, r.replicas) for r in observed.status.recent)
    return memory
