"""The placement options of every command that runs a scheduler: `--placement` and `--placement-class`.

What the user gives wins over the built-in per-class defaults (docs/scheduling.md decision 20); the
names are checked before anything starts, so a typo is an error naming the option, not a scheduler
that fails later or silently falls back.
"""

from __future__ import annotations

from gpufleet.scheduler.config import DEFAULT_PLACEMENT_BY_CLASS, WORKLOAD_CLASSES, SchedulerConfig

_DEFAULTS = ", ".join(f"{c} {p}" for c, p in DEFAULT_PLACEMENT_BY_CLASS.items())
PLACEMENT_HELP = (
    "One placement scoring policy for every workload class that --placement-class does not name. "
    f"Not given: each class has its built-in default ({_DEFAULTS})."
)
PLACEMENT_CLASS_HELP = (
    f"CLASS=POLICY, repeatable: the policy of one workload class ({', '.join(WORKLOAD_CLASSES)}); "
    "wins over --placement."
)


def scheduler_config(placement: str | None, by_class: list[str] | None) -> SchedulerConfig:
    """The scheduler configuration the options describe; refuses unknown classes and policies."""
    # The policies (and numpy) are imported here, not with the options' help: `gpufleet kube
    # scheduler` asks for its first lists before it imports them.
    from gpufleet.scheduler.policy_choice import placement_choice

    return placement_choice(
        placement, by_class or [], placement_field="--placement", by_class_field="--placement-class"
    )
