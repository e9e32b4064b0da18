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
pods are deleted and, by the restart rule both worlds share (`jobstate.restart_decision`), within
`restartPolicy.maxRestarts` the next attempt starts `backoffSeconds` after the disruption (kept as the
Running condition's `Backoff` transition) from the newest complete Checkpoint (the job waits with
pendingReason `Backoff`).
Status and Events are those of the embedded world, decided by `controllers.jobstate` from the pods
read here: `phase` (Pending until every worker is bound, or `minReplicas` of an elastic job: the
bound workers are the ones the attempt runs with; Admitted; Running while every bound worker runs or
has finished; Succeeded; Failed past maxRestarts), `replicas` (bound workers), `readyReplicas`,
`restarts` (attempts ended by a disruption), `lostGpuSeconds` (what those attempts threw away, by the
core's rule: `lost_work`), `lastCheckpoint`, conditions. Outside a backoff
`pendingReason` is the scheduler's, merged in by it; it is only repeated here into the Running
condition. When a backoff ends, `Backoff` becomes `Queued` (written before the new attempt's pods
exist) until the scheduler says why the new attempt waits. A finished job's workers that were never
bound (an elastic job's surplus) are deleted.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic_core import PydanticCustomError

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.errors import GpuFleetError
from gpufleet.api.gpu_models import canonical_name
from gpufleet.api.kinds import kind_info
from gpufleet.api.labels import JOB_LABEL
from gpufleet.api.meta import PendingReason
from gpufleet.api.requests import PodRequest, check_template_gpus
from gpufleet.api.resource import KindInfo
from gpufleet.api.training import DEFAULT_QUEUE, TrainingJob, TrainingJobStatus
from gpufleet.controllers import convert, jobstate, lifecycle
from gpufleet.controllers.timeutil import to_datetime, to_seconds
from gpufleet.kube import disruptions
from gpufleet.kube.config import (
    CHECKPOINT_ANNOTATION,
    CUDA_VERSION_ANNOTATION,
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
from gpufleet.kube.pods import REQUIRED_AFFINITY, seconds
from gpufleet.kube.resources import SERVICE, resource_for
from gpufleet.kube.status import invalid_spec, operator_event, patch_status, with_condition
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import Json, Transport
from gpufleet.observability import metrics, tracing
from gpufleet.scheduler.flavors import pod_gpu_milli
from gpufleet.scheduler.lostwork import attempt_start, lost_gpu_seconds

log = logging.getLogger(__name__)

ATTEMPT_LABEL = "gpufleet.io/attempt"
MASTER_PORT = 29500
FAILED_REASONS = ("Evicted", "Preempting", "DeadlineExceeded")
BACKOFF = "Backoff"


def owner_reference(job: Json, kind: str = "TrainingJob") -> Json:
    """The controller reference of what the operator makes for a gpufleet object (`kind`)."""
    meta = job["metadata"]
    return {
        "apiVersion": job.get("apiVersion", "gpufleet.io/v1alpha1"),
        "kind": kind,
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
    labels = {
        JOB_LABEL: job.name,
        ATTEMPT_LABEL: str(attempt.number),
        GANG_LABEL: attempt.gang,
        GANG_SIZE_LABEL: str(spec.replicas),
        POD_SET_LABEL: "worker",
        QUEUE_LABEL: spec.queue,
    }
    if spec.elastic:
        labels[GANG_MIN_LABEL] = str(spec.min_count)
    if spec.priority_class:
        labels[PRIORITY_CLASS_LABEL] = spec.priority_class
    if spec.user:
        labels[USER_LABEL] = spec.user
    annotations = {}
    if spec.topology.required:
        annotations[TOPOLOGY_REQUIRED_ANNOTATION] = spec.topology.required
    if spec.topology.preferred:
        annotations[TOPOLOGY_PREFERRED_ANNOTATION] = spec.topology.preferred
    if attempt.checkpoint is not None and attempt.checkpoint.spec.time is not None:
        annotations[CHECKPOINT_ANNOTATION] = attempt.checkpoint.spec.time.strftime("%Y-%m-%dT%H:%M:%SZ")
    return pod_from_template(
        spec.worker,
        name=attempt.pod_name(rank),
        namespace=job.namespace or "default",
        labels=labels,
        annotations=annotations,
        env=_rendezvous(attempt, rank, job.namespace or "default"),
        owner=owner_reference(attempt.raw),
        preemptible=spec.preemptible,
        config=config,
        overrides={"hostname": attempt.pod_name(rank), "subdomain": job.name, "restartPolicy": "Never"},
    )


def pod_from_template(
    request: PodRequest,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    env: list[Json],
    owner: Json,
    preemptible: bool,
    config: KubeConfig,
    overrides: Json,
) -> Json:
    """A pod of the operator from `request.template`: gpufleet's labels and annotations over the
    template's, the request's placement (node selector, required node affinity, a single GPU model,
    tolerations, the CUDA version as `gpufleet.io/cuda-version`), its resources on the first container,
    `env` on every container, and `overrides` in the pod spec."""
    template = copy.deepcopy(request.template or {})
    meta = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    annotated = dict(meta.get("annotations") or {})
    annotated[PREEMPTIBLE_ANNOTATION] = "true" if preemptible else "false"
    if request.gpu_milli:
        annotated[GPU_MILLI_ANNOTATION] = str(request.gpu_milli)
    if request.cuda_version is not None:
        annotated[CUDA_VERSION_ANNOTATION] = request.cuda_version
    selector = dict(pod_spec.get("nodeSelector") or {})
    selector.update(request.node_selector or {})
    if len(request.gpu_models) == 1:  # the job as the API server keeps it may name an alias (`H100`)
        selector[GPU_MODEL_LABEL] = canonical_name(request.gpu_models[0])
    tolerations = list(pod_spec.get("tolerations") or [])
    tolerations += [t.model_dump(exclude_defaults=True) for t in request.tolerations or []]
    resources = resources_of(request)
    containers = [
        _container(c, env, resources if i == 0 else {}) for i, c in enumerate(pod_spec["containers"])
    ]
    pod_spec.update({"schedulerName": config.scheduler_name, "containers": containers, **overrides})
    if selector:
        pod_spec["nodeSelector"] = selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if request.node_affinity is not None:
        _require_affinity(pod_spec, request.node_affinity.to_dict()["nodeSelectorTerms"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(meta.get("labels") or {}), **labels},
            "annotations": {**annotated, **annotations},
            "ownerReferences": [owner],
        },
        "spec": pod_spec,
    }


def _require_affinity(pod_spec: Json, terms: list[Json]) -> None:
    """Adds the request's required node affinity to the pod's: where the template has its own, both must
    hold, so each of its terms is joined with each of the request's (an OR of ANDs, as NodeSelector is).
    A template term with no requirement matches no node and stays so. Left raw: a malformed template term
    is refused, naming the pod, by the scheduler that reads it."""
    affinity = pod_spec.setdefault("affinity", {})
    node = affinity.setdefault("nodeAffinity", {})
    own = (node.get(REQUIRED_AFFINITY) or {}).get("nodeSelectorTerms")
    if own:
        terms = [
            {
                key: [*(mine.get(key) or []), *(theirs.get(key) or [])]
                for key in ("matchExpressions", "matchFields")
                if mine.get(key) or theirs.get(key)
            }
            if mine.get("matchExpressions") or mine.get("matchFields")
            else {}
            for mine in own
            for theirs in terms
        ]
    node[REQUIRED_AFFINITY] = {"nodeSelectorTerms": terms}


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
    spec = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,  # rendezvous happens before anyone is ready
        "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
    }
    return owned_service(job, "TrainingJob", JOB_LABEL, spec)


def owned_service(raw: Json, kind: str, label: str, spec: Json) -> Json:
    """A Service of the gpufleet object `raw` (a `kind`) selecting its pods by `label: name`."""
    meta = raw["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace") or "default",
            "labels": {label: meta["name"]},
            "ownerReferences": [owner_reference(raw, kind)],
        },
        "spec": {"selector": {label: meta["name"]}, **spec},
    }


def template_problem(request: PodRequest, field: str, *, started: bool) -> str | None:
    """What makes a request's pod template unusable, said with the field to change; None if nothing.

    Objects written with kubectl reach the operator without the embedded API's checks, so the same
    rule is applied here: no containers, or GPUs asked for in the template other than what the request
    itself asks for (`api.requests.check_template_gpus`). The GPU rule is only applied before the
    first pod is made, so a workload created before the rule existed keeps running."""
    template = request.template or {}
    if not (template.get("spec") or {}).get("containers"):
        return f"spec.{field}.template.spec.containers is empty"
    if started:
        return None
    try:
        check_template_gpus(request, field)
    except PydanticCustomError as exc:
        where = str((exc.context or {}).get("field", field))
        return f"spec.{where}: {exc.message()}"
    return None


class TrainingJobOperator:
    """Reconciles one TrainingJob from its raw object, its pods and its Checkpoints.

    What the status says is decided by `controllers.jobstate`, as in the embedded world; here the
    pods are read into its observation, attempts are started and ended, and the status is patched."""

    def __init__(self, api: Transport, *, config: KubeConfig) -> None:
        self.api = api
        self.config = config
        self.jobs = resource_for("TrainingJob")

    def reconcile(
        self,
        raw: Json,
        pods: list[Json],
        checkpoints: list[Json],
        *,
        service: Json | None,
        now: float,
        node: Callable[[str], Json | None] | None = None,
    ) -> float | None:
        """Brings pods, Service and status in line; returns when to look again (a backoff), if ever.

        `service` is the job's Service as the informer holds it: only a missing one is created. `node`
        finds a Node by name (the operator's informer), to say why a worker broke (`_cause`)."""
        info = kind_info("TrainingJob")
        assert info is not None
        try:
            job = from_json(info, raw)
        except GpuFleetError as exc:  # stored, but refused by gpufleet's checks: Failed until it changes
            update = invalid_spec(raw, "Failed", "True", exc, now)
            if update is not None:
                self._status(raw, update)
            return None
        assert isinstance(job, TrainingJob)
        if raw["metadata"].get("deletionTimestamp"):
            jobstate.forget_metrics(raw["metadata"]["namespace"], job.name)
            return None
        message = template_problem(job.spec.worker, "worker", started=bool(pods))
        if message is not None:
            status = dict(raw.get("status") or {})
            failed = with_condition(status, "Failed", "True", "InvalidTemplate", message, now)
            self._status(raw, {"phase": "Failed", "conditions": failed})
            return None
        if service is None:
            self._ensure_service(raw)
        previous = job.status
        ckpt_info = kind_info("Checkpoint")
        assert ckpt_info is not None
        checkpoint = jobstate.latest_checkpoint(_checkpoints(ckpt_info, checkpoints), job.name)
        attempt = Attempt(job, raw, previous.restarts, checkpoint)
        current = [
            p for p in pods if p["metadata"].get("labels", {}).get(ATTEMPT_LABEL) == str(attempt.number)
        ]
        for old in pods:
            if old not in current and not old["metadata"].get("deletionTimestamp"):
                self._delete(old)
        if job.spec.suspend and previous.phase not in jobstate.FINISHED:
            self._suspend(raw, job, checkpoint, current, now)
            return None
        broken = [p for p in current if _broken(p)]
        if previous.phase not in jobstate.FINISHED and broken:
            # The bare reason: the one in the status names the worker, an unbounded label value. The
            # operator counts every attempt's end, preemptions included (`kube.disruptions`).
            where = node(str(broken[0]["spec"].get("nodeName") or "")) if node is not None else None
            metrics.record_eviction(job.spec.queue, _cause(broken[0], where)[0])
            return self._restart(raw, job, checkpoint, current, _why(broken[0], where), now)
        if previous.phase in jobstate.FINISHED:
            self._write(raw, previous, _observed(job, checkpoint, current), now)
            self._drop_unbound(current)
            return None
        restarting = _restarting(job, previous, now)
        if restarting is not None and restarting.verdict == "GiveUp":  # its maxRestarts lowered since
            self._write(raw, previous, _observed(job, checkpoint, current, gave_up=True), now)
            return None
        if restarting is not None and restarting.verdict == "Backoff":
            self._write(raw, previous, _observed(job, checkpoint, current), now)
            return restarting.at
        observed = _observed(job, checkpoint, current, pending=_waiting(previous, restarting is not None))
        if restarting is not None:
            # The end of the backoff is written before the new attempt's pods exist: the scheduler
            # can only explain them afterwards, so its reason is never overwritten by this write.
            self._write(raw, previous, observed, now)
        existing = {p["metadata"]["name"] for p in current}
        for rank in range(job.spec.replicas):
            if attempt.pod_name(rank) not in existing:
                self._create(worker_pod(attempt, rank, self.config))
        if restarting is None and self._write(raw, previous, observed, now).phase in jobstate.FINISHED:
            self._drop_unbound(current)
        return None

    def _suspend(
        self, raw: Json, job: TrainingJob, checkpoint: Checkpoint | None, current: list[Json], now: float
    ) -> None:
        """`spec.suspend`: the attempt's workers are stopped as a preemption stops them. A bound attempt
        counts as a restart (eviction reason `Suspended`) with the work since its checkpoint lost; once
        resumed, the next attempt (new pod names) starts from the newest checkpoint. Workers never
        bound are only deleted: nothing ran, and the same attempt is created again on resume."""
        live = [p for p in current if not p["metadata"].get("deletionTimestamp")]
        for pod in live:
            self._delete(pod)
        previous = job.status
        bound = [p for p in live if p.get("spec", {}).get("nodeName")]
        disruptions, lost, why = previous.restarts, None, None
        if bound:
            metrics.record_eviction(job.spec.queue, jobstate.SUSPENDED)
            disruptions += 1
            lost = previous.lost_gpu_seconds + lost_work(job, checkpoint, bound, now)
            why = jobstate.Disruption(jobstate.SUSPENDED, "spec.suspend is true")
        observed = _observed(
            job, checkpoint, [], disruptions=disruptions, last=why, lost=lost, suspended=True
        )
        self._write(raw, previous, observed, now, why=why)

    def _drop_unbound(self, pods: list[Json]) -> None:
        """A finished job's workers the scheduler never bound (an elastic job that ran with fewer
        than `replicas`) would start late, alone: they go."""
        for pod in pods:
            if not pod.get("spec", {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                self._delete(pod)

    def _restart(
        self,
        raw: Json,
        job: TrainingJob,
        checkpoint: Checkpoint | None,
        current: list[Json],
        why: jobstate.Disruption,
        now: float,
    ) -> float | None:
        """Ends the attempt a broken worker belongs to; what follows is the rule the embedded world
        follows too (`jobstate.restart_decision`): the next attempt after the backoff, or giving up
        past `maxRestarts`."""
        for pod in current:
            if not pod["metadata"].get("deletionTimestamp"):
                self._delete(pod)
        previous = job.status
        # A fresh Running transition each restart, written at the API's resolution of seconds: the
        # disruption's time as this world keeps it, which the backoff counts from.
        recorded = dataclasses.replace(why, at=float(math.floor(now)))
        decision = _decide(job, previous.restarts + 1, recorded, now)
        gave_up = decision.verdict == "GiveUp"
        base = previous.model_copy(
            update={"conditions": [c for c in previous.conditions if c.type != "Running"]}
        )
        observed = _observed(
            job,
            checkpoint,
            [],
            disruptions=decision.restarts,
            last=why,
            gave_up=gave_up,
            pending=None if gave_up else PendingReason(type=BACKOFF, message=decision.reason),
            lost=previous.lost_gpu_seconds + lost_work(job, checkpoint, current, now),
        )
        self._write(raw, previous, observed, now, base=base, why=why)
        return decision.at

    def _write(
        self,
        raw: Json,
        previous: TrainingJobStatus,
        observed: jobstate.Observed,
        now: float,
        *,
        base: TrainingJobStatus | None = None,
        why: jobstate.Disruption | None = None,
    ) -> TrainingJobStatus:
        """The shared status decision as a merge patch, and the Events that announce it."""
        # API timestamps have a resolution of seconds.
        status = jobstate.job_status(base or previous, observed, now=to_datetime(math.floor(now)))
        meta, checkpoint = raw["metadata"], (raw.get("spec") or {}).get("checkpoint") or {}
        jobstate.record_metrics(
            meta["namespace"], meta["name"], status, checkpoint_interval=checkpoint.get("intervalSeconds")
        )
        update = status_patch(raw.get("status") or {}, previous.to_dict(), status.to_dict())
        if update and self._status(raw, update):
            for event in jobstate.job_events(previous, status, why=why):
                self._event(raw, event.reason, event.message, event.type)
            if tracing.enabled():  # under the job's uid, which the scheduler names its pods' trace by
                lifecycle.job_changed(
                    meta.get("uid"),
                    previous,
                    status,
                    job=f"{meta['namespace']}/{meta['name']}",
                    queue=(raw.get("spec") or {}).get("queue") or DEFAULT_QUEUE,
                    submitted_at=seconds(meta.get("creationTimestamp")),
                    why=str(why) if why is not None else None,
                    now=now,
                )
        return status

    # ------------------------------------------------------------------ writes
    def _ensure_service(self, job: Json) -> None:
        create_owned(self.api, SERVICE, headless_service(job))

    def _create(self, pod: Json) -> None:
        create_pod(self.api, pod)

    def _delete(self, pod: Json) -> None:
        delete_pod(self.api, pod)

    def _status(self, raw: Json, update: Json) -> bool:
        return patch_status(self.api, self.jobs, raw, update)

    def _event(self, raw: Json, reason: str, message: str, type: str) -> None:
        operator_event(self.api, raw, reason=reason, message=message, type=type)


def _checkpoints(info: KindInfo, raws: list[Json]) -> list[Checkpoint]:
    """The namespace's Checkpoints gpufleet's checks accept: one written by hand that they refuse is
    no checkpoint to restart from, and must not stop every job of its namespace."""
    found = []
    for raw in raws:
        try:
            checkpoint = from_json(info, raw)
        except GpuFleetError as exc:
            log.warning("%s; not a checkpoint to restart from", exc)
            continue
        if isinstance(checkpoint, Checkpoint):
            found.append(checkpoint)
    return found


def _broken(pod: Json) -> bool:
    """A worker whose state ends the attempt, by the rule both worlds share (`jobstate.worker_broken`):
    a pod being deleted counts as deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return jobstate.worker_broken(phase=phase, deleted=bool(pod["metadata"].get("deletionTimestamp")))


def _why(pod: Json, node: Json | None = None) -> jobstate.Disruption:
    """What ended the attempt, from the worker that broke it, named in the reason."""
    reason, message = _cause(pod, node)
    return jobstate.Disruption(f"{pod['metadata']['name']} {reason}", message)


def _cause(pod: Json, node: Json | None = None) -> tuple[str, str]:
    """Why a worker broke, and how, in the words both worlds share (`kube.disruptions`): with its node
    known, what `run_end_reason` reads from both (a lost node, a failed GPU, a drain); else its
    disruption condition's reason (set by whoever evicted it); else its status' reason, else
    `Deleted` or `Failed`."""
    status = pod.get("status") or {}
    targets = [
        c
        for c in status.get("conditions") or []
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
    ]
    said = str(targets[0].get("message", "")) if targets else str(status.get("message", ""))
    if node is not None:
        reason = disruptions.run_end_reason(pod, node)
        if reason is not None:
            return reason, said
    if targets:
        return disruptions.eviction_reason(str(targets[0].get("reason"))), said
    reason = status.get("reason") or ("Deleted" if pod["metadata"].get("deletionTimestamp") else "Failed")
    return reason, status.get("message", "")


def _observed(
    job: TrainingJob,
    checkpoint: Checkpoint | None,
    pods: list[Json],
    *,
    disruptions: int | None = None,
    last: jobstate.Disruption | None = None,
    gave_up: bool = False,
    pending: PendingReason | None = None,
    lost: float | None = None,
    suspended: bool = False,
) -> jobstate.Observed:
    """The current attempt as `jobstate` reads it: its gang holds capacity once the scheduler bound
    it, every worker (or, for an elastic job, at least `minReplicas`: the scheduler admits such a
    gang with what fits and binds the rest later, if ever); the bound workers are the ones expected
    to run and finish, as the admitted count is in the embedded world.

    The pending reason is left to the scheduler (merged into the job by it) unless one is given, and
    the lost work stays what the status says unless `lost` is given."""
    bound = sum(bool(p.get("spec", {}).get("nodeName")) for p in pods)
    phases = ((p.get("status") or {}).get("phase") for p in pods)
    admitted = bound >= job.spec.min_count
    expected = bound if admitted else job.spec.replicas
    return jobstate.Observed(
        generation=job.metadata.generation,
        checkpoint=checkpoint,
        workers=jobstate.Workers.of(phases, expected=expected, placed=bound, admitted=admitted),
        disruptions=job.status.restarts if disruptions is None else disruptions,
        last_disruption=last,
        gave_up=gave_up,
        lost_gpu_seconds=lost,
        pending=pending,
        nodes=tuple(p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName")),
        suspended=suspended,
    )


def lost_work(job: TrainingJob, checkpoint: Checkpoint | None, pods: list[Json], now: float) -> float:
    """GPU-seconds the attempt of `pods` throws away by ending now, by the core's rule (the embedded
    world records its evictions with it too): its bound workers' GPUs since the attempt's start (the
    first worker's startTime, else the binding that admitted it) or a checkpoint taken after that."""
    bound = [p for p in pods if p.get("spec", {}).get("nodeName")]
    milli = pod_gpu_milli(convert.pod_request(job.spec.worker)) * len(bound)
    starts = (seconds((p.get("status") or {}).get("startTime")) for p in bound)
    bound_at = [t for p in bound if (t := _scheduled_at(p)) is not None]
    started = attempt_start(starts, min(bound_at, default=None))
    saved = to_seconds(checkpoint.spec.time) if checkpoint is not None else None
    return lost_gpu_seconds(milli, started, saved, now)


def _scheduled_at(pod: Json) -> float | None:
    """When the API server bound the pod (its PodScheduled=True transition)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return seconds(c.get("lastTransitionTime"))
    return None


def _waiting(previous: TrainingJobStatus, backoff_over: bool) -> PendingReason | None:
    """Why a job outside its backoff waits, as its status should say (Running condition included).

    The reason is the scheduler's, merged into the object by it; it is only repeated here so that the
    Running condition carries it, as in the embedded world. The operator's own `Backoff` (or the
    Running condition an earlier operator wrote for it, `Restarting`) is replaced by `Queued` once
    the backoff is over, until the scheduler says why the new attempt waits."""
    said = previous.pending_reason
    if backoff_over or (said is not None and said.type == BACKOFF):
        return jobstate.QUEUED
    return said


def status_patch(raw: Json, previous: Json, status: Json) -> Json:
    """The merge patch from `previous` (the object's status as parsed) to `status`: what changed, what
    the object does not hold yet, and null for what is gone."""
    update = {k: v for k, v in status.items() if previous.get(k) != v or k not in raw}
    update.update({k: None for k in previous if k not in status and k in raw})
    return update


def _decide(
    job: TrainingJob, restarts: int, last: jobstate.Disruption, now: float
) -> jobstate.RestartDecision:
    policy = job.spec.restart_policy
    return jobstate.restart_decision(
        restarts=restarts,
        last=last,
        max_restarts=policy.max_restarts,
        backoff_seconds=policy.backoff_seconds,
        now=now,
    )


def _restarting(job: TrainingJob, status: TrainingJobStatus, now: float) -> jobstate.RestartDecision | None:
    """For a job between two attempts, what the shared restart rule says now, from the disruption's
    time as this world keeps it (its Backoff transition); None when no restart is under way."""
    for c in status.conditions:
        # "Restarting": what operators before the shared status wrote for the same transition.
        if c.type == "Running" and c.status == "False" and c.reason in (BACKOFF, "Restarting"):
            since = to_seconds(c.last_transition_time)
            if since is None:
                return None
            return _decide(job, status.restarts, jobstate.Disruption(c.reason or BACKOFF, at=since), now)
    return None
