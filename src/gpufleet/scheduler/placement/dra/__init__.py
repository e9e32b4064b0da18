"""Dynamic Resource Allocation: matching a pod's ResourceClaims with the devices of a node's
ResourceSlices (CEL selectors, allocation modes, matchAttribute constraints, shared counters).

Pure like the rest of the core: the worlds hand it slices, classes and claims, and write back the
`ClaimAllocation`s it returns. docs/dra.md describes what exists and what is left.
"""

from gpufleet.scheduler.placement.dra.allocate import (
    ADMIN_ACCESS_LABEL,
    PodClaim,
    allocate_claims,
    attribute_value,
)
from gpufleet.scheduler.placement.dra.cel import CelSelectorError, SelectorCache, evaluate_selector
from gpufleet.scheduler.placement.dra.demand import ClaimDemand, claim_demand, with_claims
from gpufleet.scheduler.placement.dra.nodes import FILTER_NAME, DraFilterResult, filter_nodes
from gpufleet.scheduler.placement.dra.result import AllocatedDevice, ClaimAllocation, DraUnsatisfied

__all__ = [
    "ADMIN_ACCESS_LABEL",
    "FILTER_NAME",
    "AllocatedDevice",
    "CelSelectorError",
    "ClaimAllocation",
    "ClaimDemand",
    "DraFilterResult",
    "DraUnsatisfied",
    "PodClaim",
    "SelectorCache",
    "allocate_claims",
    "attribute_value",
    "claim_demand",
    "evaluate_selector",
    "filter_nodes",
    "with_claims",
]
