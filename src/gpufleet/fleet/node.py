"""A node as the scheduler sees it: capacity, labels, taints, GPUs and how they are shared."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from gpufleet.fleet.request import Taint


class SharingMode(Enum):
    """How a node's GPUs may be handed out.

    DYNAMIC: a GPU is exclusive while a whole-GPU pod holds it and shared by milli while share pods hold
    it (the Alibaba/FGD model). TIME_SLICING and MPS: GPUs take share pods only, at most `replicas` per
    GPU. MIG: GPUs are cut into the instances of a fixed layout; each instance is one allocatable unit.
    """

    DYNAMIC = "dynamic"
    EXCLUSIVE = "exclusive"
    TIME_SLICING = "timeSlicing"
    MPS = "mps"
    MIG = "mig"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Everything the fleet needs to know to add a node.

    `nvlink_domains` lists GPU indices that share an NVLink domain; absent means all GPUs in one domain.
    `mig_layouts` maps a GPU index to its MIG profile names (only with SharingMode.MIG).
    `driver_version` is the node's NVIDIA driver as it reports it (`550.54.15`); empty means unknown,
    and an unknown driver runs every CUDA version (`gpufleet.fleet.cuda`).
    """

    name: str
    gpu_model: str = ""
    gpus: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_memory_mib: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    nvlink_domains: tuple[tuple[int, ...], ...] | None = None
    sharing: SharingMode = SharingMode.DYNAMIC
    replicas: int = 1
    mig_layouts: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    unhealthy_gpus: tuple[int, ...] = ()
    driver_version: str = ""

    def nvlink_groups(self) -> tuple[tuple[int, ...], ...]:
        if self.nvlink_domains is None:
            return (tuple(range(self.gpus)),) if self.gpus else ()
        return self.nvlink_domains
