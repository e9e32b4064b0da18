"""What DRA allocation answers for one node: the devices each claim gets, or why it cannot have them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.fleet.dra_claims import AllocatedDevice, ClaimAllocation

__all__ = ["AllocatedDevice", "ClaimAllocation", "DraUnsatisfied"]


@dataclass(frozen=True, slots=True)
class DraUnsatisfied:
    """Why a pod's claims cannot be allocated on a node, in the style of `NoFit`: the request that could
    not be met, its class, how many devices it wanted and how many each check turned away."""

    claim: str
    request: str
    device_class: str
    wanted: int
    """Devices the request needs (for All: every matching device, at least one)."""
    rejected: Mapping[str, int] = field(default_factory=dict)
    """Check (`class selector 0`, `request selector 1`, `allocated to other claims`, `shared counters`,
    `matchAttribute gpu.nvidia.com/cliqueId`...) -> how many of the node's devices it turned away."""
    message: str = ""

    def describe(self) -> str:
        counts = ", ".join(f"{n} by {check}" for check, n in self.rejected.items() if n)
        text = f"claim {self.claim} request {self.request} (class {self.device_class}) needs {self.wanted}"
        text += f" device(s): {self.message}" if self.message else " device(s)"
        return f"{text}; rejected {counts}" if counts else text
