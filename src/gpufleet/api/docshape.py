"""What a document may hold before it is validated, wherever it comes from (a request body, a file).

A YAML text of a few lines can nest thousands of levels deep (Python's recursion runs out reading or
validating it) or, through aliases, stand for billions of values (walking them never ends), and YAML
and Python's JSON reader take NaN and infinities, which no field holds and no JSON answer can carry.
`check_shape` refuses all of them by walking the document once, without recursion, counting.
"""

from __future__ import annotations

import math
from typing import Any

from gpufleet.api.errors import ValidationError

__all__ = ["MAX_DEPTH", "MAX_VALUES", "ShapeError", "check_shape"]

MAX_DEPTH = 64
"""Levels of nesting; the deepest field of any kind (a pod template's) is far less."""
MAX_VALUES = 200_000
"""Values in one document (scalars, lists and mappings, counted as reached)."""


class ShapeError(ValidationError):
    """A document nested too deep or holding too many values: refused as a whole, before any field."""


def check_shape(doc: Any, where: str | None) -> None:
    """Refuses `doc` (named `where`) if it nests deeper than `MAX_DEPTH` (YAML aliases that refer to
    themselves included), holds more than `MAX_VALUES` values, or holds a NaN or an infinity."""
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    seen = 0
    while stack:
        value, path, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH:
            shown = path if len(path) <= 120 else path[:120] + "..."
            raise ShapeError(f"values are nested more than {MAX_DEPTH} levels deep", obj=where, field=shown)
        if seen > MAX_VALUES:
            raise ShapeError(f"the object holds more than {MAX_VALUES} values", obj=where)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(f"must be a finite number, got {value}", obj=where, field=path or None)
        if isinstance(value, dict):
            stack.extend(
                (child, f"{path}.{key}" if path else str(key), depth + 1) for key, child in value.items()
            )
        elif isinstance(value, list):
            stack.extend((child, f"{path}[{index}]", depth + 1) for index, child in enumerate(value))
