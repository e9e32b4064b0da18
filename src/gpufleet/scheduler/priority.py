"""Priority classes: names users write, integers the scheduler compares.

The defaults are ARCHITECTURE.md's five classes (held by `gpufleet.api.fields` so that validation and
the scheduler agree); a deployment may replace the table through the scheduler configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gpufleet.api.errors import ValidationError
from gpufleet.api.fields import DEFAULT_PRIORITY_CLASSES


class PriorityClasses:
    """A name -> priority table; a workload naming no class gets priority 0."""

    def __init__(self, table: Mapping[str, int] = DEFAULT_PRIORITY_CLASSES) -> None:
        self.table: Mapping[str, int] = MappingProxyType(dict(table))

    def value(self, name: str | None, *, obj: str = "workload", field: str = "priorityClass") -> int:
        if name is None:
            return 0
        found = self.table.get(name)
        if found is None:
            known = ", ".join(sorted(self.table, key=lambda n: -self.table[n]))
            raise ValidationError(f"unknown priority class {name!r} (known: {known})", obj=obj, field=field)
        return found

    def name_of(self, priority: int) -> str | None:
        """The class with exactly this priority, for messages; None when there is none."""
        for name, value in self.table.items():
            if value == priority:
                return name
        return None
