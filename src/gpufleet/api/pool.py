"""GPUPool: a group of identical nodes, how their GPUs are shared, and how the pool scales."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.fields import Count, MigProfileName, Quantity
from gpufleet.api.gpu_models import GpuModelName
from gpufleet.api.labels import POOL_LABEL
from gpufleet.api.meta import check_label_value, is_label_value
from gpufleet.api.numerals import plain_digits
from gpufleet.api.quantity import MAX_NODE_CPU_MILLI, MAX_NODE_MEMORY_MIB, cpu_milli, memory_mib
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.status import ObjectStatus
from gpufleet.api.versions import DriverVersion

MAX_POOL_NODES = 65_536
"""The most nodes (and racks) one pool may have: about the largest Kubernetes clusters run (GKE's
65,000 nodes). Without a bound, one pool asking for a hundred million nodes made the embedded world
build them until it ran out of memory."""


MAX_POOL_NAME = 40
"""A pool's name, as GKE's node pools: its nodes are named `{pool}-{i}`, labelled with it, and their
GPUs' device ids (`GPU-{node}-{gpu}`, at most 64 characters) are made from those."""


class NodeResources(ApiModel):
    """CPU and memory of one node of the pool."""

    cpu: Quantity | None = Field(default=None, description="CPU of one node, a Kubernetes quantity (192).")
    memory: Quantity | None = Field(
        default=None, description="Memory of one node, a Kubernetes quantity (2Ti)."
    )

    @field_validator("cpu")
    @classmethod
    def _cpu_within_a_node(cls, value: int | str | None) -> int | str | None:
        if value is not None and cpu_milli(value) > MAX_NODE_CPU_MILLI:
            raise ValueError(f"at most {MAX_NODE_CPU_MILLI // 1000:,} cores a node, got {value!r}")
        return value

    @field_validator("memory")
    @classmethod
    def _memory_within_a_node(cls, value: int | str | None) -> int | str | None:
        if value is not None and memory_mib(value) > MAX_NODE_MEMORY_MIB:
            raise ValueError(f"at most 1Ei a node, got {value!r}")
        return value


class ReplicatedSharing(ApiModel):
    """Time-slicing or MPS: each GPU is offered as `replicas` shares."""

    replicas: Count = Field(ge=2, le=64, description="Shares each GPU is offered as (2 to 64).")


class Sharing(ApiModel):
    """How the pool's GPUs are shared; all fields absent means exclusive GPUs.

    `mig` maps a GPU index (as a string) or `*` (every GPU) to the MIG instances of that GPU. Whether
    the layout fits the GPU model is checked by `gpufleet.sharing.mig`, which knows the catalogue.
    """

    time_slicing: ReplicatedSharing | None = Field(
        default=None, description="Time-slicing: each GPU is offered as `replicas` shares that take turns."
    )
    mps: ReplicatedSharing | None = Field(
        default=None, description="MPS: each GPU is offered as `replicas` shares that run side by side."
    )
    mig: dict[str, list[MigProfileName]] | None = Field(
        default=None,
        description="MIG: per GPU index (as text), or * for every GPU, the MIG instances of that GPU, "
        "e.g. {'*': [3g.40gb, 2g.20gb, 1g.10gb]}; the layout must fit the GPU model.",
    )

    @field_validator("mig", mode="before")
    @classmethod
    def _indices_as_text(cls, value: Any) -> Any:
        # YAML reads `0: [3g.40gb]` with an integer key; the layout is keyed by text ("0", "*").
        if isinstance(value, dict):
            return {str(key) if isinstance(key, int) else key: layout for key, layout in value.items()}
        return value

    @model_validator(mode="after")
    def _one_mode(self) -> Sharing:
        given = [
            name
            for name, value in (("timeSlicing", self.time_slicing), ("mps", self.mps), ("mig", self.mig))
            if value is not None
        ]
        if len(given) > 1:
            raise field_error(given[1], f"a GPU is in one sharing mode; got {' and '.join(given)}")
        for key, layout in (self.mig or {}).items():
            if key != "*" and not plain_digits(key):
                raise field_error(f"mig.{key}", "keys are GPU indices or '*'")
            if not layout:
                raise field_error(f"mig.{key}", "a MIG layout needs at least one instance")
        return self

    @property
    def mode(self) -> Literal["exclusive", "timeSlicing", "mps", "mig"]:
        if self.time_slicing is not None:
            return "timeSlicing"
        if self.mps is not None:
            return "mps"
        if self.mig is not None:
            return "mig"
        return "exclusive"


class PoolTopology(ApiModel):
    """Embedded world: the nodes of the pool are spread over `racks` racks named `{block}-r{i}`."""

    block: str | None = Field(
        default=None, description="The block the nodes are in (their `block` label and the racks' prefix)."
    )
    racks: Count = Field(
        default=1, ge=1, le=MAX_POOL_NODES, description="Racks the nodes are spread over, evenly."
    )

    @field_validator("block")
    @classmethod
    def _block_is_a_label_value(cls, value: str | None) -> str | None:
        return None if value is None else check_label_value(value, "the block")

    def rack_names(self, pool: str) -> list[str | None]:
        """The racks of the nodes of pool `pool`, whose `rack` label each node carries ([None]: one
        rack, unlabelled): `{block}-r{i}`, or `{pool}-r{i}` without a block."""
        prefix = self._rack_prefix(pool)
        return [None] if prefix is None else [f"{prefix}-r{i}" for i in range(self.racks)]

    def last_rack_name(self, pool: str) -> str | None:
        """The last (and longest) of `rack_names`, without naming every rack."""
        prefix = self._rack_prefix(pool)
        return None if prefix is None else f"{prefix}-r{self.racks - 1}"

    def _rack_prefix(self, pool: str) -> str | None:
        if self.block:
            return self.block
        return pool if self.racks > 1 else None


class PoolAutoscaling(ApiModel):
    """Bounds of the pool's node count and how long an idle node is kept."""

    min_nodes: Count = Field(
        default=0, ge=0, le=MAX_POOL_NODES, description="The fewest nodes the pool keeps."
    )
    max_nodes: Count = Field(
        ge=0, le=MAX_POOL_NODES, description="The most nodes the pool grows to for pending work."
    )
    scale_down_delay_seconds: float = Field(
        default=600, ge=0, description="How long a node holds no pod before it is removed."
    )

    @model_validator(mode="after")
    def _min_below_max(self) -> PoolAutoscaling:
        if self.min_nodes > self.max_nodes:
            raise field_error("minNodes", f"must be <= maxNodes ({self.min_nodes} > {self.max_nodes})")
        return self


class GPUPoolSpec(ApiModel):
    gpu_model: GpuModelName = Field(
        min_length=1,
        description="The GPU model of every node: a known model or one of its aliases (`gpufleet "
        "gpu-models` lists them).",
    )
    gpus_per_node: Count = Field(ge=1, le=72, description="GPUs in each node.")
    nvlink_domains: list[list[int]] | None = Field(
        default=None, description="GPU indices of each NVLink domain; absent = one domain of all GPUs."
    )
    node_resources: NodeResources = Field(
        default_factory=NodeResources, description="CPU and memory of each node."
    )
    capacity_type: Literal["on-demand", "spot"] = Field(
        default="on-demand", description="on-demand, or spot: nodes that may be taken back at short notice."
    )
    price_per_gpu_hour: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="What one GPU-hour costs: for cost figures and the cheapest pool to grow.",
    )
    sharing: Sharing = Field(
        default_factory=Sharing, description="How the GPUs are shared; absent: each GPU is one pod's."
    )
    nodes: Count = Field(
        default=0, ge=0, le=MAX_POOL_NODES, description="Embedded world: how many nodes the pool starts with."
    )
    topology: PoolTopology = Field(
        default_factory=PoolTopology, description="Embedded world: the block and racks of the nodes."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Kubernetes world: the node labels that make a node the pool's."
    )
    autoscaling: PoolAutoscaling | None = Field(
        default=None, description="Bounds the node count follows demand within; absent: a fixed size."
    )
    driver_version: DriverVersion | None = Field(
        default=None,
        description="Embedded world: the NVIDIA driver of the pool's nodes (e.g. 550.54.15); absent = "
        "unknown, which runs any CUDA version. Kubernetes nodes report their own driver (GFD labels).",
    )
    dra: bool = Field(
        default=False,
        description="Embedded world: the pool's nodes publish their GPUs in ResourceSlices (driver "
        "gpu.nvidia.com) and hand them out through ResourceClaims only. With sharing.mig, the GPUs it "
        "names publish every MIG placement and are partitioned by the claims (dynamic MIG): the "
        "profiles listed there are no fixed layout.",
    )

    @model_validator(mode="after")
    def _gpu_indices_exist(self) -> GPUPoolSpec:
        seen: set[int] = set()
        for index, domain in enumerate(self.nvlink_domains or []):
            for gpu in domain:
                if not 0 <= gpu < self.gpus_per_node:
                    raise field_error(
                        f"nvlinkDomains.{index}", f"GPU {gpu} is not in 0..{self.gpus_per_node - 1}"
                    )
                if gpu in seen:
                    raise field_error(f"nvlinkDomains.{index}", f"GPU {gpu} is in two domains")
                seen.add(gpu)
        for key in self.sharing.mig or {}:
            if key != "*" and int(key) >= self.gpus_per_node:
                raise field_error(f"sharing.mig.{key}", f"GPU {key} is not in 0..{self.gpus_per_node - 1}")
        return self

    @field_validator("nvlink_domains")
    @classmethod
    def _domains_not_empty(cls, value: list[list[int]] | None) -> list[list[int]] | None:
        if value is not None and any(not domain for domain in value):
            raise ValueError("an NVLink domain needs at least one GPU")
        return value

    @property
    def domains(self) -> list[list[int]]:
        """The NVLink domains with the default applied (all GPUs of a node in one domain)."""
        return self.nvlink_domains if self.nvlink_domains is not None else [list(range(self.gpus_per_node))]


class GPUPoolStatus(ObjectStatus):
    nodes: int = Field(default=0, ge=0, description="Nodes of the pool.")
    ready_nodes: int = Field(default=0, ge=0, description="Nodes that are Ready.")
    gpus: int = Field(default=0, ge=0, description="GPUs of the Ready nodes.")
    allocated_gpu_milli: int = Field(default=0, ge=0, description="GPU held by pods, in milli-GPU.")
    idle_gpu_hours: float = Field(default=0.0, ge=0, description="GPU-hours ready but unallocated, so far.")
    idle_cost: float = Field(
        default=0.0, ge=0, description="What the idle GPU-hours cost at the pool's price."
    )
    idle_gpus: float = Field(
        default=0.0, ge=0, description="GPUs ready but unallocated at `idleCountedTime`."
    )
    idle_counted_time: AwareDatetime | None = Field(
        default=None, description="When idleGpuHours was last brought up to date (it runs on from here)."
    )
    idle_since: dict[str, AwareDatetime] = Field(
        default_factory=dict, description="Autoscaling: since when each idle node has held no pod."
    )


class GPUPool(Resource):
    """A group of identical GPU nodes (cluster-wide)."""

    NAMESPACED = False

    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["GPUPool"] = kind_field("GPUPool")
    spec: GPUPoolSpec = Field(description="The nodes: GPU model and count, sharing, price, size and scaling.")
    status: GPUPoolStatus = Field(
        default_factory=GPUPoolStatus,
        description="Its nodes, GPUs and their use, as the controllers see them.",
    )

    @model_validator(mode="after")
    def _names_are_label_values(self) -> GPUPool:
        # Every node of the pool is labelled with the pool's name and its rack's: a name that is no
        # label value would be refused on the first node the controller makes, not here.
        if len(self.metadata.name) > MAX_POOL_NAME:
            raise field_error(
                "metadata.name",
                f"at most {MAX_POOL_NAME} characters: the pool's nodes, their {POOL_LABEL} label and "
                "their GPUs' ids are made from it",
            )
        last = self.spec.topology.last_rack_name(self.metadata.name)
        if last is not None and not is_label_value(last):
            raise field_error(
                "spec.topology", f"rack {last!r} is not a valid label value (at most 63 characters)"
            )
        return self
