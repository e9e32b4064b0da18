"""Keeps the scheduler's DRA device view in step with the store: the ResourceSlices nodes publish and
the DeviceClasses, as the fleet's DeviceView (fleet/dra_view.py) holds them for placement.

Slices change rarely (a node joins, a GPU fails or recovers and the pool's generation moves on), so a
change re-derives the view of the nodes it can reach, from every slice of the cluster, in name order
(a pool's devices are listed in that order).
"""

from __future__ import annotations

from gpufleet.api.dra import DeviceClass, ResourceSlice
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.fleet.devices import node_devices
from gpufleet.fleet.state import FleetState
from gpufleet.store.protocol import Store


class DeviceSync:
    """The stored slices and classes, and the fleet's device view derived from them."""

    def __init__(self) -> None:
        self.slices: dict[str, ResourceSliceSpec] = {}
        self.classes: dict[str, DeviceClass] = {}

    def load(self, store: Store, fleet: FleetState) -> None:
        """From a full listing (the cache's rebuild)."""
        self.slices = {s.name: s.spec for s in store.list(ResourceSlice)}
        self.classes = {c.name: c for c in store.list(DeviceClass)}
        fleet.devices.set_classes({name: c.spec for name, c in self.classes.items()})
        for name in fleet.index:
            self.refresh_node(fleet, name)

    def observe(self, obj: ResourceSlice | DeviceClass, *, deleted: bool, fleet: FleetState) -> None:
        if isinstance(obj, DeviceClass):
            if deleted:
                self.classes.pop(obj.name, None)
            else:
                self.classes[obj.name] = obj
            fleet.devices.set_classes({name: c.spec for name, c in self.classes.items()})
            return
        old = self.slices.pop(obj.name, None)
        if not deleted:
            self.slices[obj.name] = obj.spec
        touched = {s.node_name for s in (old, None if deleted else obj.spec) if s is not None}
        # A slice for all nodes, or by selector, may reach any node.
        nodes = list(fleet.index) if None in touched else [n for n in touched if n in fleet.index]
        for name in nodes:
            self.refresh_node(fleet, name)

    def refresh_node(self, fleet: FleetState, name: str) -> None:
        """Re-derives the node's pools (a node just added, or one whose slices changed)."""
        if not self.slices:
            fleet.set_node_devices(name, None)
            return
        labels = fleet.specs[fleet.row_of(name)].labels
        ordered = [self.slices[k] for k in sorted(self.slices)]
        fleet.set_node_devices(name, node_devices(ordered, node_name=name, labels=labels))
