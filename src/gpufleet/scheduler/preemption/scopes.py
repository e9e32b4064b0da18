"""Scopes: where a preemptor is tried (one node, one domain of its required topology level, or the
whole fleet), and the entries that order them in the search's heap (docs/scheduling.md decision 10).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.request import GpuKind
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import Snapshot
from gpufleet.scheduler.preemption.order import (
    LOWEST_PRIORITY,
    Candidate,
    LeastOrder,
    SetCost,
    SetRank,
    order_of,
)
from gpufleet.scheduler.preemption.pool import PoolPart, by_node
from gpufleet.scheduler.workload import Workload

IntArray = npt.NDArray[np.int64]


class Scope(NamedTuple):
    """Where a preemptor is tried: one node, one domain of a topology level, or the whole fleet (a
    tuple: thousands are made per search, one per node)."""

    candidates: list[Candidate]
    node: int | None = None
    level_no: int | None = None
    domain: int | None = None

    def rows(self, fleet: FleetState) -> IntArray:
        """The fleet rows the scope covers."""
        if self.node is not None:
            return np.array([self.node], dtype=np.int64)
        every = np.arange(fleet.n_rows, dtype=np.int64)
        if self.level_no is None:
            return every
        inside: IntArray = every[fleet.domain[self.level_no][: fleet.n_rows] == self.domain]
        return inside

    def covers(self, fleet: FleetState, row: int) -> bool:
        if self.node is not None:
            return row == self.node
        return self.level_no is None or int(fleet.domain[self.level_no][row]) == self.domain


def scopes_of(snapshot: Snapshot, preemptor: Workload, pool: Sequence[Candidate]) -> list[Scope]:
    """The candidate lists to try: one per domain of the required level (or per node for one pod), each
    in the pool's order."""
    fleet = snapshot.fleet
    level = scope_level(preemptor)
    if level is None:
        return [Scope(list(pool))]
    level_no = fleet.level_number(level) if level not in ("host", "nvlink") else None
    by_domain: dict[int, list[Candidate]] = {}
    # Per node (host and nvlink levels): whole GPUs the evict candidates hold there (a shrink frees a
    # subset of its workload's evict), for the bound below.
    held: dict[int, int] = {}
    if level_no is None:
        by_domain, held = by_node(pool)
    else:
        domain_of = fleet.domain[level_no]
        for candidate in pool:
            domains = {int(domain_of[node]) for node in candidate.rows}
            domains.discard(-1)
            for domain in domains:
                by_domain.setdefault(domain, []).append(candidate)
    if not by_domain and level_no is None and level in ("host", "nvlink"):
        return []
    needed = one_pod_whole_gpus(preemptor)
    if level_no is None:
        # A node whose free GPUs and its candidates' GPUs together fall short cannot be freed enough:
        # skipping it spares a search that must fail. Shared pods count a whole GPU each, so the bound
        # only ever keeps too many nodes, never too few.
        whole_free = fleet.whole_free
        return [
            Scope(scoped, node=node)
            for node, scoped in sorted(by_domain.items())
            if needed is None or int(whole_free[node]) + held.get(node, 0) >= needed
        ]
    return [Scope(by_domain[d], level_no=level_no, domain=d) for d in sorted(by_domain)]


def scope_level(preemptor: Workload) -> str | None:
    """The level whose domains are the scopes (a one-pod workload: its host), or None: the whole fleet."""
    level = preemptor.topology.required
    if level is None and preemptor.min_pod_count == 1 and len(preemptor.pod_sets) == 1:
        level = "host"
    return level


def falls_short(snapshot: Snapshot, node: int, parts: PoolPart | list[PoolPart], needed: int) -> bool:
    """`scopes_of`' test of a node scope, for one from the pool's parts: whether its free GPUs and its
    candidates' GPUs together fall short of `needed` (the scope is then skipped)."""
    held = parts.held.get(node, 0) if isinstance(parts, PoolPart) else sum(p.held.get(node, 0) for p in parts)
    return int(snapshot.fleet.whole_free[node]) + held < needed


def node_scope(node: int, parts: PoolPart | list[PoolPart]) -> Scope:
    """A node scope from the parts with candidates there: those candidates in victim order."""
    if isinstance(parts, PoolPart):
        return Scope(sorted(parts.groups[node], key=order_of), node=node)
    found = [c for part in parts for c in part.groups[node]]
    return Scope(sorted(found, key=order_of), node=node)


def one_pod_whole_gpus(preemptor: Workload) -> int | None:
    """The GPUs of a one-pod whole-GPU preemptor (None for any other shape)."""
    if len(preemptor.pod_sets) != 1 or preemptor.min_pod_count != 1:
        return None
    request = preemptor.pod_sets[0].request
    return request.gpus if request.kind is GpuKind.WHOLE else None


ScopeEntry = tuple[
    int, int, int, float, int, float, int, tuple[str, ...], int, int, "Scope | PoolPart | list[PoolPart]"
]
"""A scope in the search's heap, in the order the search takes them: its bound (`bound_of`: a
`SetRank`, its parts side by side, since heaps and sorted lists compare entries by the thousand and a
flat tuple compares faster than a nested one, in the same order), then `TIGHT`, `POSITION` and
`SCOPE`, read by those names.

A plain tuple, not a NamedTuple: a search makes one per node with candidates, hundreds, and freed
plain tuples are reused while a NamedTuple is allocated afresh each time, which made the garbage
collector run about a fifth more often in the search (the admission benchmark's preemption cycles
took a tenth longer, their p99 half as long again)."""

TIGHT: Final = 8
"""1 once the bound is the scope's tight one (`Bounds.scope_bound`), else 0."""
POSITION: Final = 9
"""The scope's place among the scopes (a node scope: the node): equal bounds keep that order."""
SCOPE: Final = 10
"""The scope, or for a node scope not built yet the parts with candidates there; never compared, the
position being unique."""


def scope_entry(
    bound: SetRank, *, tight: int, position: int, scope: Scope | PoolPart | list[PoolPart]
) -> ScopeEntry:
    """The entry of a scope with this bound."""
    below_nominal, (evicts, own, lost, priority, newest, victims, names) = bound
    return (below_nominal, evicts, own, lost, priority, newest, victims, names, tight, position, scope)


def node_entry(node: int, least: LeastOrder, parts: PoolPart | list[PoolPart]) -> ScopeEntry:
    """A node scope's entry from its quick bound: its candidates' least victim order as a set of one
    victim that keeps every other queue at nominal (`least_rank`, flat)."""
    evicts, own, lost, priority, newest, names = least
    return (0, evicts, own, lost, priority, newest, 1, names, 0, node, parts)


def bound_of(entry: ScopeEntry) -> SetRank:
    """The bound an entry orders by."""
    below_nominal, evicts, own, lost, priority, newest, victims, names = entry[:TIGHT]
    return SetRank(below_nominal, SetCost(evicts, own, lost, priority, newest, victims, names))


LEAST_BELOW_NOMINAL = SetRank(1, SetCost(0, 0, -math.inf, LOWEST_PRIORITY, -math.inf, 0, ()))
"""The least bound of a set that pushes another queue below its nominal quota."""
