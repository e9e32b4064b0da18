"""Feasibility: cheap necessary conditions that spare a search that must fail. Before any search,
whether quota and the fleet's GPUs could ever let the preemptor fit; during the exact search, whether
a branch can still free enough slots of the preemptor's pod size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.fleet.request import GpuKind
from gpufleet.scheduler.cache import Admitted, Snapshot
from gpufleet.scheduler.flavors import Assignment, split_flavor
from gpufleet.scheduler.preemption.options import Option, Options
from gpufleet.scheduler.preemption.order import Candidate
from gpufleet.scheduler.preemption.pool import CandidatePool
from gpufleet.scheduler.preemption.scopes import Scope
from gpufleet.scheduler.workload import Workload


class Capacity:
    """A necessary condition for placement during the exact search: enough free slots of the preemptor's
    pod size on the scope's nodes of its GPU model (whole GPUs per node, free plus freed)."""

    def __init__(
        self,
        size: int,
        needed: int,
        free: dict[int, int],
        slots: int,
        gpus: int,
        suffix: list[int],
    ) -> None:
        self.size = size
        self.needed = needed
        self.free = free
        self.freed: dict[int, int] = {}
        self.slots = slots
        self.gpus = gpus
        self.suffix = suffix
        """Per unit index, the most GPUs in scope the units from there on can free (by eviction)."""

    @classmethod
    def of(cls, options: Options, scope: Scope, units: list[list[Option]]) -> Capacity:
        shape = options.shape
        if shape is None or options.code is None:
            return _Unbounded()
        fleet = options.snapshot.fleet
        code = options.code
        size, needed = shape
        # Free GPUs of the nodes the options touch, for the changes; the scope's totals from the arrays.
        touched = {node for options in units for option in options for node in option.gpus}
        free = {
            node: int(fleet.whole_free[node])
            for node in touched
            if int(fleet.model[node]) == code and scope.covers(fleet, node)
        }
        if scope.node is not None:
            whole = free.get(scope.node)
            if whole is None:
                whole = int(fleet.whole_free[scope.node]) if int(fleet.model[scope.node]) == code else 0
            slots, gpus = whole // size, whole
        else:
            rows = scope.rows(fleet)
            array = fleet.whole_free[rows[fleet.model[rows] == code]]
            slots, gpus = int(np.sum(array // size)), int(np.sum(array))
        suffix = [0] * (len(units) + 1)
        for i in range(len(units) - 1, -1, -1):
            most = max(sum(g for node, g in o.gpus.items() if node in free) for o in units[i])
            suffix[i] = suffix[i + 1] + most
        return cls(size, needed, free, slots, gpus, suffix)

    def enough(self) -> bool:
        return self.slots >= self.needed

    def reachable(self, i: int) -> bool:
        return self.gpus + self.suffix[i] >= self.needed * self.size

    def take(self, option: Option, sign: int) -> None:
        free, freed, size = self.free, self.freed, self.size
        for node, gpus in option.gpus.items():
            base = free.get(node)
            if base is None:
                continue
            old = freed.get(node, 0)
            new = old + sign * gpus
            freed[node] = new
            self.slots += (base + new) // size - (base + old) // size
            self.gpus += sign * gpus


class _Unbounded(Capacity):
    """No capacity bound (shared or MIG pods): quota alone stops a branch."""

    def __init__(self) -> None:
        super().__init__(1, 0, {}, 0, 0, [])

    def reachable(self, i: int) -> bool:
        return True

    def take(self, option: Option, sign: int) -> None:
        return None


def quota_feasible(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, pool: Sequence[Candidate]
) -> bool:
    """Whether evicting candidates in order ever makes quota fit (cheap: quota arithmetic only)."""
    usage = snapshot.cache.usage
    version = usage.version
    done: list[Admitted] = []
    ok = usage.fits(preemptor.queue, assignment.usage) is None
    for candidate in pool.in_order() if isinstance(pool, CandidatePool) else pool:
        if ok:
            break
        if candidate.kind != "evict":
            continue
        usage.add(candidate.admitted.queue, candidate.admitted.assignment.usage, -1)
        done.append(candidate.admitted)
        ok = usage.fits(preemptor.queue, assignment.usage) is None
    for admitted in reversed(done):
        usage.add(admitted.queue, admitted.assignment.usage, 1)
    if done:
        usage.rewind(version)  # the table is exactly as it was: memos keyed by the version still hold
    return ok


def capacity_feasible(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, pool: Sequence[Candidate]
) -> bool:
    """For whole-GPU workloads: free GPUs of the model plus the candidates' cover the need."""
    if assignment.model is None:
        return True
    needed = 0
    for pod_set, count in zip(preemptor.pod_sets, assignment.counts, strict=True):
        if pod_set.request.kind is not GpuKind.WHOLE:
            return True
        needed += pod_set.request.gpus * pod_set.minimum if count else 0
    fleet = snapshot.fleet
    # All nodes of the flavor's GPU model, whatever their capacity type: an upper bound is enough here.
    code = fleet.model_id(split_flavor(assignment.model)[0])
    rows = slice(0, fleet.n_rows)
    free = int(np.sum(fleet.whole_free[rows][fleet.model[rows] == code]))
    model = assignment.model
    if isinstance(pool, CandidatePool):
        milli = sum(part.milli(model) for part in pool.parts)
    else:
        milli = sum(c.admitted.assignment.usage.get(model, 0) for c in pool if c.kind == "evict")
    return free + milli // 1000 >= needed
