"""The node index: node scopes in the order of their quick bounds, kept through a cycle.

Node scopes are not built per search: each queue's kept candidates carry their least `victim_order`
per node, a node's quick bound is the least over the queues with candidates there, and the index keeps
the nodes of the shared lists in bound order, updated only where a list changed since the previous
preemptor (docs/scheduling.md decision 10).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import NamedTuple

from gpufleet.scheduler.cache import Snapshot
from gpufleet.scheduler.preemption.order import LeastOrder
from gpufleet.scheduler.preemption.pool import CandidatePool, PoolPart, least_of_both
from gpufleet.scheduler.preemption.scopes import ScopeEntry, node_entry


def node_heap(parts: Iterable[PoolPart]) -> list[ScopeEntry]:
    """`scopes_of` node by node, as heap entries, from the parts: each node's quick bound combined over the
    queues with candidates there (a least: the same as over the node's candidates together); the scope
    is built, and tested for the GPUs it can free (`falls_short`), only if it comes first in the search (most
    never do; a scope skipped then is one `scopes_of` would have left out)."""
    least: dict[int, LeastOrder] = {}
    where: dict[int, PoolPart | list[PoolPart]] = {}
    for part in parts:
        for node, found in part.least().items():
            have = least.get(node)
            if have is None:
                least[node] = found
                where[node] = part
            else:
                least[node] = least_of_both(have, found)
                other = where[node]
                if isinstance(other, list):
                    other.append(part)
                else:
                    where[node] = [other, part]
    return [node_entry(node, found, where[node]) for node, found in least.items()]


class _Counted(NamedTuple):
    """A part as the index counted it."""

    part: PoolPart
    stamp: int
    """The part's stamp then: another once its candidates are re-timed (their least orders changed)."""


class NodeIndex:
    """The node scopes of the kept parts (`PoolPart.shared`) of the latest search in a cycle, in the order
    of their quick bounds: the next preemptor's pool mostly holds the same parts (the borrowing queues
    of the tree, less the few charged since), so its search updates the nodes of the parts that changed
    instead of bounding and ordering every node again. Per cycle (`Snapshot.memo`)."""

    def __init__(self) -> None:
        self.members: dict[int, _Counted] = {}
        """The parts counted, by id."""
        self.where: dict[int, list[PoolPart]] = {}
        self.least: dict[int, LeastOrder] = {}
        self.entries: dict[int, ScopeEntry] = {}
        self.order: list[ScopeEntry] = []
        """`entries` sorted: the node scopes in the order the search takes them."""

    def update(self, shared: list[PoolPart]) -> None:
        """Makes the index that of `shared`: part by part when few changed, else all again."""
        now = {id(part): part for part in shared}
        members = self.members
        gone = [
            part for key, (part, stamp) in members.items() if now.get(key) is not part or part.stamp != stamp
        ]
        new = [part for key, part in now.items() if key not in members or members[key].stamp != part.stamp]
        if 2 * (len(gone) + len(new)) > len(shared) + len(members):
            self._build(shared)
            return
        touched: set[int] = set()
        for part in gone:
            del members[id(part)]
            for node in part.groups:
                self.where[node].remove(part)
                touched.add(node)
        for part in new:
            members[id(part)] = _Counted(part, part.stamp)
            for node in part.groups:
                self.where.setdefault(node, []).append(part)
                touched.add(node)
        order, entries = self.order, self.entries
        for node in touched:
            old = entries.pop(node, None)
            if old is not None:
                at = bisect.bisect_left(order, old)
                assert order[at] is old
                del order[at]
            where = self.where[node]
            if not where:
                del self.where[node]
                self.least.pop(node, None)
                continue
            entry = entries[node] = node_entry(node, self._least_of(node, where), where)
            bisect.insort(order, entry)

    def _build(self, shared: list[PoolPart]) -> None:
        self.members = {id(part): _Counted(part, part.stamp) for part in shared}
        where: dict[int, list[PoolPart]] = {}
        for part in shared:
            for node in part.groups:
                found = where.get(node)
                if found is None:
                    where[node] = [part]
                else:
                    found.append(part)
        self.where = where
        self.least = {}
        self.entries = {
            node: node_entry(node, self._least_of(node, parts), parts) for node, parts in where.items()
        }
        self.order = sorted(self.entries.values())

    def _least_of(self, node: int, parts: list[PoolPart]) -> LeastOrder:
        least = parts[0].least()[node]
        for part in parts[1:]:
            least = least_of_both(least, part.least()[node])
        self.least[node] = least
        return least

    def overlay(self, own: list[PoolPart]) -> list[ScopeEntry]:
        """The entries of the nodes where this preemptor's own parts (built for it) have candidates: the
        index's parts there and its own, bounded together."""
        least: dict[int, LeastOrder] = {}
        where: dict[int, list[PoolPart]] = {}
        for part in own:
            for node, found in part.least().items():
                have = least.get(node)
                if have is None:
                    have = self.least.get(node)
                    where[node] = [*self.where.get(node, ()), part]
                else:
                    where[node].append(part)
                least[node] = found if have is None else least_of_both(have, found)
        return [node_entry(node, found, where[node]) for node, found in least.items()]


def node_entries(snapshot: Snapshot, pool: CandidatePool) -> tuple[list[ScopeEntry], list[ScopeEntry]]:
    """The node scopes of the pool as (entries in order, a heap of more entries): the first search of a
    cycle bounds every node into the heap; later ones keep the kept parts' nodes in a `NodeIndex` and
    put only the nodes of their own parts in the heap (those nodes are then left out of the order)."""
    index = snapshot.memo.get(NodeIndex)
    if not isinstance(index, NodeIndex):
        snapshot.memo[NodeIndex] = NodeIndex()
        return [], node_heap(pool.parts)
    shared = [part for part in pool.parts if part.shared]
    index.update(shared)
    own = [part for part in pool.parts if not part.shared]
    return index.order, index.overlay(own) if own else []
