"""The FGD placement protocol (Weng et al., USENIX ATC 2023) on openb traces.

Per seed: shuffle the pods (from name order), inflate or deflate the list to 1.3 x the cluster's GPUs,
feed the pods one at a time to the same FleetState, filters and scoring policies the scheduler uses,
drop what does not fit, and record allocated GPU milli against the GPU milli of all pods arrived.
The headline figure is the unallocated GPU % when arrived pods ask for 100% of the cluster.

Ties between equally scored nodes go, as in the paper's simulator, to the first node in an order drawn
once per seed (that simulator prefixes node names with a random permutation and its scheduler takes the
first best node; its Random policy draws a node itself). This matters: Packing, Clustering and FGD give
many nodes the same score (every node, for a CPU-only pod under Packing and Clustering), and a fixed
order keeps filling the same nodes where random draws would spread such pods over the whole fleet.
`tie_break="random"` draws among tied nodes instead, for comparison.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import GPU_MILLI
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import filter_nodes
from gpufleet.scheduler.placement.policies import get_policy
from gpufleet.scheduler.placement.score_fgd import TypicalWorkload
from gpufleet.scheduler.placement.scoring import IntArray, ScorePolicy, pick
from gpufleet.sim.openb import TracePod

TUNE_RATIO = 1.3
HEADLINE_PCT = 100
CURVE_PCTS = tuple(range(75, 131))
# Policies built against the trace's own typical workload, as in the paper.
TRACE_AWARE = frozenset({"fgd"})
# How ties between equally scored nodes are broken: the reference simulator's fixed order, or at random.
NODE_ORDER = "node-order"
RANDOM_TIES = "random"
TIE_BREAKS = (NODE_ORDER, RANDOM_TIES)


@dataclass(slots=True)
class RunResult:
    """One protocol run: a policy on a trace with one seed."""

    policy: str
    seed: int
    unallocated_pct: float
    curve: dict[int, float] = field(default_factory=dict)  # arrived % -> allocated %
    pods: int = 0
    placed: int = 0
    wall_s: float = 0.0


def build_fleet(nodes: Sequence[NodeSpec]) -> FleetState:
    """A FleetState holding the given nodes, in order."""
    state = FleetState(max_gpus=max((n.gpus for n in nodes), default=1), capacity=max(len(nodes), 1))
    for spec in nodes:
        state.add_node(spec)
    return state


def workload(
    pods: Sequence[TracePod], cluster_milli: int, seed: int, ratio: float = TUNE_RATIO
) -> list[TracePod]:
    """The pods of one seed: shuffled from name order, then resized to `ratio` x the cluster's GPU milli.

    Below the target, pods drawn at random (with replacement) from the original list are appended
    while the next one still fits under it; above it, random pods are dropped until the total fits.
    """
    rng = np.random.default_rng(seed)
    ordered = sorted(pods, key=lambda p: p.name)
    shuffled = [ordered[i] for i in rng.permutation(len(ordered))]
    target = ratio * cluster_milli
    total = sum(p.request.total_gpu_milli for p in shuffled)
    if total < target and any(p.request.total_gpu_milli for p in ordered):
        copies = 0
        while True:
            extra = ordered[int(rng.integers(len(ordered)))]
            if total + extra.request.total_gpu_milli > target:
                break
            copies += 1
            shuffled.append(TracePod(f"{extra.name}-copy{copies}", extra.request))
            total += extra.request.total_gpu_milli
    while total > target and shuffled:
        gone = shuffled.pop(int(rng.integers(len(shuffled))))
        total -= gone.request.total_gpu_milli
    return shuffled


def joined_workload(
    parts: Sequence[Sequence[TracePod]], cluster_milli: int, seed: int, ratio: float = TUNE_RATIO
) -> list[TracePod]:
    """The pods of one seed of traces joined end to end: each part's `workload` at an equal share of
    `ratio` (two parts: 0.65 x the cluster each), the second's pods arriving after all of the first's.

    The headline point (100% arrived) then falls 35% of the cluster into the second trace, so what a
    policy learnt on the first is tested on a changed mix. Pod names get the part's index (`1/p0001`),
    since the traces' names overlap.
    """
    stream: list[TracePod] = []
    for index, part in enumerate(parts):
        share = workload(part, cluster_milli, _part_seed(seed, index), ratio / len(parts))
        stream += [TracePod(f"{index}/{p.name}", p.request) for p in share]
    return stream


def _part_seed(seed: int, index: int) -> int:
    # The first part keeps the seed's own stream (its pods are those of a single-trace run at that share);
    # later parts draw apart from it, so that a trace joined to itself is not the same shuffle twice.
    return seed if index == 0 else int(np.random.default_rng([seed, 3, index]).integers(2**31))


def arrived_pct(arrived_milli: int, cluster_milli: int) -> int:
    """Arrived % rounded half away from zero, as the reference analysis does."""
    return math.floor(arrived_milli * 100 / cluster_milli + 0.5)


def node_rank(count: int, seed: int, tie_break: str = NODE_ORDER) -> IntArray | None:
    """Per node row, its place in this seed's tie-break order; None when ties are drawn at random."""
    if tie_break == RANDOM_TIES:
        return None
    if tie_break != NODE_ORDER:
        raise ValueError(f"unknown tie break {tie_break!r}; valid: {', '.join(TIE_BREAKS)}")
    return np.asarray(np.random.default_rng([seed, 2]).permutation(count), dtype=np.int64)


def make_policy(name: str, pods: Sequence[TracePod], seed: int, **config: Any) -> ScorePolicy:
    """A policy for one run; trace-aware policies get the trace's typical workload."""
    if name in TRACE_AWARE and "typical" not in config:
        config["typical"] = TypicalWorkload.from_requests(p.request for p in pods)
    return get_policy(name, seed=seed, **config)


def run_once(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    *,
    ratio: float = TUNE_RATIO,
    tie_break: str = NODE_ORDER,
    then: Sequence[Sequence[TracePod]] = (),
    learn_first_only: bool = False,
    **config: Any,
) -> RunResult:
    """One protocol run of `policy` with `seed`; see the module docstring.

    `then`: traces whose pods arrive after `pods`' (`joined_workload`); a trace-aware policy gets the
    typical workload of all of them. `learn_first_only` (a measurement, not a policy): the policy
    learns only the first trace's pods, as if its refits stopped where the mix changes.
    """
    started = time.perf_counter()
    state = build_fleet(nodes)
    cluster_milli = int(state.gpu_count[: state.n_rows].sum()) * GPU_MILLI
    if cluster_milli == 0:
        raise ValueError("the cluster has no GPUs")
    rank = node_rank(state.n_rows, seed, tie_break)
    every = [p for part in (pods, *then) for p in part]
    scorer = make_policy(policy, every, seed, **config)
    rng = np.random.default_rng([seed, 1])
    if then:
        stream = joined_workload([pods, *then], cluster_milli, seed, ratio)
    else:
        stream = workload(pods, cluster_milli, seed, ratio)
    # Pods of the first trace, in the stream: those the policy learns under `learn_first_only`.
    first = sum(1 for p in stream if p.name.startswith("0/")) if then else len(stream)
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    allocated = arrived = placed = 0
    for position, pod in enumerate(stream):
        request = pod.request
        rows = filter_nodes(state, request).rows
        if rows.size:
            scored = scorer.score(state, request, rows)
            index = pick(scored, rng, None if rank is None else rank[rows])
            row = int(rows[index])
            state.allocate(pod.name, row, request, scored.gpus[index])
            scorer.observe(state, row)
            if position < first or not learn_first_only:
                scorer.learn(request)
            allocated += request.total_gpu_milli
            placed += 1
        arrived += request.total_gpu_milli
        pct = arrived_pct(arrived, cluster_milli)
        sums[pct] = sums.get(pct, 0.0) + allocated * 100 / cluster_milli
        counts[pct] = counts.get(pct, 0) + 1
    curve = allocation_curve(sums, counts)
    headline = 100.0 - curve.get(HEADLINE_PCT, 0.0)
    wall = time.perf_counter() - started
    return RunResult(policy, seed, headline, curve, len(stream), placed, wall)


def allocation_curve(sums: dict[int, float], counts: dict[int, int]) -> dict[int, float]:
    """Allocated % per arrived %: the mean over the events at that arrived %.

    An arrived % that no event hit (a large pod can jump over one) carries the last value before it.
    """
    if not counts:
        return {}
    curve: dict[int, float] = {}
    last = 0.0
    for pct in range(min(counts), max(max(counts), max(CURVE_PCTS)) + 1):
        if pct in counts:
            last = sums[pct] / counts[pct]
        if pct <= max(counts):
            curve[pct] = last
    return curve


@dataclass(frozen=True, slots=True)
class Job:
    """One run to do: which files, which policy, which seed."""

    pods: str
    nodes: str
    policy: str
    seed: int
    tie_break: str = NODE_ORDER
    then: tuple[str, ...] = ()  # pod lists arriving after `pods` (a joined trace, same node list)
    learn_first_only: bool = False


@dataclass(slots=True)
class PolicySummary:
    """The runs of one policy on one trace, summarised over seeds."""

    policy: str
    runs: list[RunResult]

    @property
    def seeds(self) -> int:
        return len(self.runs)

    @property
    def unallocated_pct(self) -> float:
        return float(np.mean([r.unallocated_pct for r in self.runs]))

    @property
    def unallocated_std(self) -> float:
        return float(np.std([r.unallocated_pct for r in self.runs]))

    @property
    def wall_s(self) -> float:
        return float(sum(r.wall_s for r in self.runs))

    def curve(self) -> dict[int, float]:
        """Mean unallocated % per arrived %, over the seeds that reached it."""
        points: dict[int, list[float]] = {}
        for run in self.runs:
            for pct, alloc in run.curve.items():
                points.setdefault(pct, []).append(100.0 - alloc)
        return {pct: float(np.mean(v)) for pct, v in sorted(points.items())}


_loaded: dict[tuple[str, str], tuple[list[NodeSpec], list[TracePod]]] = {}


def _trace(pods: str, nodes: str) -> tuple[list[NodeSpec], list[TracePod]]:
    # Each worker process reads a trace once, however many runs it does on it.
    key = (pods, nodes)
    if key not in _loaded:
        from gpufleet.sim.openb import load_nodes, load_pods

        _loaded[key] = (load_nodes(nodes), load_pods(pods))
    return _loaded[key]


def run_job(job: Job) -> RunResult:
    """Runs one job (in this process or in a worker)."""
    nodes, pods = _trace(job.pods, job.nodes)
    then = [_trace(more, job.nodes)[1] for more in job.then]
    return run_once(
        nodes,
        pods,
        job.policy,
        job.seed,
        tie_break=job.tie_break,
        then=then,
        learn_first_only=job.learn_first_only,
    )


def summarise(policies: Sequence[str], results: Sequence[RunResult]) -> list[PolicySummary]:
    """Groups run results by policy, in the order of `policies`, each sorted by seed."""
    return [PolicySummary(p, sorted((r for r in results if r.policy == p), key=_seed)) for p in policies]


def _seed(result: RunResult) -> int:
    return result.seed
