"""Reading a user's placement choice (one policy for all classes, CLASS=POLICY per class) into a
SchedulerConfig, with every name checked first: the CLI options and the Helm values say the same thing
and must be refused the same way, naming where the bad name was written."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.api.errors import GpuFleetError, ValidationError
from gpufleet.scheduler.config import WORKLOAD_CLASSES, SchedulerConfig
from gpufleet.scheduler.placement.policies import get_policy


def placement_choice(
    placement: str | None,
    by_class: Iterable[str],
    *,
    placement_field: str,
    by_class_field: str,
    obj: str | None = None,
) -> SchedulerConfig:
    """The configuration `placement` and the `CLASS=POLICY` items describe; refuses unknown classes,
    a class given twice and policies a scheduler cannot run, naming the field they came from."""
    if placement is not None:
        check_policy(placement, field=placement_field, obj=obj)
    chosen: dict[str, str] = {}
    for item in by_class:
        workload_class, sep, policy = (part.strip() for part in item.partition("="))
        if not sep or not workload_class or not policy:
            raise ValidationError(f"{item!r} is not CLASS=POLICY", obj=obj, field=by_class_field)
        if workload_class not in WORKLOAD_CLASSES:
            valid = ", ".join(WORKLOAD_CLASSES)
            raise ValidationError(
                f"unknown workload class {workload_class!r}; valid: {valid}", obj=obj, field=by_class_field
            )
        if workload_class in chosen:
            raise ValidationError(
                f"workload class {workload_class!r} given twice", obj=obj, field=by_class_field
            )
        check_policy(policy, field=by_class_field, obj=obj)
        chosen[workload_class] = policy
    return SchedulerConfig(placement=placement, placement_by_class=chosen)


def check_policy(name: str, *, field: str, obj: str | None = None) -> None:
    """Refuses a policy name a live scheduler cannot build (unknown, or one that needs settings only a
    benchmark gives, such as fgd's typical workload)."""
    try:
        get_policy(name)
    except GpuFleetError as exc:
        raise ValidationError(exc.detail, obj=obj, field=field) from exc
    except ValueError as exc:
        raise ValidationError(
            f"policy {name!r} cannot run in a scheduler: {exc}", obj=obj, field=field
        ) from exc
