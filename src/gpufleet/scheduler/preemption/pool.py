"""The candidate pool: a queue's candidates in victim order and grouped per node, and a preemptor's
candidates over all its queues, merged only as far as the search reads them.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from gpufleet.scheduler.preemption.order import (
    WITHIN_QUEUE,
    Candidate,
    LeastOrder,
    VictimOrder,
    least_order,
    order_of,
)


class PoolPart:
    """One queue's candidates as preemptors take them whole: in victim order, and grouped per node for
    the node-by-node search. Kept with the queue's candidate list: the groups for as long as the list
    holds, the order and the per-node least orders until the list is re-timed (`retimed`)."""

    __slots__ = (
        "_evicts",
        "_first",
        "_flavors",
        "_least",
        "_milli",
        "_ordered",
        "groups",
        "held",
        "kept",
        "shared",
        "stamp",
    )

    def __init__(self, kept: list[Candidate], *, shared: bool = False) -> None:
        self.kept = kept
        self.shared = shared
        """Kept with its queue's list (the same object for every preemptor while the list holds), not
        built for one preemptor."""
        self.stamp = 0
        """Counts re-timings: a node index that saw this part at another stamp saw other least orders."""
        groups, held = by_node(kept)
        self.groups = groups
        """Per node the candidates touch: those candidates (in the kept list's order)."""
        self.held = held
        """Per node: the whole GPUs the evict candidates hold there."""
        self._ordered: list[Candidate] | None = None
        self._first: Candidate | None = None
        self._least: dict[int, LeastOrder] | None = None
        self._milli: dict[str, int] = {}
        self._evicts: bool | None = None
        self._flavors: set[frozenset[str]] | None = None

    def retimed(self) -> None:
        """The candidates' lost work changed: their order and least orders are computed again."""
        self._ordered = None
        self._first = None
        self._least = None
        self.stamp += 1

    @property
    def ordered(self) -> list[Candidate]:
        found = self._ordered
        if found is None:
            found = self._ordered = sorted(self.kept, key=order_of)
        return found

    @property
    def first(self) -> Candidate:
        """`ordered[0]`, without sorting when the order is not known yet (a search mostly reads no more
        of a part than its first)."""
        if self._ordered is not None:
            return self._ordered[0]
        found = self._first
        if found is None:
            found = self._first = min(self.kept, key=order_of)
        return found

    def meets(self, flavors: set[str]) -> bool:
        """Whether every candidate holds one of `flavors` (the flavor filter leaves none out)."""
        held = self._flavors
        if held is None:
            held = self._flavors = {frozenset(c.admitted.assignment.usage) for c in self.kept}
        return all(not flavors.isdisjoint(f) for f in held)

    def milli(self, flavor: str) -> int:
        """The milli-GPU of `flavor` its evict candidates hold."""
        found = self._milli.get(flavor)
        if found is None:
            found = self._milli[flavor] = sum(
                c.admitted.assignment.usage.get(flavor, 0) for c in self.kept if c.kind == "evict"
            )
        return found

    @property
    def evicts_only(self) -> bool:
        """Whether every candidate is an evict from another queue (no shrink, nothing within the queue)."""
        found = self._evicts
        if found is None:
            found = self._evicts = all(c.kind == "evict" and c.cause != WITHIN_QUEUE for c in self.kept)
        return found

    def least(self) -> dict[int, LeastOrder]:
        """Per node: the least `victim_order` of this queue's candidates there, part by part (a shrink
        counted with no lost work)."""
        found = self._least
        if found is None:
            found = self._least = {node: least_order(group) for node, group in self.groups.items()}
        return found


def least_of_both(a: LeastOrder, b: LeastOrder) -> LeastOrder:
    """Part by part the lesser of two least orders: that of their candidates together."""
    return (
        a[0] if a[0] <= b[0] else b[0],
        a[1] if a[1] <= b[1] else b[1],
        a[2] if a[2] <= b[2] else b[2],
        a[3] if a[3] <= b[3] else b[3],
        a[4] if a[4] <= b[4] else b[4],
        a[5] if a[5] <= b[5] else b[5],
    )


_SCANS = 4
"""Candidates `CandidatePool.in_order` finds by a scan of the parts' heads before it merges by a heap."""


class CandidatePool(Sequence[Candidate]):
    """A preemptor's candidates in `victim_order`: the parts (one per queue, each in that order) merged
    only when read whole; `quota_feasible` reads a prefix and the node-by-node search the parts'
    groups, so most searches never sort the whole pool."""

    def __init__(self, parts: list[PoolPart]) -> None:
        self.parts = parts
        self._size = sum(len(part.kept) for part in parts)
        self._items: list[Candidate] | None = None

    def items(self) -> list[Candidate]:
        found = self._items
        if found is None:
            # The order's last part is the name: no two candidates tie, so the merge is the one order.
            found = self._items = sorted(
                itertools.chain.from_iterable(p.ordered for p in self.parts), key=order_of
            )
        return found

    def in_order(self) -> Iterator[Candidate]:
        """The candidates in order, merged lazily (a reader that stops early sorts nothing)."""
        if self._items is not None:
            return iter(self._items)
        if len(self.parts) == 1:
            return iter(self.parts[0].ordered)
        return self._merged()

    def head(self, n: int) -> list[Candidate]:
        """The first `n` candidates in order: a heap over the parts' firsts, a part sorted only once its
        first is taken (no part is copied, unlike the merge of `in_order` past its first few)."""
        if self._items is not None:
            return self._items[:n]
        parts = self.parts
        heap = [(order_of(part.first), j, 0) for j, part in enumerate(parts) if part.kept]
        heapq.heapify(heap)
        out: list[Candidate] = []
        while heap and len(out) < n:
            _, j, i = heapq.heappop(heap)
            ordered = parts[j].ordered
            out.append(ordered[i])
            if i + 1 < len(ordered):
                heapq.heappush(heap, (order_of(ordered[i + 1]), j, i + 1))
        return out

    def _merged(self) -> Iterator[Candidate]:
        """The parts merged: the first few by scanning the parts' heads (`quota_feasible` mostly stops
        after the first evict, and a heap over hundreds of parts costs more to set up than a scan; a
        part is sorted only once its first is taken), the rest by a heap."""
        parts = self.parts
        heads: list[Candidate | None] = [part.first for part in parts]
        taken = [0] * len(parts)
        for _ in range(_SCANS):
            least: VictimOrder | None = None
            where = -1
            for j, head in enumerate(heads):
                if head is not None:
                    key = order_of(head)
                    if least is None or key < least:
                        least, where = key, j
            if least is None:
                return
            found = heads[where]
            assert found is not None
            yield found
            taken[where] += 1
            ordered = parts[where].ordered
            heads[where] = ordered[taken[where]] if taken[where] < len(ordered) else None
        yield from heapq.merge(*(part.ordered[taken[j] :] for j, part in enumerate(parts)), key=order_of)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.items())

    @overload
    def __getitem__(self, index: int) -> Candidate: ...
    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...
    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        return self.items()[index]


def by_node(candidates: Iterable[Candidate]) -> tuple[dict[int, list[Candidate]], dict[int, int]]:
    """Per node the candidates touch: those candidates (in the given order), and the whole GPUs they
    hold there (a shrink holds nothing for the bound: its `held` is empty, so zip stops at once)."""
    groups: dict[int, list[Candidate]] = {}
    held: dict[int, int] = {}
    for candidate in candidates:
        for node in candidate.rows:
            group = groups.get(node)
            if group is None:
                groups[node] = [candidate]
            else:
                group.append(candidate)
        for node, gpus in zip(candidate.rows, candidate.held, strict=False):
            held[node] = held.get(node, 0) + gpus
    return groups, held
