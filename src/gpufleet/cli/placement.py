"""The placement options of every command that runs a scheduler: `--placement` and `--placement-class`.

What the user gives wins over the built-in per-class defaults (docs/scheduling.md decision 20); the
names are checked before anything starts, so a typo is an error naming the option, not a scheduler
that fails later or silently falls back.
"""

from __future__ import annotations

from gpufleet.api.errors import GpuFleetError, ValidationError
from gpufleet.scheduler.config import DEFAULT_PLACEMENT_BY_CLASS, WORKLOAD_CLASSES, SchedulerConfig
from gpufleet.scheduler.placement.scoring import get_policy

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
    if placement is not None:
        _check_policy(placement, "--placement")
    chosen: dict[str, str] = {}
    for item in by_class or []:
        workload_class, sep, policy = (part.strip() for part in item.partition("="))
        if not sep or not workload_class or not policy:
            raise ValidationError(f"{item!r} is not CLASS=POLICY", field="--placement-class")
        if workload_class not in WORKLOAD_CLASSES:
            valid = ", ".join(WORKLOAD_CLASSES)
            raise ValidationError(
                f"unknown workload class {workload_class!r}; valid: {valid}", field="--placement-class"
            )
        if workload_class in chosen:
            raise ValidationError(f"workload class {workload_class!r} given twice", field="--placement-class")
        _check_policy(policy, "--placement-class")
        chosen[workload_class] = policy
    return SchedulerConfig(placement=placement, placement_by_class=chosen)


def _check_policy(name: str, option: str) -> None:
    try:
        get_policy(name)
    except GpuFleetError as exc:
        raise ValidationError(exc.detail, field=option) from exc
    except ValueError as exc:  # a policy that needs settings a live scheduler cannot give (fgd's workload)
        raise ValidationError(f"policy {name!r} cannot run in a scheduler: {exc}", field=option) from exc
