"""The DRA side of the scheduling view: each node's ResourceSlice devices, the DeviceClasses, and which
devices admitted pods hold.

It lives beside FleetState's arrays so that holding a device follows the allocation that holds it: a pod
allocated (or reinstated) takes its devices, a pod released (an eviction, a statement's rollback, a
finished workload) gives them back. Nothing is allocated twice, and a what-if leaves no trace.

A shared claim (one ResourceClaim several pods name) is held by the claim, not by a pod: the first pod
using it brings its allocation, the others join it, and its devices are free again when the last user
leaves, as Kubernetes deallocates a claim whose `reservedFor` is empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.fleet.devices import DeviceId, NodeDevices
from gpufleet.fleet.dra_claims import ClaimAllocation

if TYPE_CHECKING:  # state.py imports this module
    from gpufleet.fleet.state import Allocation


@dataclass(slots=True)
class SharedClaim:
    """A shared claim's allocation and the pods using it (its `reservedFor`)."""

    allocation: ClaimAllocation
    users: set[str] = field(default_factory=set)


class DeviceView:
    """Per node name, the pools its slices publish; the classes; and device -> the pod holding it."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeDevices] = {}
        self.classes: dict[str, DeviceClassSpec] = {}
        self.in_use: dict[DeviceId, str] = {}
        self.claims_only: set[str] = set()
        """Nodes whose GPUs are handed out through claims only (DRA nodes), published yet or not."""
        self.shared: dict[str, SharedClaim] = {}
        """Shared claims in use, by claim key; their devices are in `in_use` held by the claim key."""
        self.pinned: dict[str, tuple[DeviceId, ...]] = {}
        """Claims the world still records as allocated though no pod here holds them (not yet
        deallocated after their pods left, or allocated for a pod not placed yet): their devices are in
        `in_use`, held by the claim key, until the world says they are free or the pod the claim was
        allocated for takes them, so they are not handed out twice meanwhile."""
        self.adopted: dict[str, tuple[tuple[str, DeviceId], ...]] = {}
        """Pod (or shared claim) -> the pinned devices it took, with the claim each was pinned to: given
        back, they are pinned to it again (a rolled-back what-if leaves the pin as it found it)."""

    def set_node(self, name: str, devices: NodeDevices | None) -> None:
        """The node's devices from its slices (None: it publishes none, or no longer exists)."""
        if devices is None or not devices.pools:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = devices

    def set_classes(self, classes: Mapping[str, DeviceClassSpec]) -> None:
        self.classes = dict(classes)

    def hold(self, pod: str, devices: Iterable[DeviceId]) -> None:
        """`pod` takes `devices`; one held by another pod is a scheduler bug, refused changing nothing.
        A device pinned to a claim is taken over: the allocator never chooses one, so a pod holding it
        is the one that claim was allocated for, joining the allocation as it is."""
        wanted = list(devices)
        for device in wanted:
            holder = self.in_use.get(device)
            if holder is not None and holder != pod and device not in self.pinned.get(holder, ()):
                raise RuntimeError(f"pod {pod}: device {'/'.join(device)} is held by pod {holder}")
        taken: list[tuple[str, DeviceId]] = []
        for device in wanted:
            holder = self.in_use.get(device)
            if holder is not None and holder != pod:
                left = tuple(d for d in self.pinned[holder] if d != device)
                if left:
                    self.pinned[holder] = left
                else:
                    del self.pinned[holder]
                taken.append((holder, device))
            self.in_use[device] = pod
        if taken:
            self.adopted[pod] = self.adopted.get(pod, ()) + tuple(taken)

    def free(self, pod: str, devices: Iterable[DeviceId]) -> None:
        for device in devices:
            if self.in_use.get(device) == pod:
                del self.in_use[device]
        for claim, device in self.adopted.pop(pod, ()):
            if device not in self.in_use:  # pinned again, as before it was taken
                self.in_use[device] = claim
                self.pinned[claim] = (*self.pinned.get(claim, ()), device)

    def take(self, alloc: Allocation) -> None:
        """The pod takes its own claims' devices and joins its shared claims; a conflict (a device held
        by another pod or claim, a shared claim allocated differently) is refused changing nothing."""
        for claim in alloc.shared:
            known = self.shared.get(claim.claim)
            if known is not None and known.allocation.devices != claim.devices:
                raise RuntimeError(f"pod {alloc.pod}: claim {claim.claim} is allocated other devices")
            if known is None:
                for device in claim.held:
                    holder = self.in_use.get(device)
                    if holder is not None and device not in self.pinned.get(holder, ()):
                        raise RuntimeError(
                            f"claim {claim.claim}: device {'/'.join(device)} is held by {holder}"
                        )
        self.hold(alloc.pod, alloc.devices)
        for claim in alloc.shared:
            entry = self.shared.setdefault(claim.claim, SharedClaim(claim))
            if not entry.users:
                # Pinned already (allocated before any user here): the claim now holds them as shared,
                # and pins them again when its last user leaves.
                mine = self.pinned.pop(claim.claim, ())
                for device in mine:
                    del self.in_use[device]
                if mine:
                    self.adopted[claim.claim] = self.adopted.get(claim.claim, ()) + tuple(
                        (claim.claim, d) for d in mine
                    )
                self.hold(claim.claim, claim.held)
            entry.users.add(alloc.pod)

    def give_back(self, alloc: Allocation) -> None:
        """The pod gives its own devices back and leaves its shared claims; a claim left without users
        frees its devices (it is deallocated)."""
        self.free(alloc.pod, alloc.devices)
        for claim in alloc.shared:
            entry = self.shared.get(claim.claim)
            if entry is None:
                continue
            entry.users.discard(alloc.pod)
            if not entry.users:
                del self.shared[claim.claim]
                self.free(claim.claim, entry.allocation.held)

    def pin(self, claim: str, devices: Iterable[DeviceId]) -> None:
        """`claim` keeps those of `devices` no pod or claim holds here, until `unpin`."""
        free = tuple(d for d in devices if d not in self.in_use)
        for device in free:
            self.in_use[device] = claim
        self.pinned[claim] = self.pinned.get(claim, ()) + free

    def unpin(self, claim: str) -> None:
        """`claim` was deallocated or deleted: what it was pinned to is free."""
        for device in self.pinned.pop(claim, ()):
            if self.in_use.get(device) == claim:
                del self.in_use[device]
        # Taken over by a pod that still holds it: freed by the pod alone, not pinned again after.
        for holder, taken in list(self.adopted.items()):
            kept = tuple(t for t in taken if t[0] != claim)
            if kept:
                self.adopted[holder] = kept
            else:
                del self.adopted[holder]

    def pin_allocated(self, allocated: Mapping[str, Iterable[DeviceId]]) -> bool:
        """The claims the world records as allocated, with their devices: each keeps those no pod or
        shared claim here holds (pinned), and the pins of claims no longer allocated (or allocated
        other devices) go. A world that learns of allocations it did not make (another scheduler's, a
        previous run's) calls this after accounting its pods. Returns whether any pin changed (what
        the nodes offer did: parked workloads should look again)."""
        before = dict(self.pinned)
        wanted = {claim: tuple(devices) for claim, devices in allocated.items()}
        for claim, devices in list(self.pinned.items()):
            if claim not in wanted or not set(devices) <= set(wanted[claim]):
                self.unpin(claim)
        # Taken over by a pod, deallocated since: not to be pinned again when the pod gives it back.
        for claim in {c for taken in self.adopted.values() for c, _ in taken} - wanted.keys():
            self.unpin(claim)
        for claim, devices in wanted.items():
            if claim not in self.shared:
                self.pin(claim, devices)
        self.pinned = {claim: devices for claim, devices in self.pinned.items() if devices}
        return self.pinned != before

    def check(self, allocations: Iterable[Allocation]) -> None:
        """Raises AssertionError unless `in_use` and the shared claims are exactly what `allocations`
        hold: each device held once, by one pod or one claim."""
        held: list[tuple[DeviceId, str]] = []
        users: dict[str, set[str]] = {}
        for alloc in allocations:
            held.extend((d, alloc.pod) for d in alloc.devices)
            for claim in alloc.shared:
                users.setdefault(claim.claim, set()).add(alloc.pod)
                assert self.shared[claim.claim].allocation == claim, f"claim {claim.claim} differs"
        assert users == {k: v.users for k, v in self.shared.items()}, "DRA shared claims"
        held.extend((d, key) for key, entry in self.shared.items() for d in entry.allocation.held)
        held.extend((d, key) for key, devices in self.pinned.items() for d in devices)
        assert dict(held) == self.in_use and len(held) == len(self.in_use), "DRA devices"

    def copy(self) -> DeviceView:
        clone = DeviceView()
        clone.nodes = dict(self.nodes)
        clone.classes = dict(self.classes)
        clone.in_use = dict(self.in_use)
        clone.claims_only = set(self.claims_only)
        clone.shared = {k: SharedClaim(v.allocation, set(v.users)) for k, v in self.shared.items()}
        clone.pinned = dict(self.pinned)
        clone.adopted = dict(self.adopted)
        return clone
