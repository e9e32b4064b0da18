"""The InferenceService operator: replica pods, a Service, autoscaling and rolling ModelVersion updates.

Replicas are pods `{service}-{n}` made from `spec.replica.template` with the replica's request as
resources, labelled with the service (`gpufleet.io/inference-service`), the revision they serve
(`gpufleet.io/revision`: the ModelVersion's name) and the queue, and told the model to load
(`GPUFLEET_MODEL_VERSION`, `GPUFLEET_MODEL_URI`). A ClusterIP Service `{service}` selects them (its
ports are the first container's, else 8080). Pods and Service are owned by the service.

How many: the `Autoscaler` of `controllers.servicestate` (the embedded world's) on the load the
metric source reports (`kube.metrics`: Prometheus or the pods' endpoints), or, without one, on the
`ServiceLoad` of the same name written by someone else. The operator writes each sample it takes
into that ServiceLoad and keeps the autoscaler's memory (season, stabilization window, the time of
the last sample used) in its status, so a restarted operator scales as the old one would. An
unreachable source sets the `MetricsAvailable=False` condition with the reason and an Event; the
count stays where it was.

Rollout: `rollout_step` of `controllers.servicestate` (maxSurge, maxUnavailable) moves replicas to
the revision `spec.modelVersion` names, once that ModelVersion exists. A replica that failed, or is
being deleted (evicted, drained), is replaced. Status (phase, counts, Ready and RolledOut conditions)
and the Scaled event are `servicestate`'s too; `pendingReason` is the scheduler's until a replica is
ready.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.inference import InferenceService, InferenceServiceStatus
from gpufleet.api.kinds import kind_info
from gpufleet.api.labels import REVISION_LABEL, SERVICE_LABEL
from gpufleet.api.meta import Condition, set_condition
from gpufleet.api.numerals import plain_digits
from gpufleet.api.runtime import ServiceLoadSpec, ServiceLoadStatus
from gpufleet.controllers import servicestate
from gpufleet.controllers.servicestate import NO_VERSION, Autoscaler, ServiceObserved
from gpufleet.controllers.serving import AutoscalerConfig, LoadSample, ScalingTargets
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.kube import training
from gpufleet.kube.config import (
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    KubeConfig,
)
from gpufleet.kube.informer import key_of
from gpufleet.kube.metrics import MetricSource, MetricsUnavailable
from gpufleet.kube.owned import create_owned, create_pod, delete_pod
from gpufleet.kube.resources import SERVICE, resource_for
from gpufleet.kube.status import invalid_spec, operator_event, patch_status, stamp, with_condition
from gpufleet.kube.store import from_json
from gpufleet.kube.training import status_patch
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

log = logging.getLogger(__name__)

REPLICA_LABEL = "gpufleet.io/replica"
DEFAULT_PORT = 8080


@dataclass(frozen=True, slots=True)
class PodReplica:
    pod: Json
    revision: str
    index: int

    @property
    def placed(self) -> bool:
        return bool(self.pod.get("spec", {}).get("nodeName"))

    @property
    def ready(self) -> bool:
        status = self.pod.get("status") or {}
        if status.get("phase") != "Running":
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


def owner_reference(raw: Json) -> Json:
    return training.owner_reference(raw, "InferenceService")


def replica_pod(
    raw: Json, service: InferenceService, *, index: int, revision: str, uri: str | None, config: KubeConfig
) -> Json:
    """Replica `index` serving `revision`: the template with labels, resources and the model to load."""
    spec = service.spec
    labels = {SERVICE_LABEL: service.name, REVISION_LABEL: revision, REPLICA_LABEL: str(index)}
    labels[QUEUE_LABEL] = spec.queue
    if spec.priority_class:
        labels[PRIORITY_CLASS_LABEL] = spec.priority_class
    env = [{"name": "GPUFLEET_MODEL_VERSION", "value": revision}]
    if uri:
        env.append({"name": "GPUFLEET_MODEL_URI", "value": uri})
    pod = training.pod_from_template(
        spec.replica,
        name=f"{service.name}-{index}",
        namespace=service.namespace or "default",
        labels=labels,
        annotations={},
        env=env,
        owner=owner_reference(raw),
        preemptible=spec.preemptible,
        config=config,
        overrides={},
    )
    pod["spec"].setdefault("restartPolicy", "Always")  # a replica's server is restarted where it is
    return pod


def cluster_service(raw: Json, template: Json | None) -> Json:
    """The Service in front of the replicas: the first container's ports, else 8080."""
    containers = ((template or {}).get("spec") or {}).get("containers") or [{}]
    ports = [
        {
            "name": p.get("name") or f"port-{p['containerPort']}",
            "port": p["containerPort"],
            "targetPort": p["containerPort"],
        }
        for p in containers[0].get("ports") or []
        if p.get("containerPort")
    ] or [{"name": "http", "port": DEFAULT_PORT, "targetPort": DEFAULT_PORT}]
    return training.owned_service(raw, "InferenceService", SERVICE_LABEL, {"ports": ports})


class InferenceServiceOperator:
    """Reconciles one InferenceService from its raw object, its pods, its ModelVersion and ServiceLoad.

    How many replicas, which to add and remove, and what status and Events say are decided by
    `controllers.servicestate`, as in the embedded world; here pods and loads are read into its inputs
    and the decisions are carried out through the API."""

    def __init__(
        self,
        api: Transport,
        *,
        config: KubeConfig,
        source: MetricSource | None = None,
        scaler: AutoscalerConfig | None = None,
        sample_seconds: float = 15.0,
    ) -> None:
        self.api = api
        self.config = config
        self.source = source
        self.scaler = scaler or AutoscalerConfig()
        self.autoscaler = Autoscaler(self.scaler)
        self.sample_seconds = sample_seconds
        self.services = resource_for("InferenceService")
        self.loads = resource_for("ServiceLoad")
        self.last_sample: dict[str, float] = {}
        self.usage_written: dict[str, tuple[str, dict[str, Any]]] = {}
        """Per service, the GPU-hour integral this replica last wrote and the version it was written on:
        a copy still at that version has not shown it yet (`_status` counts on from the write)."""

    def forget(self, key: str) -> None:
        self.autoscaler.forget(key)
        self.last_sample.pop(key, None)
        self.usage_written.pop(key, None)

    def reconcile(
        self,
        raw: Json,
        pods: Sequence[Json],
        versions: dict[str, Json],
        load: Json | None,
        *,
        frontend: Json | None,
        now: float,
    ) -> float | None:
        """Brings pods, Service and status in line; returns when to sample the load again, if ever.

        `frontend` is the Service in front of the replicas as the informer holds it: only a missing
        one is created."""
        info = kind_info("InferenceService")
        assert info is not None
        try:
            service = from_json(info, raw)
        except GpuFleetError as exc:  # stored, but refused by gpufleet's checks: Failed until it changes
            update = invalid_spec(raw, "Ready", "False", exc, now)
            if update is not None:
                patch_status(self.api, self.services, raw, update)
            return None
        assert isinstance(service, InferenceService)
        if raw["metadata"].get("deletionTimestamp"):
            return None
        template = service.spec.replica.template
        message = training.template_problem(service.spec.replica, "replica", started=bool(pods))
        if message is not None:
            status = dict(raw.get("status") or {})
            conditions = with_condition(status, "Ready", "False", "InvalidTemplate", message, now)
            patch_status(self.api, self.services, raw, {"phase": "Failed", "conditions": conditions})
            return None
        if frontend is None:
            self._ensure_service(raw, template)
        replicas = self._replicas(pods)
        previous = service.status
        autoscaled, again, metrics = self._desired(raw, service, replicas, load, now)
        desired = servicestate.desired_replicas(service, autoscaled)
        step = servicestate.rollout_step(
            service.spec,
            replicas,
            desired=desired,
            exists=service.spec.model_version in versions,
            taken=[_index(p) for p in pods],
        )
        uri = ((versions.get(step.target) or {}).get("spec") or {}).get("uri")
        for index in range(step.first_index, step.first_index + step.create):
            self._create(
                replica_pod(raw, service, index=index, revision=step.target, uri=uri, config=self.config)
            )
        for replica in step.remove:
            self._delete(replica.pod)
        # The pending reason is the scheduler's, merged in by it.
        observed = servicestate.observe(service, step, desired=desired, pending=previous.pending_reason)
        self._status(raw, previous, observed, metrics, now)
        return again

    # ------------------------------------------------------------------ replicas
    def _replicas(self, pods: Sequence[Json]) -> list[PodReplica]:
        """The live replicas; failed ones are deleted, terminating ones no longer count."""
        out = []
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
                self._delete(pod)
                continue
            out.append(PodReplica(pod, labels.get(REVISION_LABEL, NO_VERSION), max(_index(pod), 0)))
        return out

    # ----------------------------------------------------------------- autoscale
    def _desired(
        self, raw: Json, service: InferenceService, replicas: list[PodReplica], load: Json | None, now: float
    ) -> tuple[int, float | None, Condition | None]:
        """The replica count, when to sample again, and what the metric source's last answer says."""
        if not ScalingTargets.of(service.spec).enabled:
            return service.spec.replicas.min, None, None
        key = f"{service.namespace or 'default'}/{service.name}"
        kept = _kept(load)
        sample, again, metrics = self._sample(raw, service, replicas, load, key, now)
        ready = sum(r.ready for r in replicas)
        scaling = self.autoscaler.desired(
            key,
            service.spec,
            current=service.status.desired_replicas,
            ready=ready,
            load=sample,
            kept=kept,
            now=now,
        )
        if scaling.kept is not None and sample is not None:
            self._record(raw, sample, ready, scaling.kept, load)
        return scaling.replicas, again, metrics

    def _sample(
        self,
        raw: Json,
        service: InferenceService,
        replicas: list[PodReplica],
        load: Json | None,
        key: str,
        now: float,
    ) -> tuple[LoadSample | None, float | None, Condition | None]:
        """This round's observation: from the source when one is due, else the ServiceLoad's."""
        if self.source is None:
            return _load_sample(load), None, None
        due = self.last_sample.get(key, float("-inf")) + self.sample_seconds
        if now < due:
            return None, due, None
        self.last_sample[key] = now
        try:
            sample = self.source.sample(raw, [r.pod for r in replicas if r.ready], now=now)
        except MetricsUnavailable as exc:
            said = next((c for c in service.status.conditions if c.type == "MetricsAvailable"), None)
            if said is None or said.message != str(exc):
                operator_event(self.api, raw, reason="MetricsUnavailable", message=str(exc), type="Warning")
            unavailable = Condition(
                type="MetricsAvailable", status="False", reason="MetricsUnavailable", message=str(exc)
            )
            return None, now + self.sample_seconds, unavailable
        sampled = Condition(type="MetricsAvailable", status="True", reason="Sampled", message="")
        return sample, now + self.sample_seconds, sampled

    def _record(
        self, raw: Json, sample: LoadSample, ready: int, kept: ServiceLoadStatus, load: Json | None
    ) -> None:
        """The sample into the ServiceLoad (when the operator took it) and the memory into its status."""
        meta = raw["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or "default"
        if self.source is not None:
            body = {
                "apiVersion": self.loads.api_version,
                "kind": "ServiceLoad",
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner_reference(raw)]},
                "spec": {
                    "requestsPerSecond": sample.requests_per_second,
                    "p99LatencyMs": sample.p99_latency_ms,
                    "readyReplicas": ready,
                    "time": stamp(sample.time),
                },
            }
            try:
                if load is None:
                    load = self.api.request("POST", self.loads.collection(namespace), body=body)
                else:
                    load = self.api.request(
                        "PATCH",
                        self.loads.item(name, namespace),
                        body={"spec": body["spec"]},
                        content_type=MERGE_PATCH,
                    )
            except ApiError as exc:
                log.warning("ServiceLoad %s/%s not written: %s", namespace, name, exc)
                return
        if load is not None:
            memory = kept.to_dict()
            kept_fields = ("season", "recent", "lastSampleTime")
            patch_status(self.api, self.loads, load, {k: memory.get(k) for k in kept_fields})

    # -------------------------------------------------------------------- status
    def _status(
        self,
        raw: Json,
        previous: InferenceServiceStatus,
        observed: ServiceObserved,
        metrics: Condition | None,
        now: float,
    ) -> None:
        """The shared status decision as a merge patch, and the Events that announce it."""
        when = to_datetime(math.floor(now))  # API timestamps have a resolution of seconds
        base = previous
        if metrics is not None:
            conditions = set_condition(previous.conditions, metrics, now=when)
            base = previous.model_copy(update={"conditions": conditions})
        key, version = key_of(raw), str(raw["metadata"].get("resourceVersion"))
        written = self.usage_written.get(key)
        if written is not None and written[0] == version:
            base = base.model_copy(update=written[1])  # the integral as last written, not as the stale copy
        status = servicestate.service_status(base, observed, now=when)
        update = status_patch(raw.get("status") or {}, previous.to_dict(), status.to_dict())
        if update and patch_status(self.api, self.services, raw, update):
            usage = ("gpu_hours", "placed_gpus", "gpu_hours_counted_time")
            self.usage_written[key] = (version, {name: getattr(status, name) for name in usage})
            for notice in servicestate.service_events(previous, status):
                operator_event(self.api, raw, reason=notice.reason, message=notice.message, type=notice.type)

    # ------------------------------------------------------------------ writes
    def _ensure_service(self, raw: Json, template: Json | None) -> None:
        create_owned(self.api, SERVICE, cluster_service(raw, template))

    def _create(self, pod: Json) -> None:
        create_pod(self.api, pod)

    def _delete(self, pod: Json) -> None:
        delete_pod(self.api, pod)


def _index(pod: Json) -> int:
    """The replica index a pod's label gives (-1 without a valid one)."""
    label = str((pod["metadata"].get("labels") or {}).get(REPLICA_LABEL, ""))
    return int(label) if plain_digits(label) else -1


def _load_sample(load: Json | None) -> LoadSample | None:
    """The observation a ServiceLoad written by someone else holds (None without a valid one)."""
    try:
        spec = ServiceLoadSpec.model_validate((load or {}).get("spec"))
    except ValidationError:
        return None
    return servicestate.load_sample(spec)


def _kept(load: Json | None) -> ServiceLoadStatus | None:
    """What the autoscaler kept in the ServiceLoad's status (None without one, or unreadable)."""
    if load is None:
        return None
    try:
        return ServiceLoadStatus.model_validate(load.get("status") or {})
    except ValidationError:
        log.warning(
            "ServiceLoad %s: status unreadable, autoscaler memory starts empty", load["metadata"]["name"]
        )
        return None
