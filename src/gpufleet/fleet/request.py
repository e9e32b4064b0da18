"""What one pod asks of a node: CPU, memory and one kind of GPU request."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from gpufleet.api.dra_devices import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

GPU_MILLI = 1000


class GpuKind(Enum):
    """The four shapes of GPU request; a pod asks for exactly one."""

    NONE = "none"
    WHOLE = "whole"
    SHARE = "share"
    MIG = "mig"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes toleration semantics: an empty key with operator Exists tolerates everything."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
"""The taint effects that keep a pod off a node (PreferNoSchedule only makes the node less liked)."""


def untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first of `taints` that keeps a pod with `tolerations` off a node carrying it, or None.

    The one rule for nodes (the placement filter) and for a cluster's hosts (the federation's
    dispatcher), so a workload is never sent to a cluster whose scheduler would refuse every host.
    """
    for taint in taints:
        if taint.effect in SCHEDULING_EFFECTS and not any(tol.tolerates(taint) for tol in tolerations):
            return taint
    return None


def selector_matches(selector: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` satisfies a pod's nodeSelector: every key there, with that exact value.

    The one rule for nodes (the placement filter) and for a cluster's hosts (the federation's dispatcher),
    so a workload is never sent to a cluster whose scheduler would find no node its selector accepts.
    """
    return all(labels.get(key) == value for key, value in selector)


def node_selector_matches(selector: NodeSelector, node_name: str, labels: Mapping[str, str]) -> bool:
    """Kubernetes' NodeSelector: any term whose every requirement holds (fields: metadata.name only).

    The one rule for a pod's required node affinity (the placement filter, the federation's dispatcher)
    and for where DRA devices reach (`fleet.devices`), as kube-scheduler uses one matcher for both.
    """
    for term in selector.node_selector_terms:
        if not (term.match_expressions or term.match_fields):
            continue  # an empty term matches nothing, as in Kubernetes
        fields = {"metadata.name": node_name}
        if all(_holds(r, labels) for r in term.match_expressions) and all(
            _holds(r, fields) for r in term.match_fields
        ):
            return True
    return False


def all_of(*selectors: NodeSelector | None) -> NodeSelector | None:
    """One NodeSelector that holds where every given one holds (None where none is given): each term of
    one joined with each term of the next, since a NodeSelector is an OR of ANDs. A term with no
    requirement matches no node, so it stays empty when joined."""
    given = [s for s in selectors if s is not None]
    if not given:
        return None
    terms = list(given[0].node_selector_terms)
    for selector in given[1:]:
        terms = [
            NodeSelectorTerm(
                match_expressions=[*mine.match_expressions, *theirs.match_expressions],
                match_fields=[*mine.match_fields, *theirs.match_fields],
            )
            if _has_requirements(mine) and _has_requirements(theirs)
            else NodeSelectorTerm()
            for mine in terms
            for theirs in selector.node_selector_terms
        ]
    return NodeSelector(node_selector_terms=terms)


def _has_requirements(term: NodeSelectorTerm) -> bool:
    return bool(term.match_expressions or term.match_fields)


def _holds(req: NodeSelectorRequirement, values: Mapping[str, str]) -> bool:
    value = values.get(req.key)
    match req.operator:
        case "In":
            return value is not None and value in req.values
        case "NotIn":
            return value is None or value not in req.values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case _:  # Gt, Lt: one integer value on each side
            if value is None or len(req.values) != 1:
                return False
            try:
                mine, theirs = int(value), int(req.values[0])
            except ValueError:
                return False
            return mine > theirs if req.operator == "Gt" else mine < theirs


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Per-pod request. `gpus` whole GPUs, or `gpu_milli` (< 1000) of one GPU, or one `mig` instance.

    `gpu_models` lists the allowed GPU models; empty means any model. `cuda_version` is the CUDA
    toolkit (major, minor) the pod's image was built with; None means the pod states none.
    `node_affinity` is the pod's required node affinity (Kubernetes' NodeSelector terms); None: none.
    """

    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    mig: str | None = None
    gpu_models: tuple[str, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = field(default=())
    cuda_version: tuple[int, int] | None = None
    node_affinity: NodeSelector | None = field(default=None, compare=False)
    """Compared and hashed through `affinity_key`: the pydantic model itself is neither hashable nor cheap
    to compare, and requests are dict keys (per-request caches of the placement filters)."""
    affinity_key: str | None = field(init=False, repr=False)
    """The affinity's canonical JSON: two requests with the same required terms are the same request."""
    kind: GpuKind = field(init=False, compare=False, repr=False)
    """Whole GPUs, a share, a MIG instance or none: read on every placement step, so kept, not derived."""

    def __post_init__(self) -> None:
        shapes = sum((self.gpus > 0, self.gpu_milli > 0, self.mig is not None))
        if shapes > 1:
            raise ValueError("a pod asks for whole GPUs, a GPU share or a MIG instance, not several")
        if self.gpu_milli >= GPU_MILLI:
            raise ValueError("gpu_milli must be below 1000; ask for whole GPUs instead")
        if min(self.cpu_milli, self.memory_mib, self.gpus, self.gpu_milli) < 0:
            raise ValueError("requests must not be negative")
        if self.gpus:
            kind = GpuKind.WHOLE
        elif self.gpu_milli:
            kind = GpuKind.SHARE
        elif self.mig is not None:
            kind = GpuKind.MIG
        else:
            kind = GpuKind.NONE
        object.__setattr__(self, "kind", kind)
        key = None if self.node_affinity is None else self.node_affinity.model_dump_json()
        object.__setattr__(self, "affinity_key", key)

    @property
    def total_gpu_milli(self) -> int:
        """GPU milli this pod holds once placed (a MIG instance counts by its compute slices elsewhere)."""
        return self.gpus * GPU_MILLI + self.gpu_milli

    def allows_model(self, gpu_model: str) -> bool:
        return not self.gpu_models or gpu_model in self.gpu_models
