"""Queue: a node of the quota tree, with quotas per flavor, a fair-share weight and preemption policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Literal, TypeVar

from pydantic import Field, ValidationInfo, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.cluster import ClusterAffinity
from gpufleet.api.fields import checked_on_write
from gpufleet.api.gpu_models import canonical_flavor
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.status import ObjectStatus

GpuCount = int | float
"""GPUs in a quota: whole numbers, or fractions where shared GPUs are counted."""

CAPACITY_TYPES = ("on-demand", "spot")

Q = TypeVar("Q")


def check_flavor_names(quotas: dict[str, FlavorQuota]) -> None:
    """A flavor is a GPU model or MIG profile (`H100-80GB`), or a model and a capacity type
    (`H100-80GB/spot`, `H100-80GB/on-demand`); anything after a `/` must be a capacity type."""
    for name in quotas:
        model, sep, capacity = name.rpartition("/")
        if sep and (not model or capacity not in CAPACITY_TYPES):
            raise field_error(
                "quotas",
                f"flavor {name!r}: give a GPU model, or MODEL/CAPACITY with a capacity type of "
                f"{', '.join(CAPACITY_TYPES)}",
            )


def canonical_quota_keys(
    quotas: dict[str, Q], order: list[str] | None
) -> tuple[dict[str, Q], list[str] | None]:
    """The quotas and flavor order with each model alias as its canonical name (`H100/spot` as
    `H100-80GB/spot`): usage is counted under the nodes' names, which are canonical."""
    renamed: dict[str, Q] = {}
    for flavor, quota in quotas.items():
        name = canonical_flavor(flavor)
        if name in renamed:
            raise field_error("quotas", f"flavors {flavor!r} and {name!r} name the same GPU model: give one")
        renamed[name] = quota
    return renamed, None if order is None else [canonical_flavor(flavor) for flavor in order]


def check_flavor_order(quotas: Mapping[str, object], order: Sequence[str] | None) -> None:
    """`flavorOrder`, when given, lists exactly the quota's flavors, each once."""
    if order is None:
        return
    seen: set[str] = set()
    for flavor in order:
        if flavor not in quotas:
            raise field_error("flavorOrder", f"flavor {flavor!r} has no quota in quotas")
        if flavor in seen:
            raise field_error("flavorOrder", f"flavor {flavor!r} is listed more than once")
        seen.add(flavor)
    for flavor in quotas:
        if flavor not in seen:
            raise field_error(
                "flavorOrder", f"flavor {flavor!r} of quotas is missing: list every flavor once"
            )


def ordered_quotas(quotas: Mapping[str, Q], order: Sequence[str] | None) -> list[tuple[str, Q]]:
    """A queue's quotas in the order its flavors are tried: `flavorOrder` when given, else the order of
    the `quotas` keys as read (a file's order; sorted when a Kubernetes API server returns the object,
    which keeps a custom resource's map as a Go map and writes its keys sorted)."""
    if order is None:
        return list(quotas.items())
    return [(flavor, quotas[flavor]) for flavor in order]


FLAVOR_ORDER_DESCRIPTION = (
    "The order the queue's flavors are tried in, first that fits (Kueue's flavor order), e.g. "
    "[H100-80GB/on-demand, H100-80GB/spot]: every flavor of quotas, each once. Without it the order of "
    "the quotas keys is used, which a Kubernetes API server does not keep (it returns them sorted)."
)


class FlavorQuota(ApiModel):
    """Quota of one flavor (a GPU model, a MIG profile, optionally with a capacity type), in GPUs.

    No borrowingLimit: may borrow without limit from the cohort; no lendingLimit: lends all its
    unused nominal quota.
    """

    nominal: GpuCount = Field(ge=0, description="GPUs the queue is guaranteed.")
    borrowing_limit: GpuCount | None = Field(
        default=None, ge=0, description="GPUs beyond nominal it may borrow from its cohort; absent: no limit."
    )
    lending_limit: GpuCount | None = Field(
        default=None, ge=0, description="GPUs of its unused nominal quota others may borrow; absent: all."
    )

    @model_validator(mode="after")
    def _lend_at_most_nominal(self) -> FlavorQuota:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise field_error("lendingLimit", f"must be <= nominal ({self.lending_limit} > {self.nominal})")
        return self


class QueuePreemption(ApiModel):
    """Who this queue's workloads may evict: in the same queue, to reclaim, and while borrowing."""

    within_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        default="LowerPriority",
        description="Which workloads of the same queue a pending one may evict: Never, LowerPriority, or "
        "LowerOrNewerEqualPriority (also newer ones of its own priority).",
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        default="Any",
        description="To get back its nominal quota, which workloads of queues borrowing it may be evicted: "
        "Never, LowerPriority or Any.",
    )
    borrow_within_cohort: Literal["Never", "LowerPriority"] = Field(
        default="Never",
        description="While borrowing, whether it may evict other queues' lower-priority workloads: Never or "
        "LowerPriority.",
    )
    max_priority_threshold: int | None = Field(
        default=None,
        description="With borrowWithinCohort LowerPriority: other queues' workloads above this priority "
        "are never preempted while borrowing (Kueue's borrowWithinCohort.maxPriorityThreshold).",
    )

    @model_validator(mode="after")
    def _threshold_needs_borrowing_policy(self) -> QueuePreemption:
        if self.max_priority_threshold is not None and self.borrow_within_cohort == "Never":
            raise field_error("maxPriorityThreshold", "applies only with borrowWithinCohort: LowerPriority")
        return self


class LeastAttainedService(ApiModel):
    """Tiresias' discretised least-attained-service queue: levels by GPU-hours run, FIFO inside one."""

    thresholds_gpu_hours: list[float] = Field(
        default_factory=lambda: [1.0, 16.0],
        min_length=1,
        description="GPU-hours run at which a workload moves down a level; positive and increasing.",
    )
    promote_factor: float | None = Field(
        default=4.0,
        gt=0,
        description="A workload that has waited this many times as long as it ran goes back to the first "
        "level (starvation rule); null: never.",
    )

    @model_validator(mode="after")
    def _increasing(self) -> LeastAttainedService:
        t = self.thresholds_gpu_hours
        if any(v <= 0 for v in t) or any(b <= a for a, b in pairwise(t)):
            raise field_error("thresholdsGpuHours", f"must be positive and increasing, got {t}")
        return self


class QueueSpec(ApiModel):
    parent: str | None = Field(
        default=None, description="The parent queue; absent: a root of the quota tree."
    )
    quotas: dict[str, FlavorQuota] = Field(
        default_factory=dict,
        description="Quota per flavor: a GPU model or MIG profile (H100-80GB, 1g.10gb), or a model and a "
        "capacity type (H100-80GB/spot). No quota for a flavor: the queue admits nothing that needs it.",
    )
    flavor_order: list[str] | None = Field(default=None, description=FLAVOR_ORDER_DESCRIPTION)
    fair_share_weight: float = Field(
        default=1.0,
        ge=0,
        description="Its share of what siblings borrow, relative to theirs (2: twice a weight-1 sibling's).",
    )
    preemption: QueuePreemption = Field(
        default_factory=QueuePreemption, description="Whom its workloads may evict to start."
    )
    min_runtime_seconds: float = Field(
        default=0.0, ge=0, description="Its workloads are not preempted before they ran this long."
    )
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO", "LeastAttainedService"] = Field(
        default="BestEffortFIFO",
        description="StrictFIFO: only the head is tried; BestEffortFIFO: later workloads may start when the "
        "head cannot; LeastAttainedService: as BestEffortFIFO, ordered first by levels of GPU-hours already "
        "run (Tiresias), a lower level preempting a higher one.",
    )
    least_attained_service: LeastAttainedService = Field(
        default_factory=lambda: LeastAttainedService(),
        description="Levels and starvation rule of the LeastAttainedService strategy.",
    )
    user_gpu_limit: GpuCount | None = Field(
        default=None, ge=0, description="GPUs one user's workloads may hold in this queue (leaf queues)."
    )
    clusters: ClusterAffinity | None = Field(
        default=None,
        description="Federation: the worker clusters its workloads may run in and prefer; absent: any.",
    )

    @model_validator(mode="after")
    def _flavor_names(self, info: ValidationInfo) -> QueueSpec:
        if checked_on_write(info):
            self.quotas, self.flavor_order = canonical_quota_keys(self.quotas, self.flavor_order)
        check_flavor_names(self.quotas)
        check_flavor_order(self.quotas, self.flavor_order)
        return self

    def ordered_quotas(self) -> list[tuple[str, FlavorQuota]]:
        """The quotas in the order the flavors are tried (see `ordered_quotas`)."""
        return ordered_quotas(self.quotas, self.flavor_order)


class QueueStatus(ObjectStatus):
    pending_workloads: int = Field(
        default=0, ge=0, description="Workloads waiting in it and in its child queues."
    )
    admitted_workloads: int = Field(
        default=0, ge=0, description="Workloads admitted in it and in its child queues."
    )
    usage: dict[str, float] = Field(default_factory=dict, description="GPUs in use per flavor.")


class Queue(Resource):
    """A queue of the quota tree (cluster-wide)."""

    NAMESPACED = False

    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Queue"] = kind_field("Queue")
    spec: QueueSpec = Field(
        default_factory=QueueSpec, description="Its place in the tree, quotas, fair-share weight, preemption."
    )
    status: QueueStatus = Field(
        default_factory=QueueStatus, description="Whether it is in the quota tree, its work and its usage."
    )

    @model_validator(mode="after")
    def _not_own_parent(self) -> Queue:
        if self.spec.parent == self.metadata.name:
            raise field_error("spec.parent", "a queue cannot be its own parent")
        return self
