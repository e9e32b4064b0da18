"""The InferenceService operator: replica pods, a Service, autoscaling and rolling ModelVersion updates.

Replicas are pods `{service}-{n}` made from `spec.replica.template` with the replica's request as
resources, labelled with the service (`gpufleet.io/inference-service`), the revision they serve
(`gpufleet.io/revision`: the ModelVersion's name) and the queue, and told the model to load
(`GPUFLEET_MODEL_VERSION`, `GPUFLEET_MODEL_URI`). A ClusterIP Service `{service}` selects them (its
ports are the first container's, else 8080). Pods and Service are owned by the service.

How many: the autoscaler of `controllers.serving` (the embedded world's arithmetic) on the load the
metric source reports (`kube.metrics`: Prometheus or the pods' endpoints), or, without one, on the
`ServiceLoad` of the same name written by someone else. The operator writes each sample it takes
into that ServiceLoad and keeps the autoscaler's memory (season, stabilization window) in its
status, so a restarted operator scales as the old one would. An unreachable source sets the
`MetricsAvailable=False` condition with the reason and an Event; the count stays where it was.

Rollout: `plan_rollout` of `controllers.serving` (maxSurge, maxUnavailable) moves replicas to the
revision `spec.modelVersion` names, once that ModelVersion exists. A replica that failed, or is being
deleted (evicted, drained), is replaced.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.api.inference import InferenceService
from gpufleet.api.resource import kind_info
from gpufleet.controllers.serving import (
    AutoscalerConfig,
    LoadSample,
    ScalerMemory,
    ScalingTargets,
    choose_revision,
    plan_rollout,
    recommend,
)
from gpufleet.kube.config import (
    GPU_MILLI_ANNOTATION,
    GPU_MODEL_LABEL,
    PREEMPTIBLE_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    KubeConfig,
)
from gpufleet.kube.metrics import MetricSource, MetricsUnavailable
from gpufleet.kube.owned import create_owned, create_pod, delete_pod
from gpufleet.kube.pods import seconds
from gpufleet.kube.resources import SERVICE, resource_for
from gpufleet.kube.status import operator_event, patch_status, stamp, with_condition
from gpufleet.kube.store import from_json
from gpufleet.kube.training import resources_of
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

log = logging.getLogger(__name__)

SERVICE_LABEL = "gpufleet.io/inference-service"
REVISION_LABEL = "gpufleet.io/revision"
REPLICA_LABEL = "gpufleet.io/replica"
NO_VERSION = "none"
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
    return {
        "apiVersion": raw.get("apiVersion", "gpufleet.io/v1alpha1"),
        "kind": "InferenceService",
        "name": raw["metadata"]["name"],
        "uid": raw["metadata"].get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def replica_pod(
    raw: Json, service: InferenceService, *, index: int, revision: str, uri: str | None, config: KubeConfig
) -> Json:
    """Replica `index` serving `revision`: the template with labels, resources and the model to load."""
    spec = service.spec
    request = spec.replica
    name, namespace = service.name, service.namespace or "default"
    template = copy.deepcopy(request.template or {})
    meta = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(
        {SERVICE_LABEL: name, REVISION_LABEL: revision, REPLICA_LABEL: str(index), QUEUE_LABEL: spec.queue}
    )
    if spec.priority_class:
        labels[PRIORITY_CLASS_LABEL] = spec.priority_class
    annotations = dict(meta.get("annotations") or {})
    annotations[PREEMPTIBLE_ANNOTATION] = "true" if spec.preemptible else "false"
    if request.gpu_milli:
        annotations[GPU_MILLI_ANNOTATION] = str(request.gpu_milli)
    selector = dict(pod_spec.get("nodeSelector") or {})
    selector.update(request.node_selector or {})
    if len(request.gpu_models) == 1:
        selector[GPU_MODEL_LABEL] = request.gpu_models[0]
    tolerations = list(pod_spec.get("tolerations") or [])
    tolerations += [t.model_dump(exclude_defaults=True) for t in request.tolerations or []]
    env = [{"name": "GPUFLEET_MODEL_VERSION", "value": revision}]
    if uri:
        env.append({"name": "GPUFLEET_MODEL_URI", "value": uri})
    resources = resources_of(request)
    containers = []
    for i, container in enumerate(pod_spec["containers"]):
        out = dict(container)
        names = {e["name"] for e in env}
        out["env"] = [e for e in out.get("env") or [] if e.get("name") not in names] + env
        if i == 0 and resources:
            current = dict(out.get("resources") or {})
            limits, requests = dict(current.get("limits") or {}), dict(current.get("requests") or {})
            for key, value in resources.items():
                requests[key] = value
                if key not in ("cpu", "memory"):
                    limits[key] = value
            out["resources"] = {**current, "limits": limits, "requests": requests}
        containers.append(out)
    pod_spec.update({"schedulerName": config.scheduler_name, "containers": containers})
    pod_spec.setdefault("restartPolicy", "Always")
    if selector:
        pod_spec["nodeSelector"] = selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{index}",
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(raw)],
        },
        "spec": pod_spec,
    }


def cluster_service(raw: Json, template: Json | None) -> Json:
    """The Service in front of the replicas: the first container's ports, else 8080."""
    meta = raw["metadata"]
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
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace") or "default",
            "labels": {SERVICE_LABEL: meta["name"]},
            "ownerReferences": [owner_reference(raw)],
        },
        "spec": {"selector": {SERVICE_LABEL: meta["name"]}, "ports": ports},
    }


class InferenceServiceOperator:
    """Reconciles one InferenceService from its raw object, its pods, its ModelVersion and ServiceLoad."""

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
        self.sample_seconds = sample_seconds
        self.services = resource_for("InferenceService")
        self.loads = resource_for("ServiceLoad")
        self.memory: dict[str, ScalerMemory] = {}
        self.last_sample: dict[str, float] = {}

    def forget(self, key: str) -> None:
        self.memory.pop(key, None)
        self.last_sample.pop(key, None)

    def reconcile(
        self, raw: Json, pods: Sequence[Json], versions: dict[str, Json], load: Json | None, *, now: float
    ) -> float | None:
        """Brings pods, Service and status in line; returns when to sample the load again, if ever."""
        info = kind_info("InferenceService")
        assert info is not None
        service = from_json(info, raw)
        assert isinstance(service, InferenceService)
        status: dict[str, Any] = dict(raw.get("status") or {})
        if raw["metadata"].get("deletionTimestamp"):
            return None
        template = service.spec.replica.template
        if not ((template or {}).get("spec") or {}).get("containers"):
            message = "spec.replica.template.spec.containers is empty"
            conditions = with_condition(status, "Ready", "False", "InvalidTemplate", message, now)
            patch_status(self.api, self.services, raw, {"phase": "Failed", "conditions": conditions})
            return None
        self._ensure_service(raw, template)
        replicas = self._replicas(pods)
        wanted = service.spec.model_version or NO_VERSION
        target, missing = choose_revision(
            wanted=wanted,
            exists=wanted == NO_VERSION or wanted in versions,
            current=[r.revision for r in replicas],
        )
        update: Json = {"observedGeneration": raw["metadata"].get("generation")}
        desired, again = self._desired(raw, service, replicas, load, update, now)
        new = [r for r in replicas if r.revision == target]
        old = [r for r in replicas if r.revision != target]
        rollout = service.spec.rollout
        plan = plan_rollout(
            desired=desired,
            new=new,
            old=old,
            max_surge=rollout.max_surge,
            max_unavailable=rollout.max_unavailable,
        )
        used = {int(p["metadata"].get("labels", {}).get(REPLICA_LABEL, -1)) for p in pods}
        next_index = max(used, default=-1) + 1
        uri = ((versions.get(target) or {}).get("spec") or {}).get("uri")
        for _ in range(plan.create):
            self._create(
                replica_pod(raw, service, index=next_index, revision=target, uri=uri, config=self.config)
            )
            next_index += 1
        for replica in plan.remove:
            self._delete(replica.pod)
            (old if replica in old else new).remove(replica)
        self._status(raw, status, update, new + old, desired, target, missing, bool(old), now)
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
            index = labels.get(REPLICA_LABEL, "")
            out.append(
                PodReplica(pod, labels.get(REVISION_LABEL, NO_VERSION), int(index) if index.isdigit() else 0)
            )
        return out

    # ----------------------------------------------------------------- autoscale
    def _desired(
        self,
        raw: Json,
        service: InferenceService,
        replicas: list[PodReplica],
        load: Json | None,
        update: Json,
        now: float,
    ) -> tuple[int, float | None]:
        targets = ScalingTargets.of(service.spec)
        current = int((raw.get("status") or {}).get("desiredReplicas") or 0)
        if not targets.enabled:
            return targets.low, None
        key = f"{service.namespace or 'default'}/{service.name}"
        memory = self.memory.get(key)
        if memory is None:
            memory = self.memory[key] = _restore(load)
        sample, again = self._sample(raw, replicas, load, update, key, now)
        result = recommend(
            targets=targets,
            current=current,
            ready=sum(r.ready for r in replicas),
            load=sample,
            memory=memory,
            now=now,
            config=self.scaler,
        )
        if result.fresh and sample is not None:
            self._record(raw, sample, sum(r.ready for r in replicas), memory, load)
        return result.replicas, again

    def _sample(
        self, raw: Json, replicas: list[PodReplica], load: Json | None, update: Json, key: str, now: float
    ) -> tuple[LoadSample | None, float | None]:
        """This round's observation: from the source when one is due, else the ServiceLoad's."""
        if self.source is None:
            return _load_sample(load), None
        due = self.last_sample.get(key, float("-inf")) + self.sample_seconds
        if now < due:
            return None, due
        self.last_sample[key] = now
        status = raw.get("status") or {}
        try:
            sample = self.source.sample(raw, [r.pod for r in replicas if r.ready], now=now)
        except MetricsUnavailable as exc:
            update["conditions"] = with_condition(
                status, "MetricsAvailable", "False", "MetricsUnavailable", str(exc), now
            )
            said: Json = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "MetricsAvailable"), {}
            )
            if said.get("message") != str(exc):
                operator_event(self.api, raw, reason="MetricsUnavailable", message=str(exc), type="Warning")
            return None, now + self.sample_seconds
        update["conditions"] = with_condition(status, "MetricsAvailable", "True", "Sampled", "", now)
        return sample, now + self.sample_seconds

    def _record(
        self, raw: Json, sample: LoadSample, ready: int, memory: ScalerMemory, load: Json | None
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
            kept = {
                "season": {str(b): rps for b, rps in sorted(memory.season.items())},
                "recent": [{"time": stamp(t), "replicas": n} for t, n in memory.recent],
            }
            patch_status(self.api, self.loads, load, kept)

    # -------------------------------------------------------------------- status
    def _status(
        self,
        raw: Json,
        status: Json,
        update: Json,
        replicas: list[PodReplica],
        desired: int,
        target: str,
        missing: str | None,
        rolling: bool,
        now: float,
    ) -> None:
        ready = sum(r.ready for r in replicas)
        minimum = int(((raw.get("spec") or {}).get("replicas") or {}).get("min", 1))
        base = {**status, "conditions": update.get("conditions", status.get("conditions"))}
        conditions = with_condition(
            base,
            "Ready",
            "True" if ready and ready >= minimum else "False",
            "MinimumReplicasReady" if ready >= minimum else "ReplicasNotReady",
            f"{ready}/{desired} replicas ready",
            now,
        )
        if missing is not None:
            rolled = ("False", "ModelVersionNotFound", f"no ModelVersion {missing}")
        elif rolling:
            rolled = ("False", "RollingOut", f"to {target}")
        else:
            rolled = ("True", "Complete", f"serving {target}")
        conditions = with_condition({"conditions": conditions}, "RolledOut", *rolled, now)
        update.update(
            desiredReplicas=desired,
            readyReplicas=ready,
            phase="Running" if ready else "Pending",
            conditions=conditions,
        )
        if ready:
            update["pendingReason"] = None
        previous = status.get("desiredReplicas")
        if (
            patch_status(self.api, self.services, raw, update)
            and previous is not None
            and previous != desired
        ):
            operator_event(
                self.api, raw, reason="Scaled", message=f"desired replicas {previous} -> {desired}"
            )

    # ------------------------------------------------------------------ writes
    def _ensure_service(self, raw: Json, template: Json | None) -> None:
        create_owned(self.api, SERVICE, cluster_service(raw, template))

    def _create(self, pod: Json) -> None:
        create_pod(self.api, pod)

    def _delete(self, pod: Json) -> None:
        delete_pod(self.api, pod)


def _load_sample(load: Json | None) -> LoadSample | None:
    spec = (load or {}).get("spec") or {}
    at = seconds(spec.get("time"))
    if at is None:
        return None
    return LoadSample(at, float(spec.get("requestsPerSecond", 0)), float(spec.get("p99LatencyMs", 0)))


def _restore(load: Json | None) -> ScalerMemory:
    """The autoscaler's memory as a ServiceLoad's status kept it (empty if none)."""
    memory = ScalerMemory()
    status = (load or {}).get("status") or {}
    for bucket, rps in (status.get("season") or {}).items():
        if str(bucket).isdigit():
            memory.season[int(bucket)] = float(rps)
    for entry in status.get("recent") or []:
        at = seconds(entry.get("time"))
        if at is not None:
            memory.recent.append((at, int(entry.get("replicas", 0))))
    return memory
