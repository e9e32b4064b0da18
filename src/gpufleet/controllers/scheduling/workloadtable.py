"""The scheduling controller's workloads by key, with those that may need a node-demand mark.

`growth.write_short_demand` runs after every scheduling pass and used to walk every workload to find
the few that can carry `status.nodeDemand`: an Admitted elastic workload that has checkpointed (only
those can grow), or one that carries a mark to clear. The table keeps that set as workloads are
stored, so the pass looks only at them, in the order a walk of the table would have met them (the
order in which they were first stored, as a dict's), so its writes come in the same order as before.
"""

from __future__ import annotations

import itertools
from collections.abc import ItemsView, Iterator, MutableMapping
from typing import TypeVar, overload

from gpufleet.api.runtime import Workload as WorkloadObject

T = TypeVar("T")


def may_need_mark(obj: WorkloadObject) -> bool:
    """Whether the short-demand pass could write `obj`'s node demand (set it or clear it)."""
    if obj.status.node_demand is not None:
        return obj.status.phase == "Admitted"
    # Only an elastic workload can run short of its pods (a gang that loses one is evicted whole).
    elastic = any(ps.min_count is not None and ps.min_count < ps.count for ps in obj.spec.pod_sets)
    return elastic and obj.status.phase == "Admitted" and obj.spec.last_checkpoint_time is not None


class WorkloadTable(MutableMapping[str, WorkloadObject]):
    """A dict of workloads by key that also indexes those `may_need_mark` holds for."""

    def __init__(self) -> None:
        self._objects: dict[str, WorkloadObject] = {}
        self._marked: dict[str, int] = {}  # key -> when first stored: the walk's order
        self._order: dict[str, int] = {}
        self._stored = itertools.count()

    def __getitem__(self, key: str) -> WorkloadObject:
        return self._objects[key]

    @overload
    def get(self, key: str, /) -> WorkloadObject | None: ...
    @overload
    def get(self, key: str, default: WorkloadObject, /) -> WorkloadObject: ...
    @overload
    def get(self, key: str, default: T, /) -> WorkloadObject | T: ...
    def get(self, key: str, default: object = None, /) -> object:
        # The dict's own lookup: Mapping.get's try/except costs more, and it is called for every event.
        return self._objects.get(key, default)

    def __setitem__(self, key: str, obj: WorkloadObject) -> None:
        if key not in self._objects:
            self._order[key] = next(self._stored)
        self._objects[key] = obj
        if may_need_mark(obj):
            self._marked[key] = self._order[key]
        else:
            self._marked.pop(key, None)

    def __delitem__(self, key: str) -> None:
        del self._objects[key]
        del self._order[key]
        self._marked.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)

    def items(self) -> ItemsView[str, WorkloadObject]:
        return self._objects.items()

    def may_need_marks(self) -> list[tuple[str, WorkloadObject]]:
        """The workloads `may_need_mark` holds for, in the order they were first stored."""
        keys = sorted(self._marked, key=self._marked.__getitem__)
        return [(key, self._objects[key]) for key in keys]
