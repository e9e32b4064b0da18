"""The DRA side of the scheduling view: each node's ResourceSlice devices, the DeviceClasses, and which
devices admitted pods hold.

It lives beside FleetState's arrays so that holding a device follows the allocation that holds it: a pod
allocated (or reinstated) takes its devices, a pod released (an eviction, a statement's rollback, a
finished workload) gives them back. Nothing is allocated twice, and a what-if leaves no trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.fleet.devices import DeviceId, NodeDevices


class DeviceView:
    """Per node name, the pools its slices publish; the classes; and device -> the pod holding it."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeDevices] = {}
        self.classes: dict[str, DeviceClassSpec] = {}
        self.in_use: dict[DeviceId, str] = {}
        self.claims_only: set[str] = set()
        """Nodes whose GPUs are handed out through claims only (DRA nodes), published yet or not."""

    def set_node(self, name: str, devices: NodeDevices | None) -> None:
        """The node's devices from its slices (None: it publishes none, or no longer exists)."""
        if devices is None or not devices.pools:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = devices

    def set_classes(self, classes: Mapping[str, DeviceClassSpec]) -> None:
        self.classes = dict(classes)

    def hold(self, pod: str, devices: Iterable[DeviceId]) -> None:
        """`pod` takes `devices`; one held by another pod is a scheduler bug, refused changing nothing."""
        wanted = list(devices)
        for device in wanted:
            holder = self.in_use.get(device)
            if holder is not None and holder != pod:
                raise RuntimeError(f"pod {pod}: device {'/'.join(device)} is held by pod {holder}")
        for device in wanted:
            self.in_use[device] = pod

    def free(self, pod: str, devices: Iterable[DeviceId]) -> None:
        for device in devices:
            if self.in_use.get(device) == pod:
                del self.in_use[device]

    def copy(self) -> DeviceView:
        clone = DeviceView()
        clone.nodes = dict(self.nodes)
        clone.classes = dict(self.classes)
        clone.in_use = dict(self.in_use)
        clone.claims_only = set(self.claims_only)
        return clone
