"""The scheduler's configuration: placement policy, priority classes and fair-sharing parameters.

Resolved once when a scheduler is built (kube-scheduler's lesson: no per-call configuration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.api.fields import DEFAULT_PRIORITY_CLASSES


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

    placement: str = "bestfit"
    priority_classes: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))
    fair_sharing: FairSharingConfig = field(default_factory=FairSharingConfig)
    seed: int = 0
    max_cycles: int = 100
    """A world that runs to a fixed point gives up (and reports a loop) after this many cycles."""
