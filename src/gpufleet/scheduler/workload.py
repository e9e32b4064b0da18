"""The scheduler's unit of work: a gang of pod sets with a queue, a priority and a topology request.

Controllers derive Workloads from TrainingJobs, InferenceServices (and in Kubernetes from plain Pods and
Jobs); the core admits, places, preempts and explains Workloads only. All types are frozen: a change of
state (admitted, checkpointed) is a new value made with `dataclasses.replace`, so a Workload can be a
key and a snapshot never changes under the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufleet.api.errors import ValidationError
from gpufleet.fleet.request import PodRequest

if TYPE_CHECKING:  # placement imports this module; the claim type is only named here
    from gpufleet.scheduler.placement.dra.allocate import PodClaim


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """All pods of a workload inside one domain of a level: `required` or else no placement, `preferred`
    when possible. Levels: `nvlink`, `host`, or a topology level the fleet declares (rack, block, ...)."""

    required: str | None = None
    preferred: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimCharge:
    """A shared ResourceClaim (`namespace/name`) and its GPUs, as one pod's request would ask them."""

    claim: str
    request: PodRequest


@dataclass(frozen=True, slots=True)
class PodSet:
    """`count` identical pods; at least `min_count` of them must start together (elastic when fewer)."""

    name: str
    count: int
    request: PodRequest
    min_count: int | None = None
    claims: tuple[PodClaim, ...] = ()
    """DRA: the ResourceClaims each pod makes from its ResourceClaimTemplates. Every pod gets its own
    claim of each (`{key}-{index}`, see `placement.dra.gang`); `request` already counts their GPUs
    (`dra.with_claims`), so quotas and flavors see them as any GPU."""
    charges: tuple[ClaimCharge, ...] = ()
    """DRA: the shared ResourceClaims (named by `resourceClaimName`) this pod set is charged for, each
    counted once for the pod set (not per pod) while any of its pods runs: a shared claim is allocated
    once, so it is charged once, to one workload (`dra.charge`)."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValidationError(f"count must be at least 1, got {self.count}", obj=f"podSet {self.name}")
        if self.min_count is not None and not 1 <= self.min_count <= self.count:
            raise ValidationError(
                f"minCount must be between 1 and count ({self.count}), got {self.min_count}",
                obj=f"podSet {self.name}",
                field="minCount",
            )

    @property
    def minimum(self) -> int:
        """Pods that must be placed together: `min_count`, or all of them when unset."""
        return self.count if self.min_count is None else self.min_count


@dataclass(frozen=True, slots=True)
class Workload:
    """A gang of pod sets, placed all-or-nothing. Times are seconds on the caller's clock."""

    name: str
    pod_sets: tuple[PodSet, ...]
    queue: str = "default"
    priority: int = 0
    topology: TopologyRequest = TopologyRequest()
    preemptible: bool = True
    user: str = ""
    submitted_at: float = 0.0
    admitted_at: float | None = None
    last_checkpoint_at: float | None = None
    workload_class: str = "batch"
    """`training`, `inference` or `batch`: selects the placement policy (SchedulerConfig.policy_for)."""

    def __post_init__(self) -> None:
        if not self.pod_sets:
            raise ValidationError("a workload needs at least one pod set", obj=f"workload {self.name}")
        if len(self.pod_sets) == 1:
            return  # one name cannot repeat (the common case, and every admission copies a Workload)
        names = [ps.name for ps in self.pod_sets]
        if len(set(names)) != len(names):
            raise ValidationError(
                f"pod set names repeat: {names}", obj=f"workload {self.name}", field="podSets"
            )

    def pod_name(self, pod_set: str, index: int) -> str:
        """The name of the `index`-th pod of a pod set: `{workload}/{podset}/{index}`."""
        return f"{self.name}/{pod_set}/{index}"

    @property
    def pod_count(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    @property
    def min_pod_count(self) -> int:
        return sum(ps.minimum for ps in self.pod_sets)

    @property
    def elastic(self) -> bool:
        return self.min_pod_count < self.pod_count


def placement_shape(workload: Workload, model: str | None, counts: tuple[int, ...]) -> tuple[object, ...]:
    """What placement sees of a workload on flavor `model` with `counts` pods per pod set: the key of a
    cycle's memo of shapes that do not fit."""
    # DRA claims (by key: one template, one spec) are part of it: two pod sets alike but for their
    # claims' selectors may fit in different places.
    sets = tuple(
        (ps.request, count, ps.minimum, tuple(c.key for c in ps.claims))
        for ps, count in zip(workload.pod_sets, counts, strict=True)
    )
    return (model, sets, workload.topology)
