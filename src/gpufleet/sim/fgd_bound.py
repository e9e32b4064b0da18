"""A lower bound on the FGD protocol's headline figure that no online placement policy can beat.

Under the protocol (`sim/fgd.py`) a policy's allocated GPU milli after pod i is the total of a subset of
pods 1..i that fits the fleet at once. So it is at most OPT(i), the largest GPU milli of any subset of
those pods that fits the fleet (an offline packing, knowing the whole prefix, free to leave any pod
out). Any relaxation of that packing gives an upper bound U(i) >= OPT(i), hence a lower bound on the
unallocated GPU % that the protocol reports: 100 - mean over the events of the headline bucket of
U(i) x 100 / cluster milli.

The relaxation (`max_packing`) is a linear program. Nodes are grouped into classes of equal facts
(model, GPUs, CPU, memory, and which pod types fit there when empty) and pods into types; a variable
counts the pods of a type put on a class. It is a relaxation because every real packing gives such
counts and every constraint holds for them:

- a pod goes only to a class where it fits on an empty node (`filter_nodes` on an empty fleet: GPU
  model, GPU count, CPU, memory, share size); no more pods of a type than arrived, over all classes;
- per class and per node resource (CPU, memory, GPU milli of a node), the pods' total fits the class's
  total, and so does the total of each pod's size under the dual-feasible functions u1 and u2 of Fekete
  and Schepers (two pods above half a node never share one, ...), which any packing of a node satisfies;
- per class, the GPUs: the whole GPUs taken plus the GPUs that the share pods occupy fit the class's
  GPUs, where the share pods' GPUs are an arc-flow of bin packing (Valerio de Carvalho: a GPU is a path
  from 0 to 1000 milli whose arcs are the shares on it), as strong as the Gilmore-Gomory bound. This is
  what makes the bound useful: a 810-milli share leaves 190 milli that only small shares can use.

What it relaxes: which node of a class a pod lands on (a class is one large node but for the rules
above), so leftover CPU split between nodes is seen only through those rules; integrality (counts and
paths are fractional); and the order of arrival (the packing knows every pod of the prefix and may
leave any out, where an online policy must place each pod that fits when it arrives). So the bound can
be below what the best online policy can reach; it is never above it. Solved with HiGHS (`highspy`);
if the solve does not finish in time, the trivial bound (neither more than arrived nor more than the
fleet) is used instead.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np
import numpy.typing as npt

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.scheduler.placement.filters import filter_nodes
from gpufleet.sim.fgd import (
    HEADLINE_PCT,
    TUNE_RATIO,
    Job,
    RunResult,
    arrived_pct,
    build_fleet,
    joined_workload,
    workload,
)
from gpufleet.sim.openb import TracePod, load_nodes, load_pods

# Seconds HiGHS may spend on one packing (a solve took 1-20 s on the openb traces, 2 busy cores).
TIME_LIMIT_S = 60.0
# Solver tolerances are relative; the bound is raised by this much so that rounding can only weaken it.
SAFETY = 1e-6
# The dual-feasible functions applied per node resource and per GPU (u^(k) of Fekete and Schepers).
NODE_DFF = (1, 2)
GPU_DFF = (1, 2, 3)
# Positions (reachable milli sums of share sizes) above which the arc-flow gives way to GPU_DFF.
MAX_POSITIONS = 1001


def dff(size: int, capacity: int, k: int) -> float:
    """Fekete-Schepers u^(k)(size / capacity): size/capacity where (k+1) x size/capacity is whole, else
    floor((k+1) x size/capacity) / k. Items whose values sum above 1 never fit in one bin together."""
    if (k + 1) * size % capacity == 0:
        return size / capacity
    return float((k + 1) * size // capacity) / k


@dataclass(frozen=True, slots=True)
class PackingBound:
    """The relaxation's optimum (an upper bound on the GPU milli any packing places) and how it ended."""

    milli: float
    exact: bool  # HiGHS proved the relaxation's optimum (else the trivial bound was used)
    solve_s: float


def max_packing(nodes: Sequence[NodeSpec], requests: Sequence[PodRequest]) -> PackingBound:
    """An upper bound on the GPU milli of any subset of `requests` that fits `nodes` at once."""
    started = time.perf_counter()
    gpu_pods = [r for r in requests if r.total_gpu_milli]  # CPU-only pods place no GPU milli: left out
    if not gpu_pods or not nodes:
        return PackingBound(0.0, True, time.perf_counter() - started)
    state = build_fleet(nodes)
    types: dict[PodRequest, int] = {}
    for request in gpu_pods:
        types[request] = types.get(request, 0) + 1
    kinds = list(types)
    fits = np.array([filter_nodes(state, r).feasible[: state.n_rows] for r in kinds], dtype=np.bool_)
    classes: dict[tuple[object, ...], list[int]] = {}
    for row, spec in enumerate(nodes):
        key = (spec.gpu_model, spec.gpus, spec.cpu_milli, spec.memory_mib, fits[:, row].tobytes())
        classes.setdefault(key, []).append(row)
    model = _Program()
    for members in classes.values():
        model.add_class(nodes[members[0]], len(members), kinds, fits[:, members[0]], types)
    model.close()
    cap = min(sum(r.total_gpu_milli for r in gpu_pods), sum(n.gpus for n in nodes) * GPU_MILLI)
    value, exact = model.solve()
    return PackingBound(min(value * (1 + SAFETY), float(cap)), exact, time.perf_counter() - started)


class _Program:
    """The linear program of `max_packing`, built class by class."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []
        self.of_type: dict[int, list[int]] = {}  # pod type -> its columns (one per class it fits)

    def _var(self, cost: float, upper: float) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def _add_row(self, entries: dict[int, float], low: float, high: float) -> None:
        entries = {j: v for j, v in entries.items() if v != 0}
        if entries:
            self.rows.append((entries, low, high))

    def add_class(
        self,
        node: NodeSpec,
        count: int,
        kinds: Sequence[PodRequest],
        fits: npt.NDArray[np.bool_],
        arrived: dict[PodRequest, int],
    ) -> None:
        col: dict[int, int] = {}
        for t, request in enumerate(kinds):
            if fits[t]:
                col[t] = self._var(float(request.total_gpu_milli), float(arrived[request]))
                self.of_type.setdefault(t, []).append(col[t])
        if not col:
            return
        # Per node resource: the plain capacity (sizes as shares of a node) and the dual-feasible rounds.
        dims = (
            (node.cpu_milli, {j: kinds[t].cpu_milli for t, j in col.items()}),
            (node.memory_mib, {j: kinds[t].memory_mib for t, j in col.items()}),
            (node.gpus * GPU_MILLI, {j: kinds[t].total_gpu_milli for t, j in col.items()}),
        )
        for capacity, sizes in dims:
            if capacity <= 0:
                continue
            self._add_row({j: size / capacity for j, size in sizes.items()}, -highspy.kHighsInf, count)
            for k in NODE_DFF:
                entries = {j: dff(size, capacity, k) for j, size in sizes.items()}
                self._add_row(entries, -highspy.kHighsInf, count)
        gpus = float(count * node.gpus)
        shares = {t: j for t, j in col.items() if kinds[t].kind is GpuKind.SHARE}
        whole = {j: float(kinds[t].gpus) for t, j in col.items() if kinds[t].kind is GpuKind.WHOLE}
        used = self._share_gpus({j: kinds[t].gpu_milli for t, j in shares.items()})
        if used is None:
            # Too many share sizes for the flow: per GPU, a share counts its dual-feasible rounds.
            for k in GPU_DFF:
                entries = {j: _per_gpu(kinds[t], k) for t, j in col.items()}
                self._add_row(entries, -highspy.kHighsInf, gpus)
        else:
            self._add_row({**whole, **used}, -highspy.kHighsInf, gpus)

    def _share_gpus(self, share_cols: dict[int, int]) -> dict[int, float] | None:
        """The GPUs that the class's share pods take, as an arc-flow (Valerio de Carvalho): a GPU is a
        path from 0 to 1000 milli whose arcs are the shares on it, so the share pods of each size equal
        the flow on that size's arcs and the GPUs used equal the flow out of 0. Its linear relaxation is
        as strong as the Gilmore-Gomory bound of bin packing. Returns the row entries counting those
        GPUs, or None when the reachable positions are too many."""
        if not share_cols:
            return {}
        sizes = sorted(set(share_cols.values()))
        reach = {0}
        frontier = [0]
        while frontier:
            nxt = []
            for p in frontier:
                for size in sizes:
                    q = p + size
                    if q <= GPU_MILLI and q not in reach:
                        reach.add(q)
                        nxt.append(q)
            if len(reach) > MAX_POSITIONS:
                return None
            frontier = nxt
        balance: dict[int, dict[int, float]] = {p: {} for p in reach}
        by_size: dict[int, dict[int, float]] = {size: {} for size in sizes}
        for p in sorted(reach):
            for size in sizes:
                if p + size <= GPU_MILLI:
                    arc = self._var(0.0, highspy.kHighsInf)
                    balance[p][arc] = 1.0  # leaves p
                    balance[p + size][arc] = -1.0  # enters p + size
                    by_size[size][arc] = 1.0
        # Flow into a position at least covers the flow out (the rest is the GPU's idle milli).
        for p, entries in balance.items():
            if p:
                self._add_row(entries, -highspy.kHighsInf, 0.0)
        for j, size in share_cols.items():
            by_size[size][j] = by_size[size].get(j, 0.0) - 1.0
        for entries in by_size.values():
            self._add_row(entries, 0.0, 0.0)
        return {arc: 1.0 for arc, sign in balance[0].items() if sign > 0}

    def close(self) -> None:
        """Adds the rows across classes: no more pods of a type than arrived."""
        # Upper bounds on each column hold per class; together the classes must not exceed the count.
        for columns in self.of_type.values():
            if len(columns) > 1:
                self._add_row({j: 1.0 for j in columns}, -highspy.kHighsInf, self.upper[columns[0]])

    def solve(self) -> tuple[float, bool]:
        """The linear relaxation's optimum and whether HiGHS proved it (else +inf: no bound in time).

        Only the linear relaxation: on the openb traces the integer program's dual bound after a minute
        was within 0.001 point of it, at 50 times the time."""
        h = _quiet_highs()
        h.setOptionValue("time_limit", TIME_LIMIT_S)
        h.setOptionValue("threads", 1)
        n = len(self.cost)
        h.addVars(n, np.zeros(n), np.array(self.upper, dtype=np.float64))
        h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(self.cost, dtype=np.float64))
        for entries, low, high in self.rows:
            index = np.fromiter(entries.keys(), dtype=np.int32)
            value = np.fromiter(entries.values(), dtype=np.float64)
            h.addRow(low, high, index.size, index, value)
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        if status == highspy.HighsModelStatus.kOptimal:
            return float(info.objective_function_value), True
        # No bound in time: the caller falls back on the trivial one (all arrived milli, the whole fleet).
        return float("inf"), False


def _quiet_highs() -> highspy.Highs:
    """A HiGHS instance that logs nothing. Its constructor prints a banner on the process's standard
    output whatever the options (HiGHS issue 1932), once per process, which would break `--json` and
    clutter the table: it is discarded."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        h = highspy.Highs()  # type: ignore[no-untyped-call]
        h.silent()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    return h


def _per_gpu(request: PodRequest, k: int) -> float:
    if request.kind is GpuKind.SHARE:
        return dff(request.gpu_milli, GPU_MILLI, k)
    return float(request.gpus)


@dataclass(frozen=True, slots=True)
class BoundResult:
    """The bound for one seed: no policy's unallocated GPU % at the headline point is below it."""

    seed: int
    unallocated_pct: float
    exact: bool  # both packings' relaxations solved to optimality
    solve_s: float


def bound_once(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    seed: int,
    *,
    ratio: float = TUNE_RATIO,
    then: Sequence[Sequence[TracePod]] = (),
) -> BoundResult:
    """The lower bound on the protocol's headline figure for `seed` (the same pod stream as `run_once`,
    with `then` the traces joined after `pods`).

    The headline averages allocation over the events (one per pod) whose arrived % is 100 (or, when a
    large pod jumps over 100, the last bucket before it, as `allocation_curve` carries it). For those
    events, with first event a and last event b: allocation(i) <= min(arrived(i), U(b),
    U(a) + arrived(i) - arrived(a)), since a prefix's optimum grows by at most the milli of the pods added.
    """
    cluster_milli = sum(n.gpus for n in nodes) * GPU_MILLI
    if cluster_milli == 0:
        raise ValueError("the cluster has no GPUs")
    if then:
        stream = joined_workload([pods, *then], cluster_milli, seed, ratio)
    else:
        stream = workload(pods, cluster_milli, seed, ratio)
    arrived = np.cumsum([p.request.total_gpu_milli for p in stream], dtype=np.int64)
    pcts = np.array([arrived_pct(int(a), cluster_milli) for a in arrived], dtype=np.int64)
    below = pcts[pcts <= HEADLINE_PCT]
    if not pcts.size or pcts.max() < HEADLINE_PCT or not below.size:
        # The protocol reports 100% unallocated when arrivals never reach the headline point.
        return BoundResult(seed, 100.0, True, 0.0)
    bucket = np.flatnonzero(pcts == below.max())
    first, last = int(bucket[0]), int(bucket[-1])
    upper_first = max_packing(nodes, [p.request for p in stream[: first + 1]])
    upper_last = max_packing(nodes, [p.request for p in stream[: last + 1]])
    at = arrived[bucket].astype(np.float64)
    allocated = np.minimum.reduce(
        [at, np.full(at.size, upper_last.milli), upper_first.milli + at - float(arrived[first])]
    )
    pct = 100.0 - float(allocated.mean()) * 100.0 / cluster_milli
    return BoundResult(
        seed,
        max(pct, 0.0),
        upper_first.exact and upper_last.exact,
        upper_first.solve_s + upper_last.solve_s,
    )


@functools.cache
def _trace(pods: str, nodes: str) -> tuple[list[NodeSpec], list[TracePod]]:
    # Each worker process reads a trace once, however many seeds it bounds.
    return load_nodes(nodes), load_pods(pods)


def run_bound_job(job: Job) -> BoundResult:
    """The bound for one job's trace and seed (its policy is not read), in this process or a worker."""
    nodes, pods = _trace(job.pods, job.nodes)
    return bound_once(nodes, pods, job.seed, then=[_trace(more, job.nodes)[1] for more in job.then])


@dataclass(frozen=True, slots=True)
class BoundSummary:
    """The bounds of one trace over seeds, and how far a policy's runs are above them."""

    results: list[BoundResult]

    def __post_init__(self) -> None:
        self.results.sort(key=lambda r: r.seed)

    @property
    def unallocated_pct(self) -> float:
        return float(np.mean([r.unallocated_pct for r in self.results]))

    @property
    def unallocated_std(self) -> float:
        return float(np.std([r.unallocated_pct for r in self.results]))

    @property
    def exact(self) -> bool:
        return all(r.exact for r in self.results)

    def above(self, runs: Sequence[RunResult]) -> float:
        """Mean over the seeds of the policy's figure minus the bound (never negative for a valid bound)."""
        bound = {r.seed: r.unallocated_pct for r in self.results}
        gaps = [run.unallocated_pct - bound[run.seed] for run in runs if run.seed in bound]
        if not gaps:
            raise ValueError("no run shares a seed with the bounds")
        return float(np.mean(gaps))
