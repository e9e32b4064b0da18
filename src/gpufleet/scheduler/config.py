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

DEFAULT_PLACEMENT_BY_CLASS: Mapping[str, str] = {
    "training": "fgd+",
    "batch": "fgd+",
    "inference": "spread",
}
"""The built-in policy per workload class. Training and batch pack with `fgd+`, which leaves the least
fragmentation of every policy on the FGD benchmark and keeps whole nodes and NVLink domains free for
gangs as well as best fit does (benchmarks/RESULTS.md); inference replicas spread, so that one node's loss
takes few of them."""
DEFAULT_PLACEMENT = "fgd+"
"""The built-in policy of a workload class the table above does not name (a class a newer API added)."""


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

    placement: str | None = None
    """The user's policy for every workload class, except those `placement_by_class` names; None when
    the user gave none (each class then has its built-in default)."""
    placement_by_class: Mapping[str, str] = field(default_factory=dict)
    """The user's policy per workload class; it wins over `placement` and over the built-in defaults."""
    priority_classes: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))
    fair_sharing: FairSharingConfig = field(default_factory=FairSharingConfig)
    seed: int = 0
    max_cycles: int = 100
    """A world that runs to a fixed point gives up (and reports a loop) after this many cycles."""

    def policy_for(self, workload_class: str) -> str:
        """The placement policy name for a workload class. What the user said wins over the built-in
        defaults: the user's policy for the class, else the user's `placement`, else the class's default."""
        named = self.placement_by_class.get(workload_class)
        if named is not None:
            return named
        if self.placement is not None:
            return self.placement
        return DEFAULT_PLACEMENT_BY_CLASS.get(workload_class, DEFAULT_PLACEMENT)

    def policy_names(self) -> tuple[str, ...]:
        """Every policy name in use (one per workload class, and the one for an unknown class), each once."""
        names = [self.policy_for(c) for c in (*WORKLOAD_CLASSES, "")]
        return tuple(dict.fromkeys(names))

    def check_classes(self) -> None:
        """Refuses a class name that is not a workload class (a typo would silently fall back)."""
        for name in self.placement_by_class:
            if name not in WORKLOAD_CLASSES:
                valid = ", ".join(WORKLOAD_CLASSES)
                raise GpuFleetError(
                    f"unknown workload class {name!r}; valid: {valid}", field="placementByClass"
                )
