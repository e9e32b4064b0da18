"""What a ResourceClaim was allocated, as the scheduling view keeps it: the devices, the node they are
reachable from, and the drivers' configuration (`status.allocation` in the core's terms).

It lives in `fleet/` because the fleet's device view holds the allocations of shared claims (a named
ResourceClaim used by several pods is allocated once and held while any of them runs); the allocator in
`scheduler/placement/dra` makes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.api.dra_claims import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
)
from gpufleet.api.dra_devices import NodeSelector
from gpufleet.fleet.devices import DeviceId, pinned_to


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """One claim's allocation on the node: what is written to its `status.allocation`."""

    claim: str
    """`namespace/name` of the claim."""
    devices: tuple[AllocatedDevice, ...]
    node_selector: NodeSelector
    config: tuple[DeviceAllocationConfiguration, ...] = ()
    node: str = ""
    """The node the devices are local to (the allocation is pinned to it)."""

    @property
    def held(self) -> tuple[DeviceId, ...]:
        """The devices the claim takes: all but those given for admin access, which take nothing."""
        return tuple(d.id for d in self.devices if not d.admin_access)

    def to_status(self) -> AllocationResult:
        return AllocationResult(
            devices=DeviceAllocationResult(
                results=[
                    DeviceRequestAllocationResult(
                        request=d.request,
                        driver=d.driver,
                        pool=d.pool,
                        device=d.device,
                        admin_access=True if d.admin_access else None,
                    )
                    for d in self.devices
                ],
                config=list(self.config),
            ),
            node_selector=self.node_selector,
        )

    @classmethod
    def from_status(cls, claim: str, node: str, allocation: AllocationResult) -> ClaimAllocation:
        """A stored claim's `status.allocation` read back (after a restart, or one allocated before)."""
        return cls(
            claim=claim,
            devices=tuple(
                AllocatedDevice(r.request, r.driver, r.pool, r.device, bool(r.admin_access))
                for r in allocation.devices.results
            ),
            node_selector=allocation.node_selector or pinned_to(node),
            config=tuple(allocation.devices.config),
            node=node,
        )
