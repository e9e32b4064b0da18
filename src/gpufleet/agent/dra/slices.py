"""The ResourceSlices of a node whose GPUs NVML describes: `GpuFacts` from `NodeInfo`, handed to the
builder the digital twin uses, so the two publish the same devices, names and attributes.

A MIG-enabled GPU publishes the MIG instances that exist on it (mig-parted or the GPU Operator made
them; the agent does not create instances at prepare), each consuming its placement's counters of
the GPU's counter set, and the whole GPU consuming all of them; with dynamic MIG (`dynmig.py`) it
publishes every placement instead, and prepare creates the allocated one. A GPU (or a MIG instance) the health
checks marked unhealthy is left out, so it disappears from the pool's next generation and comes back
when it recovers.
"""

from __future__ import annotations

from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import Gpu, MigDevice, NodeInfo, normalize_bus_id
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.api.gpu_models import canonical_name
from gpufleet.sharing.dra_slices import GpuFacts, MigInstance, node_slices


def gpu_facts(
    node: NodeInfo, health: HealthState | None = None, *, dynamic_mig: bool = False
) -> dict[int, GpuFacts]:
    """Each GPU's facts by index; a MIG instance that is unhealthy is left out of its GPU's list. With
    `dynamic_mig` a MIG-enabled GPU lists none: it publishes every placement (made at prepare)."""

    def healthy(gpu: Gpu, device: MigDevice) -> bool:
        return health is None or health.is_healthy(device.uuid, gpu.uuid)

    return {
        gpu.index: GpuFacts(
            uuid=gpu.uuid,
            product_name=gpu.name,
            memory_mib=gpu.memory_mib,
            compute_capability=gpu.compute_capability,
            pci_bus_id=normalize_bus_id(gpu.pci_bus_id),
            minor=gpu.minor_number,
            mig_instances=tuple(
                MigInstance(profile=d.profile, start=d.placement_start, uuid=d.uuid)
                for d in gpu.mig_devices
                if healthy(gpu, d)
            )
            if gpu.mig_enabled and not dynamic_mig
            else None,
        )
        for gpu in node.gpus
    }


def cliques(node: NodeInfo, node_name: str) -> dict[int, str]:
    """Each GPU's NVLink clique: its fabric clique where NVML reports one (`<cluster UUID>.<clique id>`,
    a rack-scale NVLink domain across nodes, as NVIDIA's driver publishes it); else the node's NVLink
    domain as NVML's links show it, named `<node>.<domain>` as the twin names its nodes' (the same
    `<cluster>.<clique>` shape). A GPU with no NVLink peer is a clique of its own."""
    local = {gpu: f"{node_name}.{i}" for i, domain in enumerate(node.nvlink_domains()) for gpu in domain}
    return {gpu.index: gpu.fabric_clique or local[gpu.index] for gpu in node.gpus}


def cuda_version_text(node: NodeInfo) -> str:
    """NVML's CUDA driver version (12040) as a version (`12.4`)."""
    major, minor = node.cuda_version
    return f"{major}.{minor}" if node.cuda_driver_version else ""


def node_slice_specs(
    node: NodeInfo,
    node_name: str,
    health: HealthState | None = None,
    *,
    generation: int = 1,
    dynamic_mig: bool = False,
) -> list[ResourceSliceSpec]:
    """What the node publishes at `generation`, leaving out what `health` says is unhealthy; with
    `dynamic_mig`, every MIG placement of a MIG-enabled GPU (NVIDIA's DynamicMIG)."""
    if not node.gpus:
        return []
    count = max(gpu.index for gpu in node.gpus) + 1
    present = {gpu.index for gpu in node.gpus}
    # An index NVML did not list (a GPU that fell off the bus before the agent started) publishes nothing.
    unhealthy = [i for i in range(count) if i not in present] + [
        gpu.index for gpu in node.gpus if health is not None and not health.is_healthy(gpu.uuid)
    ]
    return node_slices(
        node_name,
        gpu_model=canonical_name(node.gpus[0].name),
        gpus=count,
        mig_gpus=[gpu.index for gpu in node.gpus if gpu.mig_enabled],
        unhealthy=unhealthy,
        driver_version=node.driver_version,
        cuda_driver_version=cuda_version_text(node),
        generation=generation,
        cliques=cliques(node, node_name),
        facts=gpu_facts(node, health, dynamic_mig=dynamic_mig),
    )
