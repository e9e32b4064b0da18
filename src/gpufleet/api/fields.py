"""Annotated field types shared by the kinds: quantities, MIG profile names, priority classes.

MIG profile names are checked for their shape only (`3g.40gb`, `1g.10gb+me`): which profiles exist
depends on the GPU model, and the catalogue lives in `gpufleet.sharing.mig`, which `api` may not
import. The layers that know the pool's GPU model (fleet, controllers) check the profile against the
catalogue; `api` guarantees them a well-formed name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Strict, ValidationInfo, WithJsonSchema

from gpufleet.api.errors import QuantityError
from gpufleet.api.quantity import parse_quantity

_MIG_PROFILE = re.compile(r"^[1-7]g\.[1-9][0-9]*gb(\+me)?$")

DEFAULT_PRIORITY_CLASSES: Mapping[str, int] = MappingProxyType(
    {
        "system-critical": 1_000_000,
        "production-inference": 100_000,
        "production-training": 10_000,
        "research": 1_000,
        "development": 100,
    }
)

# Validation context key holding the priority-class table to check against. Absent: the defaults.
# None: skip the check (objects read back from a store were checked when they were written).
PRIORITY_CLASSES_CONTEXT = "priority_classes"

MAX_GPUS_PER_NODE = 72
"""The most GPUs one node has (a rack-scale NVL72 system seen as one node), so the most one pod asks for."""
MAX_REPLICAS = 100_000
"""The most pods one TrainingJob or InferenceService may ask for: far beyond any fleet, far below what
would overflow the scheduler's arithmetic."""

Count = Annotated[int, Strict()]
"""A number of things (GPUs, replicas): an integer as written, never `true`, `"4"` or `2.0` taken for one."""


def checked_on_write(info: ValidationInfo) -> bool:
    """Whether this validation admits a new write, rather than reading back a stored object.

    Objects read back (validation context with the priority-class table None) were checked when they
    were written; a check added since must not make a stored object unreadable.
    """
    context = info.context or {}
    return not (PRIORITY_CLASSES_CONTEXT in context and context[PRIORITY_CLASSES_CONTEXT] is None)


def _float_quantity_as_text(value: Any) -> Any:
    # `cpu: 1.5` is written back as "1.5": Kubernetes quantities are int-or-string, never float.
    if isinstance(value, float) and not isinstance(value, bool):
        if not math.isfinite(value):  # YAML's .inf and .nan, JSON's Infinity and NaN
            raise ValueError(f"must be a finite quantity, got {value}")
        # Whole and exact (below 2**53) as an integer; else as text, "1e+30" rather than 31 digits.
        return int(value) if value.is_integer() and abs(value) < 2**53 else format(value, "g")
    return value


def _check_quantity(value: int | str) -> int | str:
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(exc.detail) from exc  # pydantic reports ValueErrors with the field path
    return value


def _check_mig_profile(value: str) -> str:
    if not _MIG_PROFILE.fullmatch(value):
        raise ValueError(f"{value!r} is not a MIG profile name such as 3g.40gb or 1g.10gb+me")
    return value


def _check_priority_class(value: str, info: ValidationInfo) -> str:
    context = info.context or {}
    table = context.get(PRIORITY_CLASSES_CONTEXT, DEFAULT_PRIORITY_CLASSES)
    if table is not None and value not in table:
        known = ", ".join(sorted(table, key=lambda name: -table[name]))
        raise ValueError(f"unknown priority class {value!r} (known: {known})")
    return value


Quantity = Annotated[
    int | str,
    BeforeValidator(_float_quantity_as_text),
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
    ),
]
"""A Kubernetes quantity (`32`, `500m`, `256Gi`) kept as written; convert with `gpufleet.api.quantity`."""

MigProfileName = Annotated[
    str,
    AfterValidator(_check_mig_profile),
    WithJsonSchema({"type": "string", "pattern": _MIG_PROFILE.pattern}),
]
"""A MIG profile name, checked for shape only (see the module docstring)."""

PriorityClassName = Annotated[str, AfterValidator(_check_priority_class)]
"""A priority class name that must be in the configured table (validation context)."""


def priority_value(name: str | None, table: Mapping[str, int] = DEFAULT_PRIORITY_CLASSES) -> int:
    """The integer priority of a class name; no class means priority 0."""
    if name is None:
        return 0
    return table[name]
