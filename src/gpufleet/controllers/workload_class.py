"""A workload's class, decided here for both worlds.

The class picks the placement policy (`SchedulerConfig.policy_for`; by default training and batch pack,
inference spreads). What owns a workload decides first: a TrainingJob's workers are `training` and an
InferenceService's replicas `inference`, whatever else they carry, because the operator made them
from what the owner says it is. Anything else (a plain Pod, a Job's pods, a Workload submitted as it
is) states its own class: in Kubernetes with the `gpufleet.io/workload-class` label or annotation, in
the embedded world with `spec.workloadClass`. A workload that states none is `batch`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import cast

from gpufleet.api.errors import ValidationError
from gpufleet.api.runtime import WorkloadClass
from gpufleet.scheduler.config import WORKLOAD_CLASSES

OWNER_CLASSES: Mapping[str, WorkloadClass] = MappingProxyType(
    {"TrainingJob": "training", "InferenceService": "inference"}
)
"""The class of a workload owned by a gpufleet object of this kind."""

DEFAULT_CLASS: WorkloadClass = "batch"


def workload_class(
    owner_kinds: Iterable[str],
    stated: str | None = None,
    *,
    obj: str | None = None,
    field: str | None = None,
) -> WorkloadClass:
    """The class of a workload owned by gpufleet objects of `owner_kinds` that states `stated` (None
    when it states none). A stated value that is no class is refused naming `obj` and `field`, since a
    typo would otherwise place the workload under another class's policy without a word."""
    for kind in owner_kinds:
        owned = OWNER_CLASSES.get(kind)
        if owned is not None:
            return owned
    if stated is None:
        return DEFAULT_CLASS
    if stated not in WORKLOAD_CLASSES:
        valid = ", ".join(WORKLOAD_CLASSES)
        raise ValidationError(f"unknown workload class {stated!r}; valid: {valid}", obj=obj, field=field)
    return cast(WorkloadClass, stated)
