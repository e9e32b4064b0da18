"""The DRA device view of a node: the pools of devices its ResourceSlices publish, as allocation sees them.

A driver publishes a pool in one or more ResourceSlices and bumps the pool's generation whenever it
changes; until every slice of the new generation is written, the API holds a mix. So, as kube-scheduler
does: only the slices of a pool's highest generation count, a pool with fewer slices at that generation
than `resourceSliceCount` says is *incomplete* (its devices may still be allocated one by one, but not
"all of them"), and a pool that lists a device twice is *invalid* (none of its devices is used).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from gpufleet.api.dra_devices import Device, NodeSelector, ResourceSliceSpec
from gpufleet.api.quantity import parse_quantity
from gpufleet.fleet.request import node_selector_matches

DeviceId = tuple[str, str, str]
"""(driver, pool, device): a device's identity across the cluster, as allocation results name it."""

CounterId = tuple[str, str, str, str]
"""(driver, pool, counter set, counter)."""


@dataclass(frozen=True, slots=True)
class PoolDevice:
    """One device of a pool as allocation sees it."""

    driver: str
    pool: str
    generation: int
    device: Device

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.device.name)

    def consumption(self) -> dict[CounterId, Decimal]:
        """What the device takes from its pool's counter sets while allocated."""
        used: dict[CounterId, Decimal] = defaultdict(Decimal)
        for consumed in self.device.consumes_counters:
            for name, counter in consumed.counters.items():
                used[(self.driver, self.pool, consumed.counter_set, name)] += parse_quantity(counter.value)
        return dict(used)


@dataclass(slots=True)
class DevicePool:
    driver: str
    name: str
    generation: int
    slice_count: int
    slices_seen: int = 0
    devices: list[PoolDevice] = field(default_factory=list)
    counters: dict[CounterId, Decimal] = field(default_factory=dict)
    duplicate: str | None = None
    """The first device name listed twice, which makes the pool invalid."""

    @property
    def complete(self) -> bool:
        return self.slices_seen >= self.slice_count

    @property
    def valid(self) -> bool:
        return self.duplicate is None


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """The pools a node reaches, current generation only, in a deterministic order (driver, pool)."""

    pools: tuple[DevicePool, ...]

    def devices(self) -> list[PoolDevice]:
        """Every device of the valid pools, in pool then publication order."""
        return [d for pool in self.pools if pool.valid for d in pool.devices]

    def counters(self) -> dict[CounterId, Decimal]:
        """Every counter of the pools, with its amount."""
        return {k: v for pool in self.pools for k, v in pool.counters.items()}

    def pool(self, driver: str, name: str) -> DevicePool | None:
        return next((p for p in self.pools if p.driver == driver and p.name == name), None)


def node_devices(
    slices: Iterable[ResourceSliceSpec], *, node_name: str, labels: Mapping[str, str]
) -> NodeDevices:
    """The device pools `node_name` (with `labels`) reaches, from the specs of every slice of the cluster
    (given in a fixed order, e.g. by slice name: a pool's devices are listed in that order)."""
    reachable = [s for s in slices if _slice_reaches(s, node_name, labels)]
    newest: dict[tuple[str, str], int] = {}
    for s in reachable:
        key = (s.driver, s.pool.name)
        newest[key] = max(newest.get(key, -1), s.pool.generation)
    pools: dict[tuple[str, str], DevicePool] = {}
    for s in reachable:
        key = (s.driver, s.pool.name)
        if s.pool.generation != newest[key]:
            continue  # an older generation the driver is replacing
        pool = pools.get(key)
        if pool is None:
            pool = pools[key] = DevicePool(
                driver=key[0],
                name=key[1],
                generation=newest[key],
                slice_count=s.pool.resource_slice_count,
            )
        pool.slices_seen += 1
        seen = {d.device.name for d in pool.devices}
        for device in s.devices:
            if s.per_device_node_selection and not _device_reaches(device, node_name, labels):
                continue
            if device.name in seen and pool.duplicate is None:
                pool.duplicate = device.name
            seen.add(device.name)
            pool.devices.append(PoolDevice(key[0], key[1], pool.generation, device))
        for counter_set in s.shared_counters:
            for name, counter in counter_set.counters.items():
                pool.counters[(key[0], key[1], counter_set.name, name)] = parse_quantity(counter.value)
    return NodeDevices(tuple(pools[k] for k in sorted(pools)))


def _slice_reaches(s: ResourceSliceSpec, node_name: str, labels: Mapping[str, str]) -> bool:
    spec = s
    if spec.node_name is not None:
        return spec.node_name == node_name
    if spec.node_selector is not None:
        return node_selector_matches(spec.node_selector, node_name, labels)
    return bool(spec.all_nodes or spec.per_device_node_selection)


def _device_reaches(device: Device, node_name: str, labels: Mapping[str, str]) -> bool:
    if device.node_name is not None:
        return device.node_name == node_name
    if device.node_selector is not None:
        return node_selector_matches(device.node_selector, node_name, labels)
    return bool(device.all_nodes)


def pinned_to(node_name: str) -> NodeSelector:
    """The node selector an allocation of node-local devices carries: this node, by name."""
    return NodeSelector.model_validate(
        {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        }
    )
