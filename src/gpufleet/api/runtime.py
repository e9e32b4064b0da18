"""Kinds the embedded world stores for itself: Node, Pod, Workload, Event and ServiceLoad.

They are internal (no CustomResourceDefinition is generated for them) but keep Kubernetes' shapes, so
the Kubernetes world can map real Nodes and Pods onto the same controllers and core:

- `Node`: spec is what the cluster decides (shape, labels, cordon), status what the node reports
  (readiness, unhealthy GPUs, a spot interruption notice). The GPUPool controller creates nodes, the
  twin's virtual kubelet writes their status, the health controller cordons them.
- `Pod`: one pod of a Workload bound to a node and to the exact GPUs the scheduler chose. The
  scheduling controller creates it bound; the kubelet runs it and writes its status.
- `Workload`: the scheduler's unit, derived from a TrainingJob or an InferenceService replica. Its
  status records the admission (flavor and pod counts), why it is pending, and every eviction with
  its cause and the work it lost.
- `Event`: something that happened to an object, for people (`gpufleet describe`).
- `ServiceLoad`: what the twin (or a metrics pipeline) observes of an InferenceService's traffic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from gpufleet.api.base import ApiModel
from gpufleet.api.pool import Sharing
from gpufleet.api.requests import PodRequest
from gpufleet.api.resource import API_VERSION, Resource
from gpufleet.api.status import ObjectStatus
from gpufleet.api.training import TopologyRequest
from gpufleet.api.versions import DriverVersion

# The embedded world's topology labels on its Nodes (the names of gpufleet's own labels: api.labels).
BLOCK_LABEL = "block"
RACK_LABEL = "rack"
TOPOLOGY_LEVELS = (BLOCK_LABEL, RACK_LABEL)
"""The embedded world's topology levels, coarse to fine, as node label keys."""


# ------------------------------------------------------------------------------------------ Node
class NodeTaint(ApiModel):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodeSpec(ApiModel):
    """A GPU node's shape. `pool` names the GPUPool it belongs to (absent for a hand-made node)."""

    pool: str | None = None
    gpu_model: str = ""
    gpus: int = Field(default=0, ge=0, le=72)
    nvlink_domains: list[list[int]] | None = None
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    sharing: Sharing = Field(default_factory=Sharing)
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    price_per_gpu_hour: float = Field(default=0.0, ge=0)
    unschedulable: bool = False
    taints: list[NodeTaint] = Field(default_factory=list)
    driver_version: DriverVersion | None = Field(
        default=None, description="The node's NVIDIA driver; absent = unknown (runs any CUDA version)."
    )


NodePhase = Literal["Provisioning", "Ready", "NotReady", "Lost"]


class GpuHealth(ApiModel):
    """One unhealthy GPU and the XID error that made it so."""

    index: int = Field(ge=0)
    xid: int | None = None
    message: str = ""
    since: AwareDatetime | None = None


class NodeStatus(ObjectStatus):
    phase: NodePhase = "Provisioning"
    unhealthy_gpus: list[GpuHealth] = Field(default_factory=list)
    interruption_time: AwareDatetime | None = Field(
        default=None, description="Spot: when the node will be taken back (the notice's deadline)."
    )
    ready_time: AwareDatetime | None = None

    @property
    def unhealthy_indices(self) -> list[int]:
        return sorted(g.index for g in self.unhealthy_gpus)


class Node(Resource):
    """A machine with GPUs (cluster-wide)."""

    NAMESPACED = False

    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["Node"] = "Node"
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


# ------------------------------------------------------------------------------------------- Pod
class MigAssignment(ApiModel):
    gpu: int = Field(ge=0)
    profile: str
    start: int = Field(ge=0)


class OwnerRef(ApiModel):
    kind: str
    name: str


class PodSpec(ApiModel):
    """A pod bound to `node_name`, holding exactly `gpus` (at `gpu_milli` each) or one MIG instance."""

    workload: str
    owner: OwnerRef
    pod_set: str
    index: int = Field(ge=0)
    node_name: str
    gpus: list[int] = Field(default_factory=list)
    gpu_milli: int = Field(default=0, ge=0, le=1000)
    mig: MigAssignment | None = None
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    attempt: int = Field(default=1, ge=1, description="Which admission of the workload made this pod.")


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class PodStatus(ObjectStatus):
    phase: PodPhase = "Pending"
    ready: bool = False
    start_time: AwareDatetime | None = None
    finish_time: AwareDatetime | None = None
    reason: str | None = None
    message: str | None = None


class Pod(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["Pod"] = "Pod"
    spec: PodSpec
    status: PodStatus = Field(default_factory=PodStatus)

    @property
    def terminated(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")


# -------------------------------------------------------------------------------------- Workload
class WorkloadPodSet(ApiModel):
    name: str = "main"
    count: int = Field(ge=1)
    min_count: int | None = Field(default=None, ge=1)
    request: PodRequest


WorkloadClass = Literal["training", "inference", "batch"]
"""What a workload is for; placement may treat the classes differently (inference spreads)."""


class WorkloadSpec(ApiModel):
    """What the scheduler needs to decide on a gang; `active: false` takes it out of scheduling."""

    owner: OwnerRef
    workload_class: WorkloadClass = Field(
        default="batch", description="training (TrainingJob), inference (InferenceService replica) or batch."
    )
    queue: str = "default"
    priority: int = 0
    user: str = ""
    pod_sets: list[WorkloadPodSet] = Field(min_length=1)
    topology: TopologyRequest = Field(default_factory=TopologyRequest)
    preemptible: bool = True
    active: bool = True
    last_checkpoint_time: AwareDatetime | None = None
    backoff_seconds: float = Field(default=0.0, ge=0, description="Wait after an eviction before requeueing.")
    max_restarts: int | None = Field(
        default=None, ge=0, description="Evictions after which the workload fails; absent = unbounded."
    )


class Admission(ApiModel):
    """How the workload was admitted: the GPU model (flavor) and the number of pods per pod set."""

    gpu_model: str | None = None
    counts: list[int]
    usage: dict[str, int] = Field(default_factory=dict, description="Milli-GPU charged per flavor.")


class Eviction(ApiModel):
    """One interruption of an admitted workload."""

    time: AwareDatetime
    reason: str = Field(description="Preempted, GPUFailure, NodeLost, SpotInterruption, NodeUnhealthy...")
    message: str = ""
    preemptor: str | None = None
    lost_gpu_seconds: float = Field(default=0.0, ge=0)
    attempt: int = Field(default=1, ge=1)


class NodeDemand(ApiModel):
    """A pending workload that no existing node can hold, and the GPUPools whose fresh nodes could
    (the GPU model, sharing mode, MIG profile and the queue's flavors allow it), cheapest first."""

    pools: list[str] = Field(default_factory=list)


WorkloadPhase = Literal["Pending", "Admitted", "Inactive", "Failed"]


class WorkloadStatus(ObjectStatus):
    phase: WorkloadPhase = "Pending"
    admission: Admission | None = None
    attempts: int = Field(default=0, ge=0, description="How many times it was admitted.")
    admitted_time: AwareDatetime | None = None
    requeue_at: AwareDatetime | None = None
    evictions: list[Eviction] = Field(default_factory=list)
    node_demand: NodeDemand | None = Field(
        default=None, description="Set while it waits for nodes rather than for quota or a preemption."
    )


class Workload(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["Workload"] = "Workload"
    spec: WorkloadSpec
    status: WorkloadStatus = Field(default_factory=WorkloadStatus)


# ----------------------------------------------------------------------------------------- Event
class EventSpec(ApiModel):
    involved_kind: str
    involved_name: str
    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    message: str = ""
    time: AwareDatetime
    source: str = ""


class Event(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["Event"] = "Event"
    spec: EventSpec
    status: ObjectStatus = Field(default_factory=ObjectStatus)


# ----------------------------------------------------------------------------------- ServiceLoad
class ServiceLoadSpec(ApiModel):
    """Observed traffic of one InferenceService (same name and namespace)."""

    requests_per_second: float = Field(ge=0)
    p99_latency_ms: float = Field(ge=0)
    ready_replicas: int = Field(ge=0)
    time: AwareDatetime


class Recommendation(ApiModel):
    time: AwareDatetime
    replicas: int = Field(ge=0)


class ServiceLoadStatus(ObjectStatus):
    """What the autoscaler keeps of the observations, so that a restart loses none of it."""

    season: dict[str, float] = Field(
        default_factory=dict, description="Requests/s last seen in each bucket of the season (a day)."
    )
    recent: list[Recommendation] = Field(
        default_factory=list, description="Replica counts recommended inside the stabilization window."
    )
    last_sample_time: AwareDatetime | None = Field(
        default=None,
        description="spec.time of the last observation the autoscaler used: it uses each one once.",
    )


class ServiceLoad(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["ServiceLoad"] = "ServiceLoad"
    spec: ServiceLoadSpec
    status: ServiceLoadStatus = Field(default_factory=ServiceLoadStatus)
