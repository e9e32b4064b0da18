"""Placement: filters, scores, gangs and topology.

The cycle calls `place_workload`; preemption and what-if code use `Statement` (scheduler/statement.py)
together with it. Everything else here is a piece of that one call.
"""

from gpufleet.scheduler.placement.place import demands_of, place_workload
from gpufleet.scheduler.placement.result import (
    Domain,
    NoFit,
    PlacementResult,
    PodPlacement,
    TopologyShortfall,
)

__all__ = [
    "Domain",
    "NoFit",
    "PlacementResult",
    "PodPlacement",
    "TopologyShortfall",
    "demands_of",
    "place_workload",
]
