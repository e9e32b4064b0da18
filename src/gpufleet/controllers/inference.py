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

These decisions, and what status and Events say, are `controllers.servicestate`'s, which the
Kubernetes operator makes the same way for its replica pods.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from gpufleet.api.errors import ConflictError, NotFoundError
from gpufleet.api.fields import priority_value
from gpufleet.api.inference import InferenceService
from gpufleet.api.labels import REVISION_LABEL, SERVICE_LABEL, service_workload_name
from gpufleet.api.meta import ObjectMeta, PendingReason
from gpufleet.api.model_version import ModelVersion
from gpufleet.api.runtime import (
    OwnerRef,
    Pod,
    ServiceLoad,
    WorkloadPodSet,
    WorkloadSpec,
)
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import events, servicestate
from gpufleet.controllers.manager import Key, Reconciler
from gpufleet.controllers.servicestate import NO_VERSION, Autoscaler, ServiceObserved
from gpufleet.controllers.serving import AutoscalerConfig as AutoscalerConfig  # re-exported (plane, tests)
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.controllers.workload_class import workload_class
from gpufleet.store.protocol import Store, WatchEvent


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
        self.autoscaler = Autoscaler(self.config)

    def keys_for(self, event: WatchEvent) -> list[Key]:
        # Every pod and workload of every job comes here: those of no service are let go first.
        obj = event.object
        if isinstance(obj, WorkloadObject):
            owner = obj.spec.owner
            return [(obj.namespace or "", owner.name)] if owner.kind == "InferenceService" else []
        if isinstance(obj, Pod):
            labels = obj.metadata.labels
            return [(obj.namespace or "", labels[SERVICE_LABEL])] if SERVICE_LABEL in labels else []
        if isinstance(obj, (InferenceService, ServiceLoad)):
            return [(obj.namespace or "", obj.name)]
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
            self.autoscaler.forget(key)
            return None
        replicas = self._replicas(service)
        for replica in [r for r in replicas if r.workload.status.phase in ("Failed", "Inactive")]:
            self.store.delete(WorkloadObject, replica.workload.name, namespace)
            replicas.remove(replica)
        desired = servicestate.desired_replicas(service, self._desired(service, key, replicas, now))
        step = servicestate.rollout_step(
            service.spec, replicas, desired=desired, exists=self._version_exists(service)
        )
        for index in range(step.first_index, step.first_index + step.create):
            self._create(service, step.target, index)
        for replica in step.remove:
            self._delete(replica)
        waiting = [r for r in step.kept if r.workload.status.phase == "Pending"]
        reason = waiting[0].workload.status.pending_reason if waiting else None
        pending = (
            PendingReason(type=reason.type, message=reason.message, details=reason.details)
            if reason
            else None
        )
        observed = servicestate.observe(service, step, desired=desired, pending=pending)
        self._write_status(service, observed, now)
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

    def _version_exists(self, service: InferenceService) -> bool:
        """Whether the ModelVersion the service asks for exists (no version asked for: it does)."""
        wanted = service.spec.model_version
        if not wanted:
            return True
        try:
            self.store.get(ModelVersion, wanted, service.namespace)
        except NotFoundError:
            return False
        return True

    def _create(self, service: InferenceService, revision: str, index: int) -> None:
        spec = service.spec
        namespace = service.namespace or "default"
        owner = OwnerRef(kind="InferenceService", name=service.name)
        self.store.create(
            WorkloadObject(
                metadata=ObjectMeta(
                    name=service_workload_name(service.name, index),
                    namespace=namespace,
                    labels={SERVICE_LABEL: service.name, REVISION_LABEL: revision},
                ),
                spec=WorkloadSpec(
                    owner=owner,
                    workload_class=workload_class([owner.kind]),
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
        try:
            observed: ServiceLoad | None = self.store.get(ServiceLoad, service.name, service.namespace)
        except NotFoundError:
            observed = None
        scaling = self.autoscaler.desired(
            key,
            service.spec,
            current=service.status.desired_replicas,
            ready=sum(r.ready for r in replicas),
            load=servicestate.load_sample(observed.spec) if observed is not None else None,
            kept=observed.status if observed is not None else None,
            now=now,
        )
        if scaling.kept is not None and observed is not None and scaling.kept != observed.status:
            with contextlib.suppress(NotFoundError, ConflictError):
                self.store.update_status(observed.model_copy(update={"status": scaling.kept}))
        return scaling.replicas

    # -------------------------------------------------------------------- status
    def _write_status(self, service: InferenceService, observed: ServiceObserved, now: float) -> None:
        status = servicestate.service_status(service.status, observed, now=to_datetime(now))
        if status == service.status:
            return
        for notice in servicestate.service_events(service.status, status):
            events.record(
                self.store, service, reason=notice.reason, message=notice.message, now=now, type=notice.type
            )
        self.store.update_status(service.model_copy(update={"status": status}))
