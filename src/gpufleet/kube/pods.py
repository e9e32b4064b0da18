"""Real Pods as the scheduling core's workloads: requests, gangs, queues, priorities.

A Pod is gpufleet's when `spec.schedulerName` is the configured name. Pods that carry the same
`gpufleet.io/gang` label in a namespace form one gang of `gpufleet.io/gang-size` pods (elastic down to
`gpufleet.io/gang-min-size`), grouped into pod sets by `gpufleet.io/pod-set` (default `main`); the
TrainingJob operator labels its workers so, and a Job's pod template may too. Any other pod is a
workload of its own. A gang is submitted only once all its members exist, so it is placed all or
nothing.

A workload's class (which picks its placement policy) is that of what owns its pods: a TrainingJob's
workers are `training`, an InferenceService's replicas `inference`; any other pod says its class with
the `gpufleet.io/workload-class` label or annotation, else it is `batch` (`controllers.workload_class`).

Requests are the pod's effective requests as kube-scheduler computes them: the sum over containers,
at least the largest init container, plus the pod overhead; limits stand for requests where only
limits are given (extended resources always work so).

Where a pod may run: its `nodeSelector` and its required node affinity
(`affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`), both of which must hold, as
kube-scheduler's NodeAffinity plugin has it. Preferred node affinity and pod (anti-)affinity are not
read (docs/kubernetes.md).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import pydantic

from gpufleet.api.dra_devices import NodeSelector
from gpufleet.api.errors import ValidationError
from gpufleet.api.gpu_models import canonical_name
from gpufleet.api.labels import WORKLOAD_CLASS_LABEL
from gpufleet.api.numerals import plain_digits
from gpufleet.api.quantity import cpu_milli, memory_mib, parse_quantity
from gpufleet.api.resource import GROUP
from gpufleet.api.runtime import WorkloadClass
from gpufleet.api.validation import translate_error
from gpufleet.api.versions import parse_cuda_version
from gpufleet.controllers.workload_class import workload_class
from gpufleet.fleet.request import PodRequest, Toleration
from gpufleet.kube.config import (
    CHECKPOINT_ANNOTATION,
    CUDA_VERSION_ANNOTATION,
    GANG_LABEL,
    GANG_MIN_LABEL,
    GANG_SIZE_LABEL,
    GPU_MILLI_ANNOTATION,
    GPU_MODEL_LABEL,
    GPUS_ANNOTATION,
    POD_SET_LABEL,
    PREEMPTIBLE_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    USER_LABEL,
    KubeConfig,
)
from gpufleet.kube.informer import key_of
from gpufleet.kube.nodes import GPU_RESOURCE, MIG_PREFIX, PRODUCT_LABEL, SHARED_RESOURCE, model_of_product
from gpufleet.kube.transport import Json
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload


def is_ours(pod: Json, config: KubeConfig) -> bool:
    return bool(pod.get("spec", {}).get("schedulerName") == config.scheduler_name)


def is_bound(pod: Json) -> bool:
    return bool(pod.get("spec", {}).get("nodeName"))


def is_finished(pod: Json) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def holds_resources(pod: Json) -> bool:
    """Bound and not finished: what a node's capacity must account for."""
    return is_bound(pod) and not is_finished(pod)


def _requests(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return merged


def effective_requests(pod: Json) -> dict[str, int]:
    """Resource name -> amount (cpu in milli, memory in MiB, others as counts)."""
    spec = pod.get("spec", {})
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in _amounts(pod, _requests(container)).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _amounts(pod, _requests(container)).items():
            if container.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
                total[name] = total.get(name, 0) + amount
            else:
                total[name] = max(total.get(name, 0), amount)
    for name, amount in _amounts(pod, spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + amount
    return total


def _amounts(pod: Json, resources: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in resources.items():
        try:
            out[name] = _amount(name, value)
        except (ValidationError, TypeError):  # said again with the pod and the resource it is about
            where = f"pod {key_of(pod)}: {name}"
            if name == "cpu":
                cpu_milli(value, field=where)
            elif name == "memory":
                memory_mib(value, field=where)
            parse_quantity(value, field=where)
            raise
    return out


@functools.lru_cache(maxsize=4096)
def _amount(name: str, value: str | int | float) -> int:
    """One resource amount (cpu in milli, memory in MiB, others as counts). Pods of one template ask for
    the same few quantities over and over: each is parsed once."""
    if name == "cpu":
        return cpu_milli(value, field=name)
    if name == "memory":
        return memory_mib(value, field=name)
    return int(parse_quantity(value, field=name))


_REQUESTS: dict[bytes, PodRequest] = {}
"""Requests by the shape of what `pod_request` reads: the pods of one template are translated once."""
_REQUESTS_KEPT = 4096


def pod_request(pod: Json, config: KubeConfig) -> PodRequest:
    """What one pod asks of a node, in the core's terms."""
    shape = _shape(pod, config)
    if shape is not None:
        known = _REQUESTS.get(shape)
        if known is not None:
            return known
    request = _pod_request(pod, config)
    if shape is not None:
        if len(_REQUESTS) >= _REQUESTS_KEPT:
            _REQUESTS.clear()
        _REQUESTS[shape] = request
    return request


def _shape(pod: Json, config: KubeConfig) -> bytes | None:
    """Every part of a pod (and of the config) that `_pod_request` reads, as one key; None where a part
    cannot be written as JSON (then the pod is translated without the memo)."""
    spec = pod.get("spec", {})
    annotations = pod["metadata"].get("annotations") or {}
    try:
        return orjson.dumps(
            (
                [c.get("resources") for c in spec.get("containers") or []],
                [(c.get("resources"), c.get("restartPolicy")) for c in spec.get("initContainers") or []],
                spec.get("overhead"),
                spec.get("nodeSelector"),
                _required_affinity(spec),
                spec.get("tolerations"),
                annotations.get(GPU_MILLI_ANNOTATION),
                annotations.get(CUDA_VERSION_ANNOTATION),
                config.shared_gpu_milli,
            )
        )
    except TypeError:
        return None


def _pod_request(pod: Json, config: KubeConfig) -> PodRequest:
    meta, spec = pod["metadata"], pod.get("spec", {})
    annotations = meta.get("annotations") or {}
    where = f"Pod {key_of(pod)}"
    requests = effective_requests(pod)
    whole = requests.get(GPU_RESOURCE, 0)
    shared = requests.get(SHARED_RESOURCE, 0)
    migs = [name[len(MIG_PREFIX) :] for name, n in requests.items() if name.startswith(MIG_PREFIX) and n > 0]
    if (
        sum((whole > 0, shared > 0, bool(migs))) > 1
        or len(migs) > 1
        or any(requests[MIG_PREFIX + m] > 1 for m in migs)
    ):
        raise ValidationError(
            "asks for more than one kind of GPU (whole GPUs, a shared GPU or one MIG instance)",
            obj=where,
            field="spec.containers[].resources",
        )
    gpus, milli = whole, 0
    if GPU_MILLI_ANNOTATION in annotations and whole <= 1:
        milli, gpus = _milli(annotations[GPU_MILLI_ANNOTATION], where), 0
    elif shared:
        milli = config.shared_gpu_milli
    selector = dict(spec.get("nodeSelector") or {})
    models: tuple[str, ...] = ()
    # Canonical, as nodes' models are (`kube.nodes.gpu_model`): a selector written `H100` means H100-80GB.
    if GPU_MODEL_LABEL in selector:
        models = (canonical_name(selector.pop(GPU_MODEL_LABEL)),)
    elif PRODUCT_LABEL in selector:
        models = (canonical_name(model_of_product(selector.pop(PRODUCT_LABEL))),)
    return PodRequest(
        cpu_milli=requests.get("cpu", 0),
        memory_mib=requests.get("memory", 0),
        gpus=gpus,
        gpu_milli=milli if milli < 1000 else 0,
        mig=migs[0] if migs else None,
        gpu_models=models,
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or []),
        node_selector=tuple(sorted(selector.items())),
        cuda_version=_cuda(annotations.get(CUDA_VERSION_ANNOTATION), where),
        node_affinity=_node_affinity(spec, where),
    )


REQUIRED_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"
AFFINITY_FIELD = f"spec.affinity.nodeAffinity.{REQUIRED_AFFINITY}"


def _required_affinity(spec: Mapping[str, Any]) -> object:
    """The raw required node affinity of a pod spec (None when it has none); what is not a mapping on
    the way is left to `_node_affinity` to refuse."""
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else affinity
    return node.get(REQUIRED_AFFINITY) if isinstance(node, Mapping) else node


def _node_affinity(spec: Mapping[str, Any], where: str) -> NodeSelector | None:
    """The pod's required node affinity as the core's NodeSelector; refused, naming the pod and the field,
    where the API server would refuse it (an unknown operator, In without values, Gt with a word...)."""
    raw = _required_affinity(spec)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValidationError("must be a mapping", obj=where, field=AFFINITY_FIELD)
    try:
        return NodeSelector.model_validate(raw)
    except pydantic.ValidationError as exc:
        error = translate_error(exc, obj=where)
        field = f"{AFFINITY_FIELD}.{error.field}" if error.field else AFFINITY_FIELD
        raise ValidationError(error.detail, obj=where, field=field) from None


def _cuda(value: str | None, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        return parse_cuda_version(value)
    except ValueError as exc:
        raise ValidationError(
            str(exc), obj=where, field=f"metadata.annotations[{CUDA_VERSION_ANNOTATION}]"
        ) from None


def _milli(value: str, where: str) -> int:
    try:
        milli = int(value)
    except ValueError:
        milli = -1
    if not 0 < milli < 1000:
        raise ValidationError(
            f"must be a whole number of milli-GPU between 1 and 999, got {value!r}",
            obj=where,
            field=f"metadata.annotations[{GPU_MILLI_ANNOTATION}]",
        )
    return milli


def _toleration(raw: Mapping[str, Any]) -> Toleration:
    return Toleration(
        key=raw.get("key") or "",
        operator=raw.get("operator") or "Equal",
        value=raw.get("value") or "",
        effect=raw.get("effect") or "",
    )


# ------------------------------------------------------------------------------- workloads
@dataclass(slots=True)
class Group:
    """The pods of one workload as found in the cluster, and what the workload is."""

    key: str
    """`namespace/gang` or `namespace/pod`: the core workload's name."""
    namespace: str
    size: int
    min_size: int | None
    members: list[Json] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.members) >= self.size

    def pod_name(self, pod: Json) -> str:
        """The core's name of a member: `{workload}/{podSet}/{index}` (index among its pod set's pods)."""
        pod_set = pod_set_of(pod)
        same = sorted(p["metadata"]["name"] for p in self.members if pod_set_of(p) == pod_set)
        return f"{self.key}/{pod_set}/{same.index(pod['metadata']['name'])}"

    def by_core_name(self) -> dict[str, Json]:
        return {self.pod_name(pod): pod for pod in self.members}


def pod_set_of(pod: Json) -> str:
    return str((pod["metadata"].get("labels") or {}).get(POD_SET_LABEL, "main"))


FLAVOR_ANNOTATION = "gpufleet.io/flavor"
"""Written at bind time, with the GPUs chosen: the quota flavor the pod's GPUs are charged to (`H100-80GB`,
`H100-80GB/spot`, or a MIG profile), so a scheduler that starts later charges the running workload to
the flavor it was admitted under."""


_BIND_NOTES = (GPUS_ANNOTATION, FLAVOR_ANNOTATION)
"""What a binding writes on the pod."""


def same_request(before: Json, after: Json) -> bool:
    """Whether two versions of a pod make the same workload member: the same labels, spec (its node
    aside) and annotations (the ones a binding writes aside)."""
    old_meta, new_meta = before["metadata"], after["metadata"]
    if (old_meta.get("labels") or {}) != (new_meta.get("labels") or {}):
        return False
    old_notes = {k: v for k, v in (old_meta.get("annotations") or {}).items() if k not in _BIND_NOTES}
    new_notes = {k: v for k, v in (new_meta.get("annotations") or {}).items() if k not in _BIND_NOTES}
    if old_notes != new_notes:
        return False
    old_spec = {k: v for k, v in (before.get("spec") or {}).items() if k != "nodeName"}
    new_spec = {k: v for k, v in (after.get("spec") or {}).items() if k != "nodeName"}
    return old_spec == new_spec


def recorded_flavor(pod: Json) -> str | None:
    """The flavor noted on a bound pod by the scheduler that bound it (None when none was noted)."""
    value = (pod["metadata"].get("annotations") or {}).get(FLAVOR_ANNOTATION)
    return str(value) if value else None


JOB_GANG_ANNOTATION = "gpufleet.io/gang-scheduling"
"""On a Job: `"true"` makes its pods (without a gang label) one gang sized by parallelism/completions."""


@dataclass(frozen=True, slots=True)
class Membership:
    """Which workload a live pod of ours belongs to, and the size that workload's gang must reach."""

    key: str
    size: int
    min_size: int | None


def membership(pod: Json, config: KubeConfig, jobs: Mapping[str, Json] | None = None) -> Membership | None:
    """The workload of a live pod of ours (None for others' pods, finished ones and ones being deleted).

    1. `gpufleet.io/gang` label: the gang `namespace/gang` of `gpufleet.io/gang-size` pods.
    2. Owned by a Job that asks for gang scheduling (annotation `gpufleet.io/gang-scheduling: "true"`
       on the Job): the gang `namespace/job.NAME` of min(parallelism, completions) pods, the number
       of pods the Job controller keeps running at once (an unset completions means parallelism).
    3. Otherwise the pod is a workload of its own.
    """
    if not is_ours(pod, config) or is_finished(pod) or pod["metadata"].get("deletionTimestamp"):
        return None
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace") or "default"
    gang = labels.get(GANG_LABEL)
    if gang:
        size = _size(labels.get(GANG_SIZE_LABEL), pod, GANG_SIZE_LABEL) or 1
        return Membership(f"{namespace}/{gang}", size, _size(labels.get(GANG_MIN_LABEL), pod, GANG_MIN_LABEL))
    job = _gang_job(pod, jobs or {})
    if job is not None:
        spec = job.get("spec") or {}
        raw = spec.get("parallelism")
        parallelism = 1 if raw is None else int(raw)
        completions = spec.get("completions")
        size = parallelism if completions is None else min(parallelism, int(completions))
        return Membership(f"{namespace}/job.{job['metadata']['name']}", max(size, 1), None)
    return Membership(f"{namespace}/{meta['name']}", 1, None)


def _gang_job(pod: Json, jobs: Mapping[str, Json]) -> Json | None:
    namespace = pod["metadata"].get("namespace") or "default"
    for owner in pod["metadata"].get("ownerReferences") or []:
        if owner.get("kind") == "Job" and owner.get("controller"):
            job = jobs.get(f"{namespace}/{owner.get('name')}")
            annotations = (job or {}).get("metadata", {}).get("annotations") or {}
            if job is not None and annotations.get(JOB_GANG_ANNOTATION, "").lower() == "true":
                return job
    return None


def group_pods(
    pods: Iterable[Json], config: KubeConfig, jobs: Mapping[str, Json] | None = None
) -> dict[str, Group]:
    """gpufleet's live (not finished, not being deleted) pods grouped into workloads."""
    groups: dict[str, Group] = {}
    for pod in pods:
        member = membership(pod, config, jobs)
        if member is None:
            continue
        group = groups.get(member.key)
        if group is None:
            group = groups[member.key] = Group(
                member.key, pod["metadata"].get("namespace") or "default", member.size, member.min_size
            )
        group.members.append(pod)
    return groups


def _size(raw: str | None, pod: Json, label: str) -> int | None:
    if raw is None:
        return None
    if not plain_digits(raw) or int(raw) < 1:
        raise ValidationError(
            f"must be a positive whole number, got {raw!r}",
            obj=f"Pod {key_of(pod)}",
            field=f"metadata.labels[{label}]",
        )
    return int(raw)


def workload(group: Group, config: KubeConfig, priorities: Mapping[str, int]) -> Workload:
    """The core's Workload for a complete gang (or a single pod)."""
    first = min(
        group.members, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
    )
    meta = first["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    sets: dict[str, list[Json]] = {}
    for pod in group.members:
        sets.setdefault(pod_set_of(pod), []).append(pod)
    pod_sets = []
    for name in sorted(sets):
        members = sets[name]
        request = pod_request(members[0], config)
        for other in members[1:]:
            if pod_request(other, config) != request:
                raise ValidationError(
                    f"pod {key_of(other)} asks for other resources than {key_of(members[0])}; "
                    "pods of one pod set must be alike",
                    obj=f"gang {group.key}",
                    field=f"metadata.labels[{POD_SET_LABEL}]",
                )
        count = len(members) if len(sets) > 1 else max(group.size, len(members))
        minimum = None
        if group.min_size is not None and len(sets) == 1:
            minimum = min(group.min_size, count)
        pod_sets.append(PodSet(name, count, request, minimum))
    return Workload(
        name=group.key,
        pod_sets=tuple(pod_sets),
        queue=labels.get(QUEUE_LABEL, config.default_queue),
        priority=_priority(first, priorities),
        topology=TopologyRequest(
            annotations.get(TOPOLOGY_REQUIRED_ANNOTATION), annotations.get(TOPOLOGY_PREFERRED_ANNOTATION)
        ),
        preemptible=annotations.get(PREEMPTIBLE_ANNOTATION, "true").lower() != "false",
        user=labels.get(USER_LABEL, ""),
        submitted_at=seconds(meta.get("creationTimestamp")) or 0.0,
        last_checkpoint_at=seconds(annotations.get(CHECKPOINT_ANNOTATION)),
        workload_class=class_of(first),
    )


def class_of(pod: Json) -> WorkloadClass:
    """The pod's workload class: its gpufleet owner's (TrainingJob, InferenceService), else the one its
    `gpufleet.io/workload-class` label (or annotation) states, else batch. An unknown value is refused
    with the pod and the label named."""
    meta = pod["metadata"]
    owners = [
        str(ref.get("kind", ""))
        for ref in meta.get("ownerReferences") or []
        if str(ref.get("apiVersion", "")).partition("/")[0] == GROUP  # not a Job or a ReplicaSet
    ]
    stated, field = None, None
    for place in ("labels", "annotations"):
        value = (meta.get(place) or {}).get(WORKLOAD_CLASS_LABEL)
        if value is not None:
            stated, field = str(value), f"metadata.{place}[{WORKLOAD_CLASS_LABEL}]"
            break
    return workload_class(owners, stated, obj=f"Pod {key_of(pod)}", field=field)


def _priority(pod: Json, priorities: Mapping[str, int]) -> int:
    spec = pod.get("spec", {})
    label = (pod["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    if label is not None and label in priorities:
        return priorities[label]
    if spec.get("priority") is not None:
        return int(spec["priority"])  # resolved from priorityClassName by the API server's admission
    name = spec.get("priorityClassName")
    return priorities.get(name, 0) if name else 0


def seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
