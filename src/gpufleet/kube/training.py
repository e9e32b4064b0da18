"""The TrainingJob operator: worker pods from the template, a headless Service, restarts, status.

Each attempt of a job is one gang of `replicas` pods named `{job}-{attempt}-{rank}`, labelled as a
gang (`gpufleet.io/gang: {job}-{attempt}`) so the scheduler places all of them or none. Every
container gets the rendezvous environment of torchrun/`torch.distributed`:

- `MASTER_ADDR`: rank 0's stable DNS name, `{job}-{attempt}-0.{job}.{namespace}.svc` (each pod sets
  `hostname` and `subdomain`, and the headless Service `{job}` publishes them);
- `MASTER_PORT` (29500), `WORLD_SIZE`, `RANK`;
- `GPUFLEET_CHECKPOINT_URI` / `GPUFLEET_CHECKPOINT_STEP`: the last complete Checkpoint to resume from
  (absent on a first start), and `GPUFLEET_CHECKPOINT_DIR`: the job's checkpoint.uri to write to.

Pods and the Service carry an ownerReference to the job (the garbage collector deletes them with it;
a bare API server has none, and the operator deletes what it owns when the job is gone).

A worker that failed, or was evicted (preemption, a drained node), ends the attempt: its remaining
pods are deleted and, within `restartPolicy.maxRestarts`, the next attempt starts after
`backoffSeconds` from the newest complete Checkpoint. Status: `phase` (Pending until every worker is
bound, Admitted, Running when all run, Succeeded, Failed), `replicas`, `readyReplicas`, `restarts`,
`lastCheckpoint`, conditions; `pendingReason` is the scheduler's, merged in by it, and left alone here.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.requests import PodRequest
from gpufleet.api.resource import kind_info
from gpufleet.api.training import TrainingJob
from gpufleet.controllers import jobstate
from gpufleet.kube.config import (
    CHECKPOINT_ANNOTATION,
    GANG_LABEL,
    GANG_MIN_LABEL,
    GANG_SIZE_LABEL,
    GPU_MILLI_ANNOTATION,
    GPU_MODEL_LABEL,
    POD_SET_LABEL,
    PREEMPTIBLE_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    USER_LABEL,
    KubeConfig,
)
from gpufleet.kube.nodes import GPU_RESOURCE, MIG_PREFIX, SHARED_RESOURCE
from gpufleet.kube.owned import create_owned, create_pod, delete_pod
from gpufleet.kube.pods import seconds
from gpufleet.kube.resources import SERVICE, resource_for
from gpufleet.kube.status import operator_event, patch_status, stamp, with_condition
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import Json, Transport

log = logging.getLogger(__name__)

JOB_LABEL = "gpufleet.io/training-job"
ATTEMPT_LABEL = "gpufleet.io/attempt"
MASTER_PORT = 29500
FAILED_REASONS = ("Evicted", "Preempting", "DeadlineExceeded")


def owner_reference(job: Json) -> Json:
    meta = job["metadata"]
    return {
        "apiVersion": job.get("apiVersion", "gpufleet.io/v1alpha1"),
        "kind": "TrainingJob",
        "name": meta["name"],
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def resources_of(request: PodRequest) -> dict[str, str]:
    """A worker's request as container resources (extended resources go in limits and requests alike)."""
    out: dict[str, str] = {}
    if request.gpus:
        out[GPU_RESOURCE] = str(request.gpus)
    elif request.gpu_milli:
        out[SHARED_RESOURCE] = "1"
    elif request.mig:
        out[MIG_PREFIX + request.mig] = "1"
    if request.cpu is not None:
        out["cpu"] = str(request.cpu)
    if request.memory is not None:
        out["memory"] = str(request.memory)
    return out


@dataclass(frozen=True, slots=True)
class Attempt:
    job: TrainingJob
    raw: Json
    number: int
    checkpoint: Checkpoint | None

    @property
    def gang(self) -> str:
        return f"{self.job.name}-{self.number}"

    def pod_name(self, rank: int) -> str:
        return f"{self.gang}-{rank}"


def worker_pod(attempt: Attempt, rank: int, config: KubeConfig) -> Json:
    """Worker `rank` of an attempt: the template with gpufleet's labels, resources and rendezvous env."""
    job, spec = attempt.job, attempt.job.spec
    namespace = job.namespace or "default"
    template = copy.deepcopy(spec.worker.template or {})
    meta = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(
        {
            JOB_LABEL: job.name,
            ATTEMPT_LABEL: str(attempt.number),
            GANG_LABEL: attempt.gang,
            GANG_SIZE_LABEL: str(spec.replicas),
            POD_SET_LABEL: "worker",
            QUEUE_LABEL: spec.queue,
        }
    )
    if spec.elastic:
        labels[GANG_MIN_LABEL] = str(spec.min_count)
    if spec.priority_class:
        labels[PRIORITY_CLASS_LABEL] = spec.priority_class
    if spec.user:
        labels[USER_LABEL] = spec.user
    annotations = dict(meta.get("annotations") or {})
    annotations[PREEMPTIBLE_ANNOTATION] = "true" if spec.preemptible else "false"
    if spec.topology.required:
        annotations[TOPOLOGY_REQUIRED_ANNOTATION] = spec.topology.required
    if spec.topology.preferred:
        annotations[TOPOLOGY_PREFERRED_ANNOTATION] = spec.topology.preferred
    if spec.worker.gpu_milli:
        annotations[GPU_MILLI_ANNOTATION] = str(spec.worker.gpu_milli)
    if attempt.checkpoint is not None and attempt.checkpoint.spec.time is not None:
        annotations[CHECKPOINT_ANNOTATION] = attempt.checkpoint.spec.time.strftime("%Y-%m-%dT%H:%M:%SZ")
    selector = dict(pod_spec.get("nodeSelector") or {})
    selector.update(spec.worker.node_selector or {})
    if len(spec.worker.gpu_models) == 1:
        selector[GPU_MODEL_LABEL] = spec.worker.gpu_models[0]
    tolerations = list(pod_spec.get("tolerations") or [])
    tolerations += [t.model_dump(exclude_defaults=True) for t in spec.worker.tolerations or []]
    env = _rendezvous(attempt, rank, namespace)
    resources = resources_of(spec.worker)
    containers = [
        _container(c, env, resources if i == 0 else {}) for i, c in enumerate(pod_spec["containers"])
    ]
    pod_spec.update(
        {
            "schedulerName": config.scheduler_name,
            "hostname": attempt.pod_name(rank),
            "subdomain": job.name,
            "restartPolicy": "Never",
            "containers": containers,
        }
    )
    if selector:
        pod_spec["nodeSelector"] = selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": attempt.pod_name(rank),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(attempt.raw)],
        },
        "spec": pod_spec,
    }


def _rendezvous(attempt: Attempt, rank: int, namespace: str) -> list[Json]:
    job = attempt.job
    env = [
        {"name": "MASTER_ADDR", "value": f"{attempt.pod_name(0)}.{job.name}.{namespace}.svc"},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "WORLD_SIZE", "value": str(job.spec.replicas)},
        {"name": "RANK", "value": str(rank)},
        {"name": "GPUFLEET_ATTEMPT", "value": str(attempt.number)},
    ]
    if job.spec.checkpoint is not None and job.spec.checkpoint.uri:
        env.append({"name": "GPUFLEET_CHECKPOINT_DIR", "value": job.spec.checkpoint.uri})
    if attempt.checkpoint is not None:
        env.append({"name": "GPUFLEET_CHECKPOINT_URI", "value": attempt.checkpoint.spec.uri})
        env.append({"name": "GPUFLEET_CHECKPOINT_STEP", "value": str(attempt.checkpoint.spec.step)})
    return env


def _container(container: Json, env: list[Json], resources: Mapping[str, str]) -> Json:
    out = dict(container)
    names = {e["name"] for e in env}
    out["env"] = [e for e in out.get("env") or [] if e.get("name") not in names] + env
    if resources:
        current = dict(out.get("resources") or {})
        limits = dict(current.get("limits") or {})
        requests = dict(current.get("requests") or {})
        for name, value in resources.items():
            requests[name] = value
            if name not in ("cpu", "memory"):
                limits[name] = value
        out["resources"] = {**current, "limits": limits, "requests": requests}
    return out


def headless_service(job: Json) -> Json:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace") or "default",
            "labels": {JOB_LABEL: meta["name"]},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: meta["name"]},
            "publishNotReadyAddresses": True,  # rendezvous happens before anyone is ready
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


class TrainingJobOperator:
    """Reconciles one TrainingJob from its raw object, its pods and its Checkpoints."""

    def __init__(self, api: Transport, *, config: KubeConfig) -> None:
        self.api = api
        self.config = config
        self.jobs = resource_for("TrainingJob")

    def reconcile(self, raw: Json, pods: list[Json], checkpoints: list[Json], *, now: float) -> float | None:
        """Brings pods, Service and status in line; returns when to look again (a backoff), if ever."""
        info = kind_info("TrainingJob")
        assert info is not None
        job = from_json(info, raw)
        assert isinstance(job, TrainingJob)
        status: dict[str, Any] = dict(raw.get("status") or {})
        phase = status.get("phase", "Pending")
        if raw["metadata"].get("deletionTimestamp"):
            return None
        if job.spec.worker.template is None or not (job.spec.worker.template.get("spec") or {}).get(
            "containers"
        ):
            message = "spec.worker.template.spec.containers is empty"
            failed = with_condition(status, "Failed", "True", "InvalidTemplate", message, now)
            self._status(raw, {"phase": "Failed", "conditions": failed})
            return None
        self._ensure_service(raw)
        attempt_no = int(status.get("restarts", 0))
        ckpt_info = kind_info("Checkpoint")
        assert ckpt_info is not None
        checkpoint = jobstate.latest_checkpoint(
            [c for c in (from_json(ckpt_info, c) for c in checkpoints) if isinstance(c, Checkpoint)], job.name
        )
        attempt = Attempt(job, raw, attempt_no, checkpoint)
        current = [p for p in pods if p["metadata"].get("labels", {}).get(ATTEMPT_LABEL) == str(attempt_no)]
        for old in pods:
            if old not in current and not old["metadata"].get("deletionTimestamp"):
                self._delete(old)
        update: dict[str, Any] = {"observedGeneration": raw["metadata"].get("generation")}
        if checkpoint is not None:
            update["lastCheckpoint"] = jobstate.checkpoint_ref(checkpoint).to_dict()
        if phase in ("Succeeded", "Failed"):
            self._status(raw, update)
            return None
        broken = [p for p in current if _broken(p)]
        if broken:
            return self._restart(raw, job, status, update, current, broken[0], now)
        resume = _restart_at(status, job.spec.restart_policy.backoff_seconds)
        if resume is not None and resume > now:
            self._status(raw, update)
            return resume
        existing = {p["metadata"]["name"] for p in current}
        for rank in range(job.spec.replicas):
            if attempt.pod_name(rank) not in existing:
                self._create(worker_pod(attempt, rank, self.config))
        update.update(_progress(status, current, job.spec.replicas, now))
        self._status(raw, update)
        return None

    def _restart(
        self,
        raw: Json,
        job: TrainingJob,
        status: Json,
        update: Json,
        current: list[Json],
        broken: Json,
        now: float,
    ) -> float | None:
        restarts = int(status.get("restarts", 0))
        why = _why(broken)
        for pod in current:
            if not pod["metadata"].get("deletionTimestamp"):
                self._delete(pod)
        policy = job.spec.restart_policy
        if not jobstate.restart_allowed(restarts=restarts, max_restarts=policy.max_restarts):
            update.update(
                phase="Failed",
                completionTime=stamp(now),
                conditions=with_condition(
                    status,
                    "Failed",
                    "True",
                    "RestartLimitExceeded",
                    f"restarted {restarts} times; last: {why}",
                    now,
                ),
            )
            self._status(raw, update)
            return None
        at = now + policy.backoff_seconds
        update.update(
            phase="Pending",
            restarts=restarts + 1,
            replicas=0,
            readyReplicas=0,
            # A fresh transition each restart: the backoff counts from this one.
            conditions=with_condition(
                _without(status, "Running"), "Running", "False", "Restarting", why, now
            ),
        )
        self._status(raw, update)
        self._event(raw, "Restarting", f"restart {restarts + 1} from the last checkpoint: {why}", now)
        return at

    # ------------------------------------------------------------------ writes
    def _ensure_service(self, job: Json) -> None:
        create_owned(self.api, SERVICE, headless_service(job))

    def _create(self, pod: Json) -> None:
        create_pod(self.api, pod)

    def _delete(self, pod: Json) -> None:
        delete_pod(self.api, pod)

    def _status(self, raw: Json, update: Json) -> None:
        patch_status(self.api, self.jobs, raw, update)

    def _event(self, raw: Json, reason: str, message: str, now: float) -> None:
        operator_event(self.api, raw, reason=reason, message=message, type="Warning")


def _broken(pod: Json) -> bool:
    """A worker whose failure ends the attempt: failed, or deleted (evicted, drained) before it finished.

    A pod only marked a disruption target is not: its eviction may still be refused by a budget."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return True
    return bool(pod["metadata"].get("deletionTimestamp") and status.get("phase") != "Succeeded")


def _why(pod: Json) -> str:
    status = pod.get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return f"{pod['metadata']['name']} {c.get('reason')}: {c.get('message', '')}"
    reason = status.get("reason") or ("Deleted" if pod["metadata"].get("deletionTimestamp") else "Failed")
    return f"{pod['metadata']['name']} {reason}: {status.get('message', '')}".rstrip(": ")


def _progress(status: Json, pods: list[Json], replicas: int, now: float) -> Json:
    bound = [p for p in pods if p.get("spec", {}).get("nodeName")]
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    succeeded = [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]
    out: Json = {"replicas": len(bound), "readyReplicas": len(running)}
    if len(succeeded) >= replicas:
        out.update(
            phase="Succeeded",
            completionTime=stamp(now),
            conditions=with_condition(status, "Succeeded", "True", "Completed", "all workers finished", now),
        )
    elif len(running) >= replicas:
        out.update(
            phase="Running",
            pendingReason=None,
            startTime=status.get("startTime") or stamp(now),
            conditions=with_condition(status, "Running", "True", "AllWorkersRunning", "", now),
        )
    elif len(bound) >= replicas:
        out.update(
            phase="Admitted",
            pendingReason=None,
            admittedTime=status.get("admittedTime") or stamp(now),
            conditions=with_condition(status, "Admitted", "True", "Admitted", "every worker is bound", now),
        )
    else:
        out["phase"] = "Pending"
    return out


def _restart_at(status: Json, backoff: float) -> float | None:
    """When a restarting job's next attempt may start: its Restarting transition plus the backoff."""
    for c in status.get("conditions") or []:
        if c.get("type") == "Running" and c.get("reason") == "Restarting":
            since = seconds(c.get("lastTransitionTime"))
            return None if since is None else since + backoff
    return None


def _without(status: Json, kind: str) -> Json:
    return {**status, "conditions": [c for c in status.get("conditions") or [] if c.get("type") != kind]}
