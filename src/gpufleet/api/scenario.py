"""Scenario: a declarative what-if for the scheduler (ARCHITECTURE.md, "Scenario files").

A fleet, a quota tree, workloads already running, workloads that arrive and what must happen. This
module checks the shape of each field; references between fields (a queue's parent, a running
workload's nodes, an expectation naming a workload) are checked by the loader in `gpufleet.sim`,
which knows the whole file, before anything runs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.fields import PriorityClassName, Quantity
from gpufleet.api.gpu_models import GpuModelName
from gpufleet.api.pool import Sharing
from gpufleet.api.queue import (
    FLAVOR_ORDER_DESCRIPTION,
    FlavorQuota,
    LeastAttainedService,
    QueuePreemption,
    canonical_quota_keys,
    check_flavor_names,
    check_flavor_order,
    ordered_quotas,
)
from gpufleet.api.requests import PodRequest
from gpufleet.api.resource import API_VERSION, Resource
from gpufleet.api.runtime import WorkloadClass
from gpufleet.api.training import TopologyRequest
from gpufleet.api.versions import DriverVersion


class ScenarioFairSharing(ApiModel):
    half_life_seconds: float = Field(default=3600.0, ge=0)
    history_weight: float = Field(default=1.0, ge=0)


class ScenarioScheduler(ApiModel):
    """Overrides of the scheduler configuration for this scenario."""

    placement: str | None = Field(
        default=None,
        description="One policy for every workload class placementByClass does not name. Not given: each "
        "class has its built-in default (training and batch fgd+, inference spread).",
    )
    placement_by_class: dict[WorkloadClass, str] = Field(
        default_factory=dict,
        description="Per workload class, its policy; wins over placement and over the built-in defaults.",
    )
    priority_classes: dict[str, int] | None = None
    fair_sharing: ScenarioFairSharing | None = None
    seed: int = 0


class ScenarioTaint(ApiModel):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class ScenarioNode(ApiModel):
    """One node (`name`) or `count` nodes named `{namePrefix}{i}` (i from 1)."""

    name: str | None = None
    name_prefix: str | None = None
    count: int = Field(default=1, ge=1)
    gpus: int = Field(default=0, ge=0, le=72)
    gpu_model: GpuModelName = ""
    cpu: Quantity = 1000
    memory: Quantity = "64Ti"
    labels: dict[str, str] = Field(default_factory=dict)
    nvlink_domains: list[list[int]] | None = None
    taints: list[ScenarioTaint] = Field(default_factory=list)
    unschedulable: bool = False
    unhealthy_gpus: list[int] = Field(default_factory=list)
    sharing: Sharing = Field(default_factory=Sharing)
    capacity_type: Literal["on-demand", "spot"] | None = Field(
        default=None, description="Sets the gpufleet.io/capacity-type label, as a pool does for its nodes."
    )
    driver_version: DriverVersion | None = Field(
        default=None, description="The nodes' NVIDIA driver (e.g. 550.54.15); absent = unknown."
    )

    @model_validator(mode="after")
    def _named_once(self) -> ScenarioNode:
        if (self.name is None) == (self.name_prefix is None):
            raise field_error("name", "give either name or namePrefix (with count)")
        if self.name is not None and self.count != 1:
            raise field_error("count", "count goes with namePrefix, not name")
        if self.gpus and not self.gpu_model:
            raise field_error("gpuModel", "a node with GPUs needs a gpuModel")
        return self

    def node_names(self) -> list[str]:
        if self.name is not None:
            return [self.name]
        return [f"{self.name_prefix}{index}" for index in range(1, self.count + 1)]


class ScenarioQueue(ApiModel):
    """A queue of the tree: the Queue kind's spec fields, plus scheduling facts a scenario may state."""

    name: str = Field(min_length=1)
    parent: str | None = None
    quotas: dict[str, FlavorQuota] = Field(default_factory=dict)
    flavor_order: list[str] | None = Field(default=None, description=FLAVOR_ORDER_DESCRIPTION)
    fair_share_weight: float = Field(default=1.0, ge=0)
    preemption: QueuePreemption = Field(default_factory=QueuePreemption)
    min_runtime_seconds: float = Field(default=0.0, ge=0)
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO", "LeastAttainedService"] = "BestEffortFIFO"
    least_attained_service: LeastAttainedService = Field(default_factory=lambda: LeastAttainedService())
    user_gpu_limit: float | None = Field(default=None, ge=0, description="GPUs one user may hold here.")
    historical_usage: dict[str, float] = Field(
        default_factory=dict, description="Decayed average GPUs used lately, per flavor (leaf queues)."
    )
    user_historical_usage: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="Per user, decayed average GPUs used lately, per flavor."
    )

    @model_validator(mode="after")
    def _flavor_names(self) -> ScenarioQueue:
        self.quotas, self.flavor_order = canonical_quota_keys(self.quotas, self.flavor_order)
        check_flavor_names(self.quotas)
        check_flavor_order(self.quotas, self.flavor_order)
        return self

    def ordered_quotas(self) -> list[tuple[str, FlavorQuota]]:
        """The quotas in the order the flavors are tried (`api.queue.ordered_quotas`)."""
        return ordered_quotas(self.quotas, self.flavor_order)


class ScenarioPodSet(PodRequest):
    """`count` pods with the same request; `minCount` below `count` makes the workload elastic."""

    name: str = "main"
    count: int = Field(default=1, ge=1)
    min_count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _min_at_most_count(self) -> ScenarioPodSet:
        if self.min_count is not None and self.min_count > self.count:
            raise field_error("minCount", f"must be <= count ({self.min_count} > {self.count})")
        return self


class ScenarioWorkload(ApiModel):
    name: str = Field(min_length=1)
    queue: str = "default"
    priority: int | None = None
    priority_class: PriorityClassName | None = None
    user: str = ""
    workload_class: WorkloadClass = "batch"
    preemptible: bool = True
    topology: TopologyRequest = Field(default_factory=TopologyRequest)
    pod_sets: list[ScenarioPodSet] = Field(min_length=1)
    submitted_seconds_ago: float | None = Field(
        default=None, ge=0, description="Absent: running ones just before admission, arrivals in list order."
    )

    @model_validator(mode="after")
    def _one_priority(self) -> ScenarioWorkload:
        if self.priority is not None and self.priority_class is not None:
            raise field_error("priorityClass", "give priority or priorityClass, not both")
        return self


class RunningWorkload(ScenarioWorkload):
    admitted_seconds_ago: float = Field(default=0.0, ge=0)
    last_checkpoint_seconds_ago: float | None = Field(default=None, ge=0)
    nodes: list[str] | None = Field(default=None, description="One node per pod, in pod order.")


PendingType = Literal["QuotaExceeded", "NoFit", "WaitingForPreemption", "Queued"]


class ScenarioExpect(ApiModel):
    admitted: list[str] | None = None
    preempted: list[str] | None = None
    pending: dict[str, PendingType] | None = None
    same_domain: dict[str, str] | None = None
    nodes: dict[str, list[str]] | None = None
    pod_counts: dict[str, int] | None = Field(
        default=None, description="Pods each workload holds at the end."
    )
    preempted_by: dict[str, str] | None = Field(default=None, description="Victim -> the preemptor.")


class ScenarioSpec(ApiModel):
    description: str = ""
    scheduler: ScenarioScheduler = Field(default_factory=ScenarioScheduler)
    topology_levels: list[str] = Field(default_factory=list)
    termination_grace_cycles: int = Field(
        default=0,
        ge=0,
        le=20,
        description="Cycles an evicted pod (or one a shrink gives up) goes on holding its node's resources, "
        "as pods terminating in Kubernetes do; 0: gone at once.",
    )
    nodes: list[ScenarioNode] = Field(default_factory=list)
    queues: list[ScenarioQueue] = Field(default_factory=list)
    running: list[RunningWorkload] = Field(default_factory=list)
    submit: list[ScenarioWorkload] = Field(default_factory=list)
    expect: ScenarioExpect = Field(default_factory=ScenarioExpect)


class Scenario(Resource):
    """A scheduler what-if with its expected outcome (cluster-wide; not stored, no CRD)."""

    NAMESPACED = False

    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["Scenario"] = "Scenario"
    spec: ScenarioSpec
