"""What the node advertises to kubelet: extended resources and their devices.

The rules are the NVIDIA device plugin's (NVIDIA-STACK.md section 2): the MIG strategy decides whether
MIG devices are hidden (`none`), advertised as `nvidia.com/gpu` (`single`) or as one resource per
profile (`mixed`, `nvidia.com/mig-1g.10gb`); time-slicing or MPS then replicates a resource's devices
into `<uuid>::<i>` units, optionally renamed to `<name>.shared`. MPS shares full GPUs only: a config
that asks for it on a node with a GPU in MIG mode is refused, naming the GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from gpufleet.agent.config import DEFAULT_RESOURCE, RESOURCE_PREFIX, AgentConfig
from gpufleet.agent.nvml import Gpu, MigDevice, NodeInfo
from gpufleet.api.errors import ValidationError

REPLICA_SEPARATOR = "::"
MAX_NAME = 63


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One unit kubelet can hand to a container."""

    id: str
    uuid: str
    index: str
    gpu: Gpu
    mig: MigDevice | None = None
    replica: int | None = None

    @property
    def numa_node(self) -> int | None:
        return self.gpu.numa_node


@dataclass(frozen=True, slots=True)
class Resource:
    """One extended resource (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, ...) and its devices."""

    name: str
    base: str
    devices: tuple[PluginDevice, ...]
    sharing: Literal["none", "time-slicing", "mps"] = "none"
    replicas: int = 1
    mig_profile: str | None = None

    @property
    def socket_name(self) -> str:
        """NVIDIA's socket naming: `nvidia-gpu.sock`, `nvidia-mig-1g.10gb.sock`."""
        return "nvidia-" + self.name.removeprefix(RESOURCE_PREFIX) + ".sock"

    @property
    def physical(self) -> tuple[PluginDevice, ...]:
        """One device per GPU or MIG device, replicas folded."""
        seen: dict[str, PluginDevice] = {}
        for device in self.devices:
            seen.setdefault(device.uuid, device)
        return tuple(seen.values())

    def device(self, device_id: str) -> PluginDevice | None:
        for device in self.devices:
            if device.id == device_id:
                return device
        return None


def strip_replica(device_id: str) -> str:
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def _gpu_device(gpu: Gpu) -> PluginDevice:
    return PluginDevice(id=gpu.uuid, uuid=gpu.uuid, index=str(gpu.index), gpu=gpu)


def _mig_device(gpu: Gpu, device: MigDevice) -> PluginDevice:
    return PluginDevice(
        id=device.uuid, uuid=device.uuid, index=f"{gpu.index}:{device.index}", gpu=gpu, mig=device
    )


def _mig_resource_name(profile: str) -> str:
    return f"{RESOURCE_PREFIX}mig-{profile.replace('+', '.')}"


def _base_resources(node: NodeInfo, strategy: str) -> list[tuple[str, list[PluginDevice], str | None]]:
    if strategy == "none" or not any(gpu.mig_enabled for gpu in node.gpus):
        return [(DEFAULT_RESOURCE, [_gpu_device(gpu) for gpu in node.gpus], None)] if node.gpus else []
    if strategy == "single":
        if not all(gpu.mig_enabled for gpu in node.gpus):
            raise ValidationError(
                "MIG strategy 'single' needs MIG enabled on every GPU or on none; enabled on "
                f"{[g.index for g in node.gpus if g.mig_enabled]} only",
                field="flags.migStrategy",
            )
        devices = [(gpu, d) for gpu in node.gpus for d in gpu.mig_devices]
        profiles = sorted({d.profile for _, d in devices})
        if len(profiles) != 1:
            raise ValidationError(
                f"MIG strategy 'single' needs one MIG profile on every GPU; found {profiles or 'none'}",
                field="flags.migStrategy",
            )
        return [(DEFAULT_RESOURCE, [_mig_device(gpu, d) for gpu, d in devices], profiles[0])]
    # mixed
    out: list[tuple[str, list[PluginDevice], str | None]] = []
    whole = [_gpu_device(gpu) for gpu in node.gpus if not gpu.mig_enabled]
    if whole:
        out.append((DEFAULT_RESOURCE, whole, None))
    by_profile: dict[str, list[PluginDevice]] = {}
    for gpu in node.gpus:
        for device in gpu.mig_devices:
            # Only compute instances that span their whole GPU instance are schedulable units.
            if device.ci_slices == device.gi_slices:
                by_profile.setdefault(device.profile, []).append(_mig_device(gpu, device))
    for profile in sorted(by_profile):
        out.append((_mig_resource_name(profile), by_profile[profile], profile))
    return out


def _refuse_mps_on_mig(node: NodeInfo, config: AgentConfig) -> None:
    """MPS shares full GPUs only. NVIDIA's feature discovery fails with "MPS sharing is not supported
    for mig devices" when any GPU is in MIG mode, under every MIG strategy (with `none` such a GPU
    would otherwise be replicated whole), so the agent refuses the config at start-up the same way."""
    if config.sharing.strategy != "mps":
        return
    in_mig = [gpu.index for gpu in node.gpus if gpu.mig_enabled]
    if in_mig:
        gpus = ("GPUs " if len(in_mig) > 1 else "GPU ") + ", ".join(map(str, in_mig))
        raise ValidationError(
            f"MPS sharing is not supported on GPUs in MIG mode; MIG is enabled on {gpus}: "
            "disable MIG there or use timeSlicing",
            field="sharing.mps",
        )


def build_resources(node: NodeInfo, config: AgentConfig) -> list[Resource]:
    """The resources to advertise, in a stable order; ValidationError when config and node disagree."""
    _refuse_mps_on_mig(node, config)
    sharing = config.sharing
    replication = sharing.replication
    names = {entry.name for entry in replication.resources} if replication else set()
    resources = []
    base = _base_resources(node, config.flags.mig_strategy)
    known = {name for name, _, _ in base}
    for name in sorted(names - known):
        # NVIDIA's plugin ignores such entries too; a typo here should still be visible.
        raise ValidationError(
            f"sharing names resource {name!r}, which this node does not advertise; it has {sorted(known)}",
            field="sharing",
        )
    for name, devices, profile in base:
        replicas = replication.replicas(name) if replication else 1
        kind = sharing.strategy if replicas > 1 else "none"
        advertised = name
        if replicas > 1:
            assert replication is not None
            if replication.rename_by_default:
                advertised = f"{name}.shared"
            devices = [
                PluginDevice(
                    id=f"{d.uuid}{REPLICA_SEPARATOR}{i}",
                    uuid=d.uuid,
                    index=d.index,
                    gpu=d.gpu,
                    mig=d.mig,
                    replica=i,
                )
                for d in devices
                for i in range(replicas)
            ]
        if len(advertised) > MAX_NAME:
            raise ValidationError(f"resource name {advertised!r} is longer than {MAX_NAME}", field="sharing")
        resources.append(
            Resource(
                name=advertised,
                base=name,
                devices=tuple(devices),
                sharing=kind,
                replicas=replicas,
                mig_profile=profile,
            )
        )
    return resources


def device_ids(resources: Iterable[Resource]) -> dict[str, list[str]]:
    """Resource name -> advertised device IDs, for printing."""
    return {r.name: [d.id for d in r.devices] for r in resources}
