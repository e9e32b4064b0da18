"""What the kubernetes world is configured with: scheduler name, topology labels, label names."""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEDULER_NAME = "gpufleet"

# Labels and annotations gpufleet reads on Pods (and on the pod templates of Jobs).
QUEUE_LABEL = "gpufleet.io/queue"
GANG_LABEL = "gpufleet.io/gang"
GANG_SIZE_LABEL = "gpufleet.io/gang-size"
GANG_MIN_LABEL = "gpufleet.io/gang-min-size"
POD_SET_LABEL = "gpufleet.io/pod-set"
USER_LABEL = "gpufleet.io/user"
PRIORITY_CLASS_LABEL = "gpufleet.io/priority-class"
GPU_MILLI_ANNOTATION = "gpufleet.io/gpu-milli"
TOPOLOGY_REQUIRED_ANNOTATION = "gpufleet.io/topology-required"
TOPOLOGY_PREFERRED_ANNOTATION = "gpufleet.io/topology-preferred"
PREEMPTIBLE_ANNOTATION = "gpufleet.io/preemptible"
CHECKPOINT_ANNOTATION = "gpufleet.io/last-checkpoint-time"
CUDA_VERSION_ANNOTATION = "gpufleet.io/cuda-version"
"""The CUDA toolkit the pod's image was built with (`12.4`): only nodes whose driver runs it qualify."""
GPUS_ANNOTATION = "gpufleet.io/gpus"
"""Written at bind time: the GPU indices (or `mig:<gpu>:<profile>:<start>`) the scheduler chose."""

# Labels and annotations gpufleet reads on Nodes.
GPU_MODEL_LABEL = "gpufleet.io/gpu-model"
NVLINK_DOMAINS_ANNOTATION = "gpufleet.io/nvlink-domains"
MIG_LAYOUT_ANNOTATION = "gpufleet.io/mig-layout"
UNHEALTHY_GPUS_ANNOTATION = "gpufleet.io/unhealthy-gpus"
INTERRUPTION_ANNOTATION = "gpufleet.io/interruption-time"
"""Set on a spot Node when its interruption notice arrives (RFC 3339 time the node goes away): the
operator cordons it and evicts its pods. Whatever watches the cloud's notice (a metadata-service
poller, a termination handler) writes it."""
GPU_HEALTH_CONDITION = "GPUUnhealthy"
"""A Node condition (True: some GPU is unhealthy) the node agent or a problem detector may set."""

# Written by the operator on Nodes (with api.labels' POOL_LABEL, CAPACITY_TYPE_LABEL, CORDONED_BY_ANNOTATION).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
"""Names the entry of the NVIDIA device plugin's config map the node uses (time-slicing, MPS)."""
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
"""Names the mig-parted configuration the GPU operator's MIG manager applies to the node."""
SHARING_CONFIG_LABEL = "gpufleet.io/sharing-config"
"""Names the ConfigMap (in the operator's namespace) holding the configs the two labels above pick."""
POOL_APPLIED_ANNOTATION = "gpufleet.io/pool-applied"
"""What the operator put on a Node for its pool (labels, taints), so it takes off only that."""


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    """A topology level: its name in workloads' topology requests and the node label that holds it."""

    name: str
    label: str


DEFAULT_LEVELS = (
    TopologyLevel("zone", "topology.kubernetes.io/zone"),
    TopologyLevel("block", "gpufleet.io/block"),
    TopologyLevel("rack", "gpufleet.io/rack"),
    TopologyLevel("clique", "nvidia.com/gpu.clique"),
)
"""Coarse to fine. `clique` is NVIDIA's multi-node NVLink domain (GB200 NVL72 racks)."""


@dataclass(frozen=True, slots=True)
class KubeConfig:
    scheduler_name: str = SCHEDULER_NAME
    topology_levels: tuple[TopologyLevel, ...] = DEFAULT_LEVELS
    nvlink_level: str | None = "clique"
    """The level whose domains are rack-scale NVLink fabrics, if any."""
    default_queue: str = "default"
    shared_gpu_milli: int = 100
    """The share of a GPU a pod asking for `nvidia.com/gpu.shared` holds when it does not say."""
    eviction_grace_seconds: int | None = 30
    namespace: str = "gpufleet-system"
    lease_name: str = "gpufleet-scheduler"
    priority_classes: dict[str, int] = field(default_factory=dict)

    def level_names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.topology_levels)


DEFAULT_RPS_QUERY = 'sum(rate(http_requests_total{namespace="$namespace",service="$service"}[2m]))'
"""The operator's PromQL for an InferenceService's requests per second (`--rps-query`)."""
DEFAULT_LATENCY_QUERY = (
    "1000 * histogram_quantile(0.99, sum by (le) "
    '(rate(http_request_duration_seconds_bucket{namespace="$namespace",service="$service"}[2m])))'
)
"""The operator's PromQL for an InferenceService's p99 latency in ms (`--latency-query`)."""
