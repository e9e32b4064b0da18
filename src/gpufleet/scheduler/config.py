"""The scheduler's configuration: placement policies, priority classes and fair-sharing parameters.

Resolved once when a scheduler is built (kube-scheduler's lesson: no per-call configuration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.fields import DEFAULT_PRIORITY_CLASSES

WORKLOAD_CLASSES: tuple[str, ...] = ("training", "inference", "batch")
"""The kinds of workload a placement policy can be chosen for (a Workload's `spec.workloadClass`)."""

DEFAULT_PLACEMENT = "bestfit"
DEFAULT_PLACEMENT_BY_CLASS: Mapping[str, str] = {"inference": "spread"}
"""Inference replicas spread (one node's loss takes few of them); the other classes use `placement`,
a packing policy, so that whole nodes and NVLink domains stay free for gangs."""


@dataclass(frozen=True, slots=True)
class FairSharingConfig:
    """How queues and users are ordered after priority.

    `half_life_seconds`: decay of historical usage (0 turns history off, leaving only current borrowing).
    `history_weight`: how much one unit of decayed historical share counts against one unit of current
    borrowed share.
    """

    half_life_seconds: float = 3600.0
    history_weight: float = 1.0


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Everything a scheduler is built from; every field has the documented default."""

    placement: str = DEFAULT_PLACEMENT
    """The policy of every workload class that `placement_by_class` does not name (training, batch)."""
    placement_by_class: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PLACEMENT_BY_CLASS))
    """Per workload class, its own policy (ARCHITECTURE.md: training packs, inference spreads)."""
    priority_classes: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))
    fair_sharing: FairSharingConfig = field(default_factory=FairSharingConfig)
    seed: int = 0
    max_cycles: int = 100
    """A world that runs to a fixed point gives up (and reports a loop) after this many cycles."""

    def policy_for(self, workload_class: str) -> str:
        """The placement policy name for a workload class (unknown classes get `placement`)."""
        return self.placement_by_class.get(workload_class, self.placement)

    def policy_names(self) -> tuple[str, ...]:
        """Every policy name in use, `placement` first, each once."""
        names = [self.placement, *(self.placement_by_class[c] for c in sorted(self.placement_by_class))]
        return tuple(dict.fromkeys(names))

    def check_classes(self) -> None:
        """Refuses a class name that is not a workload class (a typo would silently fall back)."""
        for name in self.placement_by_class:
            if name not in WORKLOAD_CLASSES:
                valid = ", ".join(WORKLOAD_CLASSES)
                raise GpuFleetError(
                    f"unknown workload class {name!r}; valid: {valid}", field="placementByClass"
                )
