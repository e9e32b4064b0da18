"""Bounds: no set of a scope ranks below its bound (`SetRank`: decision 8, then `VictimSet.cost`, part
by part at its least), so scopes are searched cheapest first and the search stops at the best set found.

Two bounds (docs/scheduling.md decision 10): a quick one from the candidates' own `victim_order` for
every scope, and a tight one, dearer, only for a scope that comes first by the quick one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from gpufleet.scheduler.preemption.options import Options
from gpufleet.scheduler.preemption.order import (
    WITHIN_QUEUE,
    Candidate,
    SetRank,
    least_order,
    least_rank,
    order_of,
)
from gpufleet.scheduler.preemption.pool import PoolPart
from gpufleet.scheduler.preemption.scopes import Scope


class _OptionCost(NamedTuple):
    """One option of a candidate (its evict, or one of its shrink's steps) as the tight bound reads it:
    what it costs alone and the GPUs it frees."""

    flags: tuple[int, int, int]
    """The first three parts of a `SetRank` for this way alone: (pushes its queue below nominal,
    evicts, own queue), each 0/1; indexed by part, as the bound goes through them in turn."""
    lost_gpu_seconds: float
    gains: dict[int, int]
    """Whole GPUs freed per node."""
    newest: float
    priority: int


class _OptionHere(NamedTuple):
    """A `_OptionCost` on one node: the GPUs it frees there."""

    flags: tuple[int, int, int]
    lost_gpu_seconds: float
    gpus: int
    newest: float
    priority: int


def quick_bound(scoped: Sequence[Candidate]) -> SetRank:
    """A lower bound of any set of `scoped`, cheap: each part of `victim_order` at its least over the
    candidates (a shrink may take one pod only: no lost work), any set possibly at nominal."""
    return least_rank(least_order(scoped))


class Bounds:
    """Lower bounds of the sets a scope can give, for one preemptor in one snapshot state: the search
    takes scopes cheapest first by them and stops once no remaining scope can beat its best set."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.snapshot = options.snapshot
        self.flavors = options.flavors
        self.shape = options.shape
        self.code = options.code
        self._room_anywhere: bool | None = None
        self._costs: dict[int, list[_OptionCost]] = {}
        """`_option_costs` per candidate (by id: the pool's candidates live as long as the search)."""

    def scope_bound(self, scope: Scope) -> SetRank:
        """A lower bound of the cost of any set the scope's exact search can give: for a node scope of a
        whole-GPU preemptor, `_node_bound` (its sets must free enough GPUs on that node), else
        `lower_bound` (each part of the cost at its least over the scope's candidates)."""
        node, shape, code = scope.node, self.shape, self.code
        if node is not None and shape is not None and code is not None and self._capacity_bound:
            fleet = self.snapshot.fleet
            if int(fleet.model[node]) == code:
                size, needed = shape
                found = self._node_bound(scope.candidates, node, needed * size - int(fleet.whole_free[node]))
                if found is not None:
                    return found
        return self.lower_bound(scope.candidates)

    def _node_bound(self, scoped: Sequence[Candidate], node: int, deficit: int) -> SetRank | None:
        """The cost bound of the sets that free `deficit` whole GPUs on `node`, part by part: each part
        at its least over the options left by the parts before it (a set that keeps every other queue at
        nominal uses only options that each keep their queue there; a shrink-only set only shrinks; ...),
        lost work by a knapsack over GPUs freed on the node (one option per workload, <= 8 GPUs a node).
        None when no set can free that much there (the scope is then bounded as before) or the node
        already has room (capacity is then no constraint)."""
        if deficit <= 0:
            return None
        # Per workload, its options that free GPUs here.
        groups: dict[int, list[_OptionHere]] = {}
        known = self._costs
        for candidate in scoped:
            costs = known.get(id(candidate))
            if costs is None:
                costs = known[id(candidate)] = self._option_costs(candidate)
            for flags, lost, gains, newest, priority in costs:
                gain = gains.get(node, 0)
                if gain > 0:
                    key = id(candidate.admitted)
                    options = groups.get(key)
                    item = _OptionHere(flags, lost, gain, newest, priority)
                    if options is None:
                        groups[key] = [item]
                    else:
                        options.append(item)
        pool = list(groups.values())

        def enough(part: int, value: int) -> bool:
            total = 0
            for options in pool:
                most = 0
                for o in options:
                    if o.flags[part] <= value and o.gpus > most:
                        most = o.gpus
                total += most
                if total >= deficit:
                    return True
            return False

        if not enough(0, 1):
            return None
        bound: list[int] = []
        for part in (0, 1, 2):
            if enough(part, 0):
                bound.append(0)
                pool = [kept for options in pool if (kept := [o for o in options if o.flags[part] == 0])]
            else:
                bound.append(1)
        # Least lost work over sets of the remaining options that free the deficit: best[g] = least lost
        # work freeing at least g GPUs (capped at the deficit).
        inf = float("inf")
        best = [0.0] + [inf] * deficit
        for options in pool:
            nxt = list(best)
            for option in options:
                gain, lost = option.gpus, option.lost_gpu_seconds
                for g in range(deficit + 1):
                    have = best[g]
                    if have != inf:
                        t = g + gain if g + gain < deficit else deficit
                        if have + lost < nxt[t]:
                            nxt[t] = have + lost
            best = nxt
        lost = best[deficit]
        lost -= 1e-9 * abs(lost)  # sums in another order may round differently: stay below
        priority = min(o.priority for options in pool for o in options)
        newest = min(o.newest for options in pool for o in options)
        # A set may also take workloads that free nothing here (for quota): names over the whole scope.
        first = min(c.name for c in scoped)
        return least_rank((bound[1], bound[2], lost, priority, newest, (first,)), bound[0])

    def lower_bound(self, scoped: Sequence[Candidate]) -> SetRank:
        """No set from these candidates costs less: each part of `VictimSet.cost` at its least (the
        newest admission bounds "newer"; the first name bounds the sorted names), so scopes that tie
        on everything but names are searched only while their names could still win."""
        # A set keeps every other queue at nominal only if each of its victims alone does.
        keeps = any(c.cause == WITHIN_QUEUE or self._least_keeps_nominal(c) for c in scoped)
        return least_rank(least_order(scoped, self._first_pod_lost), 0 if keeps else 1)

    def _first_pod_lost(self, shrink: Candidate) -> float:
        """The lost work of the cheapest shrink of a workload: its first pod only."""
        return self.options.shrink_steps(shrink)[0].lost_gpu_seconds

    @property
    def capacity_bound(self) -> bool:
        """`_capacity_bound`, for a one-pod whole-GPU preemptor: whether no node has room for it now."""
        return self.shape is not None and self.code is not None and self._capacity_bound

    @property
    def _capacity_bound(self) -> bool:
        """Whether no node of the preemptor's GPU model has room for it now: a set that lets it fit must
        then free GPUs on the node it goes to (else quota alone may be what a set frees)."""
        room = self._room_anywhere
        if room is None:
            fleet = self.snapshot.fleet
            assert self.shape is not None and self.code is not None
            size, needed = self.shape
            rows = slice(0, fleet.n_rows)
            free = fleet.whole_free[rows][fleet.model[rows] == self.code]
            room = self._room_anywhere = bool(free.size) and int(np.max(free)) >= size * needed
        return not room

    def _option_costs(self, candidate: Candidate) -> list[_OptionCost]:
        """The options of `candidate`: its evict, or its shrink's steps."""
        steps = self.options.shrink_steps(candidate) if candidate.kind == "shrink" else [candidate]
        out = []
        for step in steps:
            if step.kind == "evict":
                gains = dict(zip(step.rows, step.held, strict=True))
            else:
                gains = self.options.option(step).gpus
            evicts, own, lost, priority, newest, _ = order_of(step)
            below = 0 if step.cause == WITHIN_QUEUE or self._keeps_nominal_alone(step) else 1
            out.append(_OptionCost((below, evicts, own), lost, gains, newest, priority))
        return out

    def _keeps_nominal_alone(self, candidate: Candidate) -> bool:
        """Whether taking `candidate` (as it is: a shrink step or an evict) alone leaves its queue at or
        above its nominal quota."""
        if candidate.kind == "shrink":
            amounts: Mapping[str, int] = self.options.option(candidate).amounts
        else:
            amounts = candidate.admitted.assignment.usage
        room = self.options.room_of(candidate.admitted.queue)
        return all(amounts.get(flavor, 0) <= above for flavor, above in room.items())

    def below_nominal(self, node: int, parts: PoolPart | list[PoolPart]) -> bool:
        """Whether no candidate of these parts (kept lists of other queues) on `node` keeps its queue at
        nominal when taken alone: then every set of them pushes a queue below nominal, and the node's
        scope has a tight bound that starts with 1 (`_node_bound`, `lower_bound`). False when unsure (a
        part built for one preemptor, or with shrinks, which give up less than their workload)."""
        for part in parts if isinstance(parts, list) else (parts,):
            if not part.shared or not part.evicts_only:
                return False
            group = part.groups[node]
            room = self.options.room_of(group[0].admitted.queue)
            for flavor, above in room.items():
                if all(c.admitted.assignment.usage.get(flavor, 0) > above for c in group):
                    break  # each gives up more of this flavor than its queue has above nominal
            else:
                return False
        return True

    def _least_keeps_nominal(self, candidate: Candidate) -> bool:
        """Whether taking the least of `candidate` (its first pod, for a shrink) leaves its queue at or
        above its nominal quota."""
        if candidate.kind == "shrink":
            amounts: Mapping[str, int] = self.options.option(self.options.shrink_steps(candidate)[0]).amounts
        else:
            amounts = candidate.admitted.assignment.usage
        room = self.options.room_of(candidate.admitted.queue)
        return all(amounts.get(flavor, 0) <= above for flavor, above in room.items())
