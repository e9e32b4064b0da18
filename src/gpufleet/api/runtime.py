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
from gpufleet.api.dra_claims import PodResourceClaimStatus
from gpufleet.api.gpu_models import CanonicalGpuModel
from gpufleet.api.pool import Sharing
from gpufleet.api.quantity import MAX_NODE_CPU_MILLI, MAX_NODE_MEMORY_MIB
from gpufleet.api.requests import PodRequest
from gpufleet.api.resource import Resource, api_version_field, kind_field
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
    key: str = Field(description="The taint's key.")
    value: str = Field(default="", description="The taint's value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule",
        description="NoSchedule: no new pod that does not tolerate it; PreferNoSchedule: avoided; "
        "NoExecute: its pods are evicted too.",
    )


class NodeSpec(ApiModel):
    """A GPU node's shape. `pool` names the GPUPool it belongs to (absent for a hand-made node)."""

    pool: str | None = Field(
        default=None, description="The GPUPool it belongs to; absent: a node of its own."
    )
    gpu_model: CanonicalGpuModel = Field(default="", description="The model of its GPUs.")
    gpus: int = Field(default=0, ge=0, le=72, description="How many GPUs it has.")
    nvlink_domains: list[list[int]] | None = Field(
        default=None, description="GPU indices of each NVLink domain; absent: one domain of all GPUs."
    )
    cpu_milli: int = Field(default=0, ge=0, le=MAX_NODE_CPU_MILLI, description="Its CPU, in milli-cores.")
    memory_mib: int = Field(default=0, ge=0, le=MAX_NODE_MEMORY_MIB, description="Its memory, in MiB.")
    sharing: Sharing = Field(
        default_factory=Sharing, description="How its GPUs are shared (its pool's sharing)."
    )
    capacity_type: Literal["on-demand", "spot"] = Field(
        default="on-demand", description="on-demand, or spot: it may be taken back at short notice."
    )
    price_per_gpu_hour: float = Field(default=0.0, ge=0, description="What one of its GPU-hours costs.")
    unschedulable: bool = Field(
        default=False, description="Cordoned: no new pod is placed on it (its pods keep running)."
    )
    taints: list[NodeTaint] = Field(
        default_factory=list, description="Only pods that tolerate these run on it."
    )
    driver_version: DriverVersion | None = Field(
        default=None, description="The node's NVIDIA driver; absent = unknown (runs any CUDA version)."
    )
    dra: bool = Field(
        default=False,
        description="Its GPUs are published in ResourceSlices and handed out through ResourceClaims (DRA) "
        "only, not as nvidia.com/gpu extended resources.",
    )


NodePhase = Literal["Provisioning", "Ready", "NotReady", "Lost"]


class GpuHealth(ApiModel):
    """One unhealthy GPU and the XID error that made it so."""

    index: int = Field(ge=0, description="The GPU's index on the node.")
    xid: int | None = Field(default=None, description="The XID error that made it unhealthy.")
    message: str = Field(default="", description="What happened, in words.")
    since: AwareDatetime | None = Field(default=None, description="When it became unhealthy.")


class NodeStatus(ObjectStatus):
    phase: NodePhase = Field(
        default="Provisioning", description="Provisioning, Ready, NotReady (it may come back) or Lost."
    )
    unhealthy_gpus: list[GpuHealth] = Field(
        default_factory=list, description="Its GPUs that failed; no pod is placed on them."
    )
    interruption_time: AwareDatetime | None = Field(
        default=None, description="Spot: when the node will be taken back (the notice's deadline)."
    )
    ready_time: AwareDatetime | None = Field(default=None, description="When it became Ready.")

    @property
    def unhealthy_indices(self) -> list[int]:
        return sorted(g.index for g in self.unhealthy_gpus)


class Node(Resource):
    """A machine with GPUs (cluster-wide)."""

    NAMESPACED = False

    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Node"] = kind_field("Node")
    spec: NodeSpec = Field(
        default_factory=NodeSpec,
        description="Its shape (pool, GPUs, NVLink, CPU, memory), cordon and taints: what the cluster "
        "decides.",
    )
    status: NodeStatus = Field(
        default_factory=NodeStatus,
        description="Its readiness, unhealthy GPUs and spot notice: what the node reports.",
    )


# ------------------------------------------------------------------------------------------- Pod
class MigAssignment(ApiModel):
    gpu: int = Field(ge=0, description="The index of the GPU the instance is on.")
    profile: str = Field(description="The instance's MIG profile, e.g. 3g.40gb.")
    start: int = Field(ge=0, description="The memory slice of the GPU the instance begins at.")


class OwnerRef(ApiModel):
    kind: str = Field(description="The owner's kind: TrainingJob, InferenceService or Workload.")
    name: str = Field(description="The owner's name, in the same namespace.")


class PodSpec(ApiModel):
    """A pod bound to `node_name`, holding exactly `gpus` (at `gpu_milli` each) or one MIG instance."""

    workload: str = Field(description="The Workload the pod is one of.")
    owner: OwnerRef = Field(
        description="The object the workload serves (a TrainingJob, an InferenceService)."
    )
    pod_set: str = Field(description="The workload's pod set the pod belongs to.")
    index: int = Field(ge=0, description="The pod's index in its pod set.")
    node_name: str = Field(description="The node it is bound to.")
    gpus: list[int] = Field(default_factory=list, description="Indices of the GPUs it holds on the node.")
    gpu_milli: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="With a share: the share of its GPU it holds, in milli-GPU; 0: whole GPUs.",
    )
    mig: MigAssignment | None = Field(default=None, description="The MIG instance it holds, if any.")
    cpu_milli: int = Field(default=0, ge=0, description="Its CPU, in milli-cores.")
    memory_mib: int = Field(default=0, ge=0, description="Its memory, in MiB.")
    attempt: int = Field(default=1, ge=1, description="Which admission of the workload made this pod.")
    resource_claims: list[PodResourceClaimStatus] = Field(
        default_factory=list,
        description="DRA: the ResourceClaim each `resourceClaims` entry of its template uses (allocated and "
        "reserved for the pod before it was bound).",
    )


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class PodStatus(ObjectStatus):
    phase: PodPhase = Field(default="Pending", description="Pending, Running, Succeeded or Failed.")
    ready: bool = Field(default=False, description="Whether it runs and is ready.")
    start_time: AwareDatetime | None = Field(default=None, description="When it started.")
    finish_time: AwareDatetime | None = Field(default=None, description="When it ended.")
    reason: str | None = Field(
        default=None, description="Why it ended, as one word (Evicted, GPUFailure...)."
    )
    message: str | None = Field(default=None, description="Why it ended, in words.")


class Pod(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Pod"] = kind_field("Pod")
    spec: PodSpec = Field(description="Its workload, node and the exact GPUs (or MIG instance) it holds.")
    status: PodStatus = Field(default_factory=PodStatus, description="Whether it runs, and how it ended.")

    @property
    def terminated(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")


# -------------------------------------------------------------------------------------- Workload
class WorkloadPodSet(ApiModel):
    name: str = Field(default="main", description="The pod set's name.")
    count: int = Field(ge=1, description="Pods in the set.")
    min_count: int | None = Field(
        default=None, ge=1, description="The fewest pods it runs with (elastic); absent: count."
    )
    request: PodRequest = Field(description="What each pod asks for.")


WorkloadClass = Literal["training", "inference", "batch"]
"""What a workload is for; placement may treat the classes differently (inference spreads)."""


class WorkloadSpec(ApiModel):
    """What the scheduler needs to decide on a gang; `active: false` takes it out of scheduling."""

    owner: OwnerRef = Field(description="The object the workload was derived from.")
    workload_class: WorkloadClass = Field(
        default="batch", description="training (TrainingJob), inference (InferenceService replica) or batch."
    )
    queue: str = Field(default="default", description="The leaf queue it is submitted to.")
    priority: int = Field(
        default=0, description="Its priority (its priority class's value): higher goes first."
    )
    user: str = Field(default="", description="Who submitted it: fair share between users of a queue.")
    pod_sets: list[WorkloadPodSet] = Field(min_length=1, description="Its gangs of identical pods.")
    topology: TopologyRequest = Field(
        default_factory=TopologyRequest, description="Domains its pods must or should share."
    )
    preemptible: bool = Field(default=True, description="Whether the scheduler may evict it.")
    active: bool = Field(
        default=True, description="false: taken out of scheduling (and evicted if admitted)."
    )
    last_checkpoint_time: AwareDatetime | None = Field(
        default=None, description="When its work was last saved: what an eviction loses is counted from here."
    )
    backoff_seconds: float = Field(default=0.0, ge=0, description="Wait after an eviction before requeueing.")
    max_restarts: int | None = Field(
        default=None, ge=0, description="Evictions after which the workload fails; absent = unbounded."
    )


class Admission(ApiModel):
    """How the workload was admitted: the GPU model (flavor) and the number of pods per pod set."""

    gpu_model: str | None = Field(default=None, description="The flavor it was admitted on.")
    counts: list[int] = Field(description="Pods admitted per pod set.")
    usage: dict[str, int] = Field(default_factory=dict, description="Milli-GPU charged per flavor.")


class Eviction(ApiModel):
    """One interruption of an admitted workload."""

    time: AwareDatetime = Field(description="When it was evicted.")
    reason: str = Field(description="Preempted, GPUFailure, NodeLost, SpotInterruption, NodeUnhealthy...")
    message: str = Field(default="", description="What happened, in words.")
    preemptor: str | None = Field(default=None, description="Preempted: the workload it made room for.")
    lost_gpu_seconds: float = Field(
        default=0.0, ge=0, description="GPU-seconds of work lost (since its last checkpoint)."
    )
    attempt: int = Field(default=1, ge=1, description="Which admission of the workload was interrupted.")


class NodeDemand(ApiModel):
    """A pending workload that no existing node can hold, and the GPUPools whose fresh nodes could
    (the GPU model, sharing mode, MIG profile and the queue's flavors allow it), cheapest first."""

    pools: list[str] = Field(default_factory=list, description="GPUPools that could hold it, cheapest first.")


WorkloadPhase = Literal["Pending", "Admitted", "Inactive", "Failed"]


class WorkloadStatus(ObjectStatus):
    phase: WorkloadPhase = Field(default="Pending", description="Pending, Admitted, Inactive or Failed.")
    admission: Admission | None = Field(default=None, description="How it was admitted, while it is.")
    attempts: int = Field(default=0, ge=0, description="How many times it was admitted.")
    admitted_time: AwareDatetime | None = Field(default=None, description="When it was last admitted.")
    requeue_at: AwareDatetime | None = Field(
        default=None, description="After an eviction: when its backoff ends and it queues again."
    )
    evictions: list[Eviction] = Field(default_factory=list, description="Every interruption, oldest first.")
    node_demand: NodeDemand | None = Field(
        default=None, description="Set while it waits for nodes rather than for quota or a preemption."
    )


class Workload(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Workload"] = kind_field("Workload")
    spec: WorkloadSpec = Field(
        description="What the scheduler decides on: queue, priority, pod sets, topology, preemptibility."
    )
    status: WorkloadStatus = Field(
        default_factory=WorkloadStatus,
        description="Whether and how it is admitted, why it waits, and its evictions.",
    )


# ----------------------------------------------------------------------------------------- Event
class EventSpec(ApiModel):
    involved_kind: str = Field(description="The kind of the object it is about.")
    involved_name: str = Field(description="The name of the object it is about (in the event's namespace).")
    type: Literal["Normal", "Warning"] = Field(
        default="Normal", description="Normal, or Warning: worth a look."
    )
    reason: str = Field(description="What happened, as one CamelCase word (Admitted, Preempted...).")
    message: str = Field(default="", description="What happened, in words.")
    time: AwareDatetime = Field(description="When it happened.")
    source: str = Field(default="", description="The controller that reported it.")


class Event(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Event"] = kind_field("Event")
    spec: EventSpec = Field(description="What happened, to which object, when.")
    status: ObjectStatus = Field(
        default_factory=ObjectStatus, description="Unused: an event does not change."
    )


# ----------------------------------------------------------------------------------- ServiceLoad
class ServiceLoadSpec(ApiModel):
    """Observed traffic of one InferenceService (same name and namespace)."""

    requests_per_second: float = Field(ge=0, description="Requests per second the service received.")
    p99_latency_ms: float = Field(ge=0, description="Its p99 latency, in milliseconds.")
    ready_replicas: int = Field(ge=0, description="Replicas that served them.")
    time: AwareDatetime = Field(description="When it was observed.")


class Recommendation(ApiModel):
    time: AwareDatetime = Field(description="When it was recommended.")
    replicas: int = Field(ge=0, description="The replica count recommended.")


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
    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["ServiceLoad"] = kind_field("ServiceLoad")
    spec: ServiceLoadSpec = Field(description="The service's latest observed traffic.")
    status: ServiceLoadStatus = Field(
        default_factory=ServiceLoadStatus, description="What the autoscaler keeps of the observations."
    )
