"""What placement answers: where every pod goes, or a structured reason why the workload cannot start."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.fleet.state import MigSlot
from gpufleet.scheduler.placement.dra.result import ClaimAllocation


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """One pod's place: the node (name and row), its whole GPUs or shared GPU, or its MIG instance."""

    pod: str
    pod_set: str
    node: str
    row: int
    gpus: tuple[int, ...] = ()
    milli: int = 0
    mig: MigSlot | None = None
    claims: tuple[ClaimAllocation, ...] = ()
    """DRA: each of the pod's claims with its devices, for the world to write to the claim's status."""


@dataclass(frozen=True, slots=True)
class Domain:
    """A topology domain: its level and readable name (`b1/r3` for rack r3 of block b1, `node-7/nvlink0`)."""

    level: str
    name: str


@dataclass(frozen=True, slots=True)
class TopologyShortfall:
    """Why a topology constraint could not be met: what was needed and the best there is."""

    level: str
    required_gpus: int
    largest_free: Domain | None
    largest_free_gpus: int

    def to_dict(self) -> dict[str, Any]:
        largest = (
            {"name": self.largest_free.name, "freeGpus": self.largest_free_gpus}
            if self.largest_free is not None
            else None
        )
        return {"level": self.level, "requiredGpus": self.required_gpus, "largestFreeDomain": largest}


@dataclass(frozen=True, slots=True)
class NoFit:
    """A workload that cannot be placed now: the "why is my job pending?" answer.

    `filters` counts, per filter, the nodes it rejected for the pod set that could not be placed; the
    counts add up to the fleet's node count minus the nodes that could hold one pod.
    """

    message: str
    pod_set: str | None = None
    filters: dict[str, int] = field(default_factory=dict)
    topology: TopologyShortfall | None = None
    never: bool = False

    def to_reason(self) -> dict[str, Any]:
        """The reason as the status contract spells it (`status.pendingReason`)."""
        reason: dict[str, Any] = {"type": "NoFit", "message": self.message, "filters": dict(self.filters)}
        if self.topology is not None:
            reason["topology"] = self.topology.to_dict()
        if self.pod_set is not None:
            reason["podSet"] = self.pod_set
        return reason


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """Either every placed pod (at least `min_count` per pod set) or a NoFit; never both."""

    workload: str
    placements: tuple[PodPlacement, ...] = ()
    no_fit: NoFit | None = None
    domain: Domain | None = None

    @property
    def placed(self) -> bool:
        return self.no_fit is None

    def counts(self) -> dict[str, int]:
        """Placed pods per pod set."""
        out: dict[str, int] = {}
        for p in self.placements:
            out[p.pod_set] = out.get(p.pod_set, 0) + 1
        return out

    def nodes(self) -> dict[str, str]:
        """Node name per placed pod."""
        return {p.pod: p.node for p in self.placements}
