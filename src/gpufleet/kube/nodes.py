"""Real Nodes as the scheduling core's `NodeSpec`: capacity from status.allocatable, topology from labels.

- GPUs: `nvidia.com/gpu` capacity is the GPU count; allocatable counts only healthy devices (the
  device plugin's contract), so capacity minus allocatable GPUs are unhealthy. Which ones is known
  only from the agent's `gpufleet.io/unhealthy-gpus` annotation; without it the last indices are
  marked, which gives the right count.
- Sharing: GFD's `nvidia.com/gpu.sharing-strategy` (time-slicing | mps) and `nvidia.com/gpu.replicas`;
  MIG from `nvidia.com/mig-<profile>` allocatable (mixed strategy), laid out on the physical GPUs
  (`nvidia.com/gpu.count`) as the agent's `gpufleet.io/mig-layout` says, or packed greedily.
- GPU model: `gpufleet.io/gpu-model`, else GFD's `nvidia.com/gpu.product` in the catalogue's name
  (`NVIDIA-H100-80GB-HBM3` is `H100-80GB`).
- NVIDIA driver: GFD's `nvidia.com/cuda.driver-version.full` (or its `.major`/`.minor`/`.revision`), else
  the older `nvidia.com/cuda.driver.major`/`.minor`/`.rev` (the node agent writes both sets); none
  means unknown, which the CUDA filter lets run anything.
- Schedulable: not cordoned and Ready. Taints are kept: the core honours them.
- Topology: each configured level's label, under the level's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gpufleet.api.errors import ValidationError
from gpufleet.api.gpu_models import canonical_name
from gpufleet.api.numerals import plain_digits
from gpufleet.api.quantity import cpu_milli, memory_mib
from gpufleet.api.versions import parse_driver_version
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import Taint
from gpufleet.kube.config import (
    GPU_MODEL_LABEL,
    MIG_LAYOUT_ANNOTATION,
    NVLINK_DOMAINS_ANNOTATION,
    UNHEALTHY_GPUS_ANNOTATION,
    KubeConfig,
)
from gpufleet.kube.transport import Json
from gpufleet.sharing import mig

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
DRIVER_FULL_LABEL = "nvidia.com/cuda.driver-version.full"
# Newer GFD's part labels, then the deprecated ones it still writes (NVIDIA-STACK.md section 3).
DRIVER_PART_LABELS = (
    (
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.revision",
    ),
    ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"),
)


def gpu_model(labels: Mapping[str, str]) -> str:
    """The GPU model of a node in the catalogue's names (`H100-80GB`), or '' when it has none."""
    # Canonical, as the API writes pools' and requests' models: placement compares names exactly.
    if labels.get(GPU_MODEL_LABEL):
        return canonical_name(labels[GPU_MODEL_LABEL])
    product = labels.get(PRODUCT_LABEL, "")
    return canonical_name(model_of_product(product)) if product else ""


def model_of_product(product: str) -> str:
    """GFD's product label as a model name: vendor prefix, `-SHARED` and `-MIG-...` suffixes dropped."""
    name = re.sub(r"^(NVIDIA|Tesla)-", "", product)
    name = re.sub(r"-SHARED$", "", name)
    name = re.sub(r"-MIG-.*$", "", name)
    canonical = mig.canonical_model(name)
    if canonical != name:
        return canonical
    return re.sub(r"-(SXM\d?|PCIE|HBM\d?e?|NVL)(?=-|$)", "", name)


def _count(resources: Mapping[str, Any], name: str) -> int:
    value = resources.get(name)
    return int(value) if value is not None else 0


def node_spec(node: Json, config: KubeConfig) -> NodeSpec:
    """The core's view of a real Node (a ValidationError names the node when its labels contradict)."""
    meta, spec, status = node["metadata"], node.get("spec", {}), node.get("status", {})
    name = meta["name"]
    labels: dict[str, str] = dict(meta.get("labels") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or allocatable
    model = gpu_model(labels)
    sharing, replicas, layouts, gpus = _sharing(name, labels, annotations, allocatable, capacity, model)
    unhealthy = _unhealthy(name, annotations, capacity, allocatable, gpus, sharing)
    gpu_memory = labels.get(GPU_MEMORY_LABEL, "")
    for level in config.topology_levels:
        value = labels.get(level.label)
        if value is not None:
            labels[level.name] = value
        else:
            labels.pop(level.name, None)
    return NodeSpec(
        name=name,
        gpu_model=model,
        gpus=gpus,
        cpu_milli=cpu_milli(allocatable.get("cpu", 0), field=f"node {name}: allocatable.cpu"),
        memory_mib=memory_mib(allocatable.get("memory", 0), field=f"node {name}: allocatable.memory"),
        gpu_memory_mib=int(gpu_memory) if plain_digits(gpu_memory) else 0,
        labels=labels,
        taints=tuple(
            Taint(t["key"], t.get("value", "") or "", t.get("effect", "NoSchedule"))
            for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable")) or not ready(node),
        nvlink_domains=_nvlink_domains(name, annotations, gpus),
        sharing=sharing,
        replicas=replicas,
        mig_layouts=layouts,
        unhealthy_gpus=unhealthy,
        driver_version=driver_version(name, labels),
    )


def driver_version(name: str, labels: Mapping[str, str]) -> str:
    """The node's NVIDIA driver from GFD's labels ('' when it has none); a malformed one is refused
    with the label named, so the node is left out rather than taken to run any CUDA version."""
    text, label = labels.get(DRIVER_FULL_LABEL, ""), DRIVER_FULL_LABEL
    for major, minor, rev in DRIVER_PART_LABELS:
        if text:
            break
        if labels.get(major) and labels.get(minor):
            text = ".".join(labels[key] for key in (major, minor, rev) if labels.get(key))
            label = major
    if text:
        try:
            parse_driver_version(text)
        except ValueError as exc:
            raise ValidationError(str(exc), obj=f"Node {name}", field=f"metadata.labels[{label}]") from None
    return text


def ready(node: Json) -> bool:
    """Whether the Node's Ready condition is True (what the node lifecycle controller relies on)."""
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _sharing(
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    allocatable: Mapping[str, Any],
    capacity: Mapping[str, Any],
    model: str,
) -> tuple[SharingMode, int, dict[int, tuple[str, ...]], int]:
    """(mode, replicas, MIG layouts, physical GPU count) of a node."""
    mig_counts = {
        key[len(MIG_PREFIX) :]: _count(capacity, key) for key in capacity if key.startswith(MIG_PREFIX)
    }
    mig_counts = {profile: n for profile, n in mig_counts.items() if n > 0}
    if mig_counts or MIG_LAYOUT_ANNOTATION in annotations:
        physical = int(labels.get(COUNT_LABEL, "0") or 0)
        layouts = _mig_layouts(name, annotations, mig_counts, model, physical)
        return SharingMode.MIG, 1, layouts, max(physical, max(layouts, default=-1) + 1)
    strategy = labels.get(STRATEGY_LABEL, "none")
    replicas = int(labels.get(REPLICAS_LABEL, "1") or 1)
    whole = _count(capacity, GPU_RESOURCE)
    shared = _count(capacity, SHARED_RESOURCE)
    if strategy in ("time-slicing", "mps") and replicas > 1:
        units = shared or whole  # renamed to .shared, or advertised as nvidia.com/gpu
        physical = int(labels.get(COUNT_LABEL, "0") or 0) or units // replicas
        mode = SharingMode.MPS if strategy == "mps" else SharingMode.TIME_SLICING
        return mode, replicas, {}, physical
    return SharingMode.EXCLUSIVE, 1, {}, whole


def _mig_layouts(
    name: str, annotations: Mapping[str, str], counts: Mapping[str, int], model: str, physical: int
) -> dict[int, tuple[str, ...]]:
    raw = annotations.get(MIG_LAYOUT_ANNOTATION)
    if raw:
        try:
            parsed = json.loads(raw)
            return {int(gpu): tuple(str(p) for p in profiles) for gpu, profiles in parsed.items()}
        except (ValueError, TypeError, AttributeError):
            raise ValidationError(
                "not a JSON object of GPU index to MIG profiles",
                obj=f"Node {name}",
                field=f"metadata.annotations[{MIG_LAYOUT_ANNOTATION}]",
            ) from None
    if not model or not mig.mig_capable(model):
        raise ValidationError(
            f"advertises MIG devices but its GPU model {model!r} has no MIG catalogue",
            obj=f"Node {name}",
            field="metadata.labels",
        )
    instances = sorted(
        (profile for profile, n in counts.items() for _ in range(n)),
        key=lambda p: -mig.profile(model, p).memory_slices,
    )
    # Largest first, each onto the emptiest GPU it fits on: the device plugin's counts say nothing of
    # the layout, and spreading reproduces the usual balanced layouts where first-fit strands slices.
    layouts: dict[int, list[str]] = {gpu: [] for gpu in range(max(physical, 1))}
    used = dict.fromkeys(layouts, 0)
    for instance in instances:
        size = mig.profile(model, instance).memory_slices
        fitting = [
            gpu for gpu in sorted(layouts, key=lambda g: (used[g], g)) if _fits(model, layouts[gpu], instance)
        ]
        gpu = fitting[0] if fitting else len(layouts)  # more than the labelled GPUs hold: the count was wrong
        layouts.setdefault(gpu, []).append(instance)
        used[gpu] = used.get(gpu, 0) + size
    return {gpu: tuple(profiles) for gpu, profiles in layouts.items()}


def _fits(model: str, layout: list[str], instance: str) -> bool:
    try:
        mig.plan_layout(model, [*layout, instance])
    except ValidationError:
        return False
    return True


def _unhealthy(
    name: str,
    annotations: Mapping[str, str],
    capacity: Mapping[str, Any],
    allocatable: Mapping[str, Any],
    gpus: int,
    sharing: SharingMode,
) -> tuple[int, ...]:
    raw = annotations.get(UNHEALTHY_GPUS_ANNOTATION)
    if raw:
        try:
            indices = tuple(sorted({int(part) for part in raw.split(",") if part.strip()}))
        except ValueError:
            raise ValidationError(
                "not a comma-separated list of GPU indices",
                obj=f"Node {name}",
                field=f"metadata.annotations[{UNHEALTHY_GPUS_ANNOTATION}]",
            ) from None
        return tuple(i for i in indices if 0 <= i < gpus)
    if sharing is not SharingMode.EXCLUSIVE:
        return ()
    missing = _count(capacity, GPU_RESOURCE) - _count(allocatable, GPU_RESOURCE)
    return tuple(range(gpus - missing, gpus)) if missing > 0 else ()


def _nvlink_domains(
    name: str, annotations: Mapping[str, str], gpus: int
) -> tuple[tuple[int, ...], ...] | None:
    raw = annotations.get(NVLINK_DOMAINS_ANNOTATION)
    if not raw:
        return None  # all GPUs of a node in one domain (HGX); the agent annotates PCIe pairs
    try:
        domains = tuple(tuple(int(g) for g in group) for group in json.loads(raw))
    except (ValueError, TypeError):
        raise ValidationError(
            "not a JSON list of GPU index lists",
            obj=f"Node {name}",
            field=f"metadata.annotations[{NVLINK_DOMAINS_ANNOTATION}]",
        ) from None
    return tuple(tuple(g for g in group if g < gpus) for group in domains)
