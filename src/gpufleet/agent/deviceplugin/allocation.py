"""GetPreferredAllocation and Allocate: which devices to suggest, and what a container gets.

Preferred allocations of whole GPUs keep a container inside one NVLink domain and one NUMA node
where it can, then maximise the sum of pair link scores (go-gpuallocator's: 100 per NVLink plus a
PCIe score from 60 for one board down to 10 across sockets). Replicas and MIG devices are picked
greedily, spread over physical GPUs (`distributed`) or packed onto as few as possible (`packed`).

Allocate follows the NVIDIA plugin's response shapes for each device-list strategy (envvar,
volume-mounts, CDI annotations, CDI devices), device specs when asked, and MPS's pipe directory,
shared memory and per-client limits.
"""

from __future__ import annotations

import itertools
import math
import os
import uuid as uuidlib
from collections.abc import Sequence

from gpufleet.agent.config import AgentConfig
from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2 as pb
from gpufleet.agent.deviceplugin.resources import PluginDevice, Resource
from gpufleet.agent.nvml import NodeInfo

_PCIE_SCORE = {0: 60, 10: 50, 20: 40, 30: 30, 40: 20, 50: 10}
# Beyond this many candidate sets, whole-GPU preference is greedy instead of exhaustive.
_EXHAUSTIVE_LIMIT = 20_000

CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
MPS_CONTAINER_ROOT = "/mps"
_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


class AllocationError(Exception):
    """A request kubelet should fail (the pod gets UnexpectedAdmissionError with this message)."""


def pair_score(node: NodeInfo, a: int, b: int) -> int:
    return 100 * node.nvlinks(a, b) + _PCIE_SCORE.get(node.pcie_level(a, b), 10)


def _resolve(resource: Resource, ids: Sequence[str]) -> list[PluginDevice]:
    devices = []
    for device_id in ids:
        device = resource.device(device_id)
        if device is None:
            raise AllocationError(
                f"invalid allocation request for '{resource.name}': unknown device: {device_id}"
            )
        devices.append(device)
    return devices


def preferred_allocation(
    resource: Resource,
    node: NodeInfo,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    *,
    policy: str = "distributed",
) -> list[str]:
    """The IDs to suggest, at most `size` and each once: must_include first, then the best of available.

    Kubelet sends must_include as a subset of available, each once and no more than size; a client
    that does not gets an answer that still keeps to those rules: repeated IDs count once, must-include
    IDs that are not available are left out (kubelet could not hand them out), and when more must be
    included than fit, the first `size` of them are the answer.
    """
    if size <= 0:
        return []
    avail = _unique(_resolve(resource, available))
    offered = {d.id for d in avail}
    must = [d for d in _unique(_resolve(resource, must_include)) if d.id in offered]
    if len(must) >= size:
        return [d.id for d in must[:size]]
    if size > len(avail):
        raise AllocationError(
            f"cannot prefer {size} devices of '{resource.name}' from {len(avail)} available"
        )
    if resource.replicas == 1 and resource.mig_profile is None:
        chosen = _prefer_whole(node, avail, must, size)
    else:
        chosen = _prefer_shared(avail, must, size, packed=policy == "packed")
    return [d.id for d in chosen]


def _unique(devices: Sequence[PluginDevice]) -> list[PluginDevice]:
    """`devices` without repeats, in first-seen order."""
    seen: dict[str, PluginDevice] = {}
    for device in devices:
        seen.setdefault(device.id, device)
    return list(seen.values())


def _set_key(node: NodeInfo, gpus: Sequence[int], domain_of: dict[int, int]) -> tuple[bool, bool, int]:
    one_domain = len({domain_of[g] for g in gpus}) == 1
    one_numa = len({node.gpus[g].numa_node for g in gpus}) == 1
    score = sum(pair_score(node, a, b) for a, b in itertools.combinations(gpus, 2))
    return one_domain, one_numa, score


def _prefer_whole(
    node: NodeInfo, avail: list[PluginDevice], must: list[PluginDevice], size: int
) -> list[PluginDevice]:
    domain_of = {g: k for k, domain in enumerate(node.nvlink_domains()) for g in domain}
    fixed = sorted({d.gpu.index for d in must})
    by_index = {d.gpu.index: d for d in avail + must}
    pool = sorted(set(by_index) - set(fixed))
    need = size - len(fixed)
    best: tuple[int, ...] | None = None
    if math.comb(len(pool), need) <= _EXHAUSTIVE_LIMIT:
        best_key: tuple[bool, bool, int] | None = None
        for extra in itertools.combinations(pool, need):
            key = _set_key(node, fixed + list(extra), domain_of)
            if best_key is None or key > best_key:
                best, best_key = extra, key
    else:
        chosen: list[int] = list(fixed)
        for _ in range(need):
            candidates = [g for g in pool if g not in chosen]
            chosen.append(max(candidates, key=lambda g: (_set_key(node, [*chosen, g], domain_of), -g)))
        best = tuple(chosen[len(fixed) :])
    assert best is not None
    return [by_index[g] for g in fixed + sorted(best)]


def _prefer_shared(
    avail: list[PluginDevice], must: list[PluginDevice], size: int, *, packed: bool
) -> list[PluginDevice]:
    chosen = list(must)
    taken = {d.id for d in chosen}
    free: dict[str, list[PluginDevice]] = {}
    for device in avail:
        if device.id not in taken:
            free.setdefault(device.gpu.uuid, []).append(device)
    while len(chosen) < size:
        groups = [g for g in free.values() if g]

        def order(group: list[PluginDevice]) -> tuple[int, int]:
            count = len(group) if not packed else -len(group)
            return count, -group[0].gpu.index

        group = max(groups, key=order)
        chosen.append(group.pop(0))
    return chosen


def allocate(
    resource: Resource, node: NodeInfo, config: AgentConfig, ids: Sequence[str]
) -> pb.ContainerAllocateResponse:
    """The response for one container's request."""
    devices = _resolve(resource, ids)
    if config.sharing.fail_requests_greater_than_one and resource.replicas > 1 and len(devices) > 1:
        raise AllocationError(
            f"request for '{resource.name}: {len(devices)}' too large: "
            "maximum request size for shared resources is 1"
        )
    unique: dict[str, PluginDevice] = {}
    for device in devices:
        unique.setdefault(device.uuid, device)
    physical = list(unique.values())
    flags = config.flags
    by_index = flags.plugin.device_id_strategy == "index"
    visible = [d.index if by_index else d.uuid for d in physical]
    strategies = flags.plugin.device_list_strategy
    response = pb.ContainerAllocateResponse()

    if "envvar" in strategies:
        response.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(visible)
    if "volume-mounts" in strategies:
        response.envs["NVIDIA_VISIBLE_DEVICES"] = VOLUME_MOUNT_ROOT
        for device_id in visible:
            response.mounts.add(container_path=f"{VOLUME_MOUNT_ROOT}/{device_id}", host_path="/dev/null")
    cdi_names = [f"{CDI_KIND}={device_id}" for device_id in visible]
    if flags.gds_enabled:
        cdi_names.append("k8s.device-plugin.nvidia.com/gds=all")
    if flags.mofed_enabled:
        cdi_names.append("k8s.device-plugin.nvidia.com/mofed=all")
    if "cdi-annotations" in strategies:
        key = f"{flags.plugin.cdi_annotation_prefix}nvidia-device-plugin_{uuidlib.uuid4()}"
        response.annotations[key] = ",".join(cdi_names)
    if "cdi-cri" in strategies:
        for name in cdi_names:
            response.cdi_devices.add(name=name)
    if flags.plugin.pass_device_specs:
        root = flags.nvidia_driver_root.rstrip("/")
        paths = sorted({d.gpu.device_path for d in physical}) + [
            p for p in _CONTROL_DEVICES if os.path.exists(root + p)
        ]
        for path in paths:
            response.devices.add(container_path=path, host_path=root + path, permissions="rw")
    if flags.gds_enabled:
        response.envs["NVIDIA_GDS"] = "enabled"
    if flags.mofed_enabled:
        response.envs["NVIDIA_MOFED"] = "enabled"
    if resource.sharing == "mps":
        _add_mps(response, resource, physical, config.flags.mps_root)
    return response


def _add_mps(
    response: pb.ContainerAllocateResponse, resource: Resource, physical: list[PluginDevice], host_root: str
) -> None:
    """MPS pipe and shared memory from the per-resource control daemon, and this client's share."""
    pipe = f"{MPS_CONTAINER_ROOT}/{resource.name}/pipe"
    response.envs["CUDA_MPS_PIPE_DIRECTORY"] = pipe
    response.mounts.add(container_path=pipe, host_path=f"{host_root.rstrip('/')}/{resource.name}/pipe")
    response.mounts.add(container_path="/dev/shm", host_path=f"{host_root.rstrip('/')}/shm")
    # The same limits the NVIDIA MPS daemon sets as defaults, repeated per client so that they hold
    # even where the daemon was started without them. Ordinals are the container's visible devices.
    response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(100 // resource.replicas)
    response.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
        f"{i}={d.gpu.memory_mib // resource.replicas}M" for i, d in enumerate(physical)
    )
