"""Flavors: what quota a workload is counted in, and which flavor it is given.

A whole-GPU or shared pod counts in its GPU model (1000 milli per GPU, or its `gpu_milli` share); a MIG
pod counts one instance (1000) of its profile name. A workload whose pods accept several GPU models gets
one model for all its pod sets, chosen as Kueue's flavor assignment does: the models are tried in order
(the pod's own list when it gives one, else the order of the queue's quotas) and the first that both
fits the quota and can be placed wins; a model the queue has no quota for is never tried.

Capacity type. A queue's flavor is a GPU model (`H100-80GB`: any node of that model) or a model and a
capacity type (`H100-80GB/spot`, `H100-80GB/on-demand`: only nodes labelled so with
`gpufleet.io/capacity-type`, as Kueue's ResourceFlavors select nodes by label). For one model, the
queue's flavors are tried in the order the queue lists them (Kueue's flavor order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.api.labels import CAPACITY_TYPE_LABEL
from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.scheduler.workload import PodSet, Workload

CAPACITY_TYPES: tuple[str, ...] = ("on-demand", "spot")


def split_flavor(flavor: str) -> tuple[str, str | None]:
    """`H100-80GB/spot` -> (`H100-80GB`, `spot`); a plain model (or MIG profile) -> (it, None)."""
    model, sep, capacity = flavor.rpartition("/")
    if sep and capacity in CAPACITY_TYPES and model:
        return model, capacity
    return flavor, None


def selects(flavor: str, model: str | None, capacity: str | None) -> bool:
    """Whether a flavor selects a node of GPU model `model` labelled with capacity type `capacity`
    (None: unlabelled): its model is the node's, and its capacity type, if any, is the node's label."""
    flavor_model, flavor_capacity = split_flavor(flavor)
    return flavor_model == model and flavor_capacity in (None, capacity)


def node_flavor(flavors: Sequence[str], model: str | None, capacity: str | None) -> str | None:
    """The flavor a pod on such a node is charged to (decision 21, in every world): the first of the
    queue's `flavors`, in its order, that selects the node; None when none does."""
    for flavor in flavors:
        if selects(flavor, model, capacity):
            return flavor
    return None


def model_of(flavor: str | None) -> str | None:
    """The GPU model of a flavor (None stays None)."""
    return None if flavor is None else split_flavor(flavor)[0]


@dataclass(frozen=True, slots=True)
class Assignment:
    """The flavor and the number of pods per pod set a workload is admitted (or tried) with."""

    model: str | None
    counts: tuple[int, ...]
    usage: Mapping[str, int]

    @property
    def gpu_milli(self) -> int:
        return sum(self.usage.values())


def pod_usage(request: PodRequest, model: str | None) -> tuple[str, int] | None:
    """The flavor and milli-GPU one pod is counted for; None for a CPU-only pod."""
    kind = request.kind
    if kind is GpuKind.MIG:
        assert request.mig is not None
        return request.mig, pod_gpu_milli(request)
    if kind is GpuKind.NONE or model is None:
        return None
    return model, pod_gpu_milli(request)


def pod_gpu_milli(request: PodRequest) -> int:
    """The milli-GPU one pod is counted for, whatever its flavor: a MIG instance counts as one GPU."""
    return GPU_MILLI if request.kind is GpuKind.MIG else request.total_gpu_milli


def usage_of(workload: Workload, model: str | None, counts: Sequence[int]) -> dict[str, int]:
    """Milli-GPU per flavor of `counts` pods of each pod set with the given model."""
    usage: dict[str, int] = {}
    for pod_set, count in zip(workload.pod_sets, counts, strict=True):
        found = pod_usage(pod_set.request, model)
        if found is not None:
            flavor, milli = found
            usage[flavor] = usage.get(flavor, 0) + milli * count
        for charge in pod_set.charges if count else ():  # a shared claim's GPUs: once, not per pod
            charged = pod_usage(charge.request, model)
            if charged is not None:
                flavor, milli = charged
                usage[flavor] = usage.get(flavor, 0) + milli
    return usage


def needs_model(workload: Workload) -> bool:
    return any(r.kind in (GpuKind.WHOLE, GpuKind.SHARE) for r in _requests(workload))


def _requests(workload: Workload) -> list[PodRequest]:
    """Each pod set's request and the shared claims it is charged for: both pick the flavor."""
    return [r for ps in workload.pod_sets for r in (ps.request, *(c.request for c in ps.charges))]


def candidate_models(
    workload: Workload, *, queue_flavors: Sequence[str], fleet_models: Sequence[str], unlimited: bool
) -> list[str | None]:
    """The flavors to try, in order (GPU models, or models with a capacity type). [None] when the
    workload needs no GPU model. An unlimited queue tries models (any capacity type)."""
    if not needs_model(workload):
        return [None]
    listed: list[str] | None = None
    for request in _requests(workload):
        if request.kind in (GpuKind.WHOLE, GpuKind.SHARE) and request.gpu_models:
            allowed = list(request.gpu_models)
            listed = allowed if listed is None else [m for m in listed if m in allowed]
    if unlimited:
        return list(listed if listed is not None else fleet_models)
    if listed is None:
        return list(queue_flavors)
    # Model by model in the pod's order; a model's flavors (plain, capacity types) in the queue's order.
    by_model: dict[str, list[str]] = {}
    for flavor in queue_flavors:
        by_model.setdefault(split_flavor(flavor)[0], []).append(flavor)
    return [flavor for model in listed for flavor in by_model.get(model, ())]


def pinned(workload: Workload, model: str | None, counts: Sequence[int]) -> Workload:
    """The workload as placement should see it: every GPU pod on the flavor `model` (its GPU model, and
    its capacity type's nodes when it has one), `counts` pods per pod set."""
    pod_sets: list[PodSet] = []
    for pod_set, count in zip(workload.pod_sets, counts, strict=True):
        request = pod_set.request
        if model is not None and request.kind in (GpuKind.WHOLE, GpuKind.SHARE):
            gpu_model, capacity = split_flavor(model)
            request = dataclasses.replace(request, gpu_models=(gpu_model,))
            if capacity is not None:
                selector = dict(request.node_selector)
                selector[CAPACITY_TYPE_LABEL] = capacity
                request = dataclasses.replace(request, node_selector=tuple(sorted(selector.items())))
        min_count = None if pod_set.min_count is None else min(pod_set.min_count, count)
        pod_sets.append(dataclasses.replace(pod_set, count=count, request=request, min_count=min_count))
    return dataclasses.replace(workload, pod_sets=tuple(pod_sets))


def shrink_steps(workload: Workload) -> int:
    """How many steps an elastic workload can be shrunk by (0 when it is not elastic)."""
    steps = 0
    for ps in workload.pod_sets:
        if ps.min_count is not None and ps.count - ps.min_count > steps:
            steps = ps.count - ps.min_count
    return steps


def counts_at(workload: Workload, step: int) -> tuple[int, ...]:
    """Pod counts after shrinking `step` steps toward the minimum, all pod sets in proportion."""
    total = shrink_steps(workload)
    if total == 0 or step <= 0:
        return tuple(ps.count for ps in workload.pod_sets)
    out = []
    for ps in workload.pod_sets:
        spare = ps.count - ps.minimum
        out.append(ps.count - (spare * min(step, total) + total - 1) // total)
    return tuple(out)
