"""`fgd+`: fragmentation gradient descent that learns its workload online and counts CPU-stranded GPUs.

Four changes to FGD, each a general rule rather than a fit to one trace:

1. The typical workload is estimated online from the pods the scheduler has placed so far (a scheduler
   does not know its trace in advance; `learn`), starting from a weak prior of generic shapes and
   refitted at growing intervals.
2. FGD only sees CPU when a single typical pod no longer fits. Here a node's fragmentation also counts
   the idle GPU milli that its free CPU cannot feed at the workload's observed CPU-per-GPU ratio, so a
   CPU-heavy pod (including CPU-only pods, which FGD scores as ties) goes where CPU is plentiful
   relative to idle GPUs.
3. Exact gains instead of integer points; among equal gains the fuller node wins (best fit), and among
   nodes equal on both, the one in the fuller rack (per node, the finest topology level at which it has
   a domain), so that pods without a topology request leave empty racks whole for gangs that require
   one.
4. Where pods name GPU models, a typical shape weighs its demand per GPU it may use (its frequency
   times the fleet's GPUs over the GPUs of its models; `FragmentationModel(by_capacity=True)`), not its
   frequency: the idle milli of a model that restricted pods need counts for them as much as their
   demand on it, so pods that accept other models leave it to them. Fleets where no pod names a model
   are scored exactly as before (every weight keeps its frequency).

The CPU-per-GPU ratio is taken at each refit, and scores are kept per request and node row until the
row changes (`RowScores`), so a pod costs the rescoring of the few nodes changed since the last one.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.alike import alike_rows
from gpufleet.scheduler.placement.score_fgd import (
    FragmentationModel,
    PodShape,
    TypicalWorkload,
    best_per_row,
)
from gpufleet.scheduler.placement.scoring import (
    FloatArray,
    IntArray,
    Rows,
    Scored,
    gpu_choices,
    share_gpu_free,
)

# Generic shapes a fresh scheduler assumes before it has seen pods: whole GPUs and common shares.
PRIOR_SHAPES = (
    PodShape(8_000, GPU_MILLI, 1),
    PodShape(8_000, 500, 1),
    PodShape(4_000, 250, 1),
    PodShape(16_000, GPU_MILLI, 2),
    PodShape(32_000, GPU_MILLI, 4),
    PodShape(64_000, GPU_MILLI, 8),
)
PRIOR_CPU_PER_GPU = 8_000.0
# A tie-breaker must never outweigh a real difference in stranded milli.
TIE_WEIGHT = 1e-3


class WorkloadEstimate:
    """Shape counts and the CPU-per-GPU ratio of the pods seen so far, on top of a weak prior."""

    def __init__(self, prior_weight: float = 1.0, coverage: float = 0.95) -> None:
        self.coverage = coverage
        self.counts: Counter[PodShape] = Counter()
        self.prior = {shape: prior_weight for shape in PRIOR_SHAPES}
        self.cpu_milli = PRIOR_CPU_PER_GPU * prior_weight
        self.gpus = prior_weight
        self.seen = 0

    def add(self, request: PodRequest) -> None:
        self.counts[PodShape.of(request)] += 1
        self.seen += 1
        if request.total_gpu_milli:
            self.cpu_milli += request.cpu_milli
            self.gpus += request.total_gpu_milli / GPU_MILLI

    @property
    def cpu_per_gpu(self) -> float:
        return self.cpu_milli / self.gpus

    def typical(self) -> TypicalWorkload:
        merged: dict[PodShape, float] = dict(self.prior)
        for shape, count in self.counts.items():
            merged[shape] = merged.get(shape, 0.0) + count
        return TypicalWorkload.from_counts(merged, self.coverage)


class RowScores:
    """One request's score per node row (and, for a share pod, the GPU it would take there).

    A row's values stay valid while the row's version (`AdaptiveFgdPolicy._versions`, raised when the
    row changes) is the one they were computed at, until the model is refitted: a stream of alike pods
    then rescores only the few nodes the last placements and releases touched, not the fleet. Versions
    make a change cost one write whatever the number of kept requests.
    """

    __slots__ = ("gpu", "stamp", "values")
    ROW_BYTES = 24  # values, gpu and stamp: 8 bytes each

    def __init__(self, size: int) -> None:
        self.values = np.zeros(size, dtype=np.float64)
        self.gpu = np.zeros(size, dtype=np.int64)
        self.stamp = np.full(size, -1, dtype=np.int64)

    def fit(self, size: int) -> None:
        """Makes room for `size` rows (new rows are not valid yet)."""
        have = self.stamp.size
        if size <= have:
            return
        size = max(size, 2 * have)
        values, gpu, stamp = self.values, self.gpu, self.stamp
        self.values = np.zeros(size, dtype=np.float64)
        self.gpu = np.zeros(size, dtype=np.int64)
        self.stamp = np.full(size, -1, dtype=np.int64)
        self.values[:have], self.gpu[:have], self.stamp[:have] = values, gpu, stamp


# Batches of fewer rows are scored row by row, without looking for alike rows first (which costs more
# than it saves on a few rows).
GROUP_ROWS = 32
# Batches of at most this many rows finish their score in Python floats (`_finish_scalar`).
SCALAR_ROWS = 4
# Memory for kept scores (`RowScores`, 24 bytes a row per request): requests are kept while they fit in
# it, and at least CACHED_REQUESTS of them; the least recently scored is dropped first. An openb stream
# has a few hundred distinct requests between two refits and each miss costs a full scoring, so on a
# fleet of 1,000 nodes all of them are kept; on 6,000 nodes, a few hundred.
KEPT_SCORE_BYTES = 32 << 20
CACHED_REQUESTS = 64


class AdaptiveFgdPolicy:
    """FGD with an online typical workload, CPU-stranding awareness and best-fit tie-breaking.

    What it learns comes from `learn`, called once per pod placed (by any policy): a scheduler that uses
    `fgd+` for one workload class still measures fragmentation against the whole workload.
    """

    name = "fgd+"

    def __init__(self, seed: int | None = None, prior_weight: float = 1.0, first_refit: int = 16) -> None:
        self.seed = seed
        self.estimate = WorkloadEstimate(prior_weight)
        self._next_refit = first_refit
        self._state: FleetState | None = None
        self._scores: dict[PodRequest, RowScores] = {}
        # Per row, how many times it changed: a kept score is valid while its stamp is the row's version.
        self._versions = np.zeros(0, dtype=np.int64)
        # Per row the level and domain its rack tie-break reads (`_DomainMap`), with what it was built
        # from: the state, its generation and its GPUs' health changes.
        self._domains: tuple[FleetState, int, int, _DomainMap] | None = None
        self._refit()

    def _refit(self) -> None:
        self.model = FragmentationModel(self.estimate.typical(), by_capacity=True)
        # GPU milli one CPU milli can feed, at the CPU-per-GPU ratio of the pods seen so far.
        self._feed = GPU_MILLI / self.estimate.cpu_per_gpu
        self._scores.clear()

    def learn(self, request: PodRequest) -> None:
        self.estimate.add(request)
        if self.estimate.seen >= self._next_refit:
            # Refit at doubling intervals (then every 1,000 pods): cheap, and stable once learnt.
            self._refit()
            self._next_refit = min(2 * self._next_refit, self.estimate.seen + 1_000)

    def observe(self, state: FleetState, row: int) -> None:
        # Recomputed (with the other rows changed meanwhile) when the next pod is scored: preemption's
        # what-ifs allocate and release many pods between two scorings.
        self.model.mark(row)

    def invalidate(self) -> None:
        # Only the rows that changed are recomputed, at the next `_sync`: a cycle that finds most of
        # the fleet as the last one left it costs a comparison, not a rebuild.
        self.model.recheck()

    def _sync(self, state: FleetState) -> None:
        """Brings the model up to date (rows observed, rows found changed after `invalidate`, new rows)
        and drops the kept scores of every row it recomputed."""
        changed = self.model.sync(state)
        if changed is None or state is not self._state:
            self._state = state
            self._scores.clear()
        elif changed.size:
            self._version_rows(int(changed.max()) + 1)[changed] += 1

    def _version_rows(self, size: int) -> IntArray:
        """The rows' versions, with room for `size` rows (a new row starts at version 0)."""
        have = self._versions.size
        if size > have:
            grown = np.zeros(max(size, 2 * have), dtype=np.int64)
            grown[:have] = self._versions
            self._versions = grown
        return self._versions

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        self._sync(state)
        # Popped and put back: the dict's order is then the order of last use.
        cached = self._scores.pop(request, None)
        if cached is None:
            keep = max(CACHED_REQUESTS, KEPT_SCORE_BYTES // (RowScores.ROW_BYTES * max(state.n_rows, 1)))
            while len(self._scores) >= keep:
                del self._scores[next(iter(self._scores))]
            cached = RowScores(state.n_rows)
        self._scores[request] = cached
        cached.fit(state.n_rows)
        versions = self._version_rows(state.n_rows)
        stale = rows[cached.stamp[rows] != versions[rows]]
        if stale.size:
            values, gpu = self._compute(state, request, stale)
            cached.values[stale] = values
            cached.gpu[stale] = gpu
            cached.stamp[stale] = versions[stale]
        share_gpu = cached.gpu[rows] if request.kind is GpuKind.SHARE else None
        scores = cached.values[rows]  # a copy: the tie-break below must not touch the kept values
        if state.levels:
            self._prefer_fuller_domain(state, rows, scores)
        return Scored(scores, gpu_choices(state, request, rows, share_gpu))

    def _prefer_fuller_domain(self, state: FleetState, rows: Rows, scores: FloatArray) -> None:
        """Among the rows tied for the best score, only those in the fullest domain keep it; the others
        drop by the smallest step a float allows. A lexicographic tie-break: it never reorders rows
        that differ on fragmentation or fullness, however small the difference."""
        if scores.size < 2:
            return
        top = np.flatnonzero(scores == scores.max())
        if top.size < 2:
            return
        built = self._domains
        if built is None or built[0] is not state or built[1:3] != (state.generation, state.health_changes):
            built = self._domains = (state, state.generation, state.health_changes, _DomainMap(state))
        fullness = built[3].fullness(state, rows[top])
        behind = top[fullness < fullness.max()]
        scores[behind] = np.nextafter(scores[behind], -np.inf)

    def _compute(self, state: FleetState, request: PodRequest, rows: Rows) -> tuple[FloatArray, IntArray]:
        """`_compute_rows`, on one row per group of rows that it cannot tell apart when there are many
        (the first scoring of a request after a refit covers the fleet, mostly nodes of a few types in a
        few states)."""
        if rows.size < GROUP_ROWS:
            return self._compute_rows(state, request, rows)
        # Every per-row input of `_compute_rows`: the model's columns and the node's CPU, GPU count and,
        # for a share pod, the GPUs it may take with their free milli.
        columns = [self.model.row_key(rows), state.cpu_free[rows, None], state.cpu_cap[rows, None]]
        columns.append(state.gpu_count[rows, None])
        if request.kind is GpuKind.SHARE:
            columns.append(share_gpu_free(state, request, rows))
        groups = alike_rows(np.concatenate(columns, axis=1, dtype=np.int64))
        if groups is None:
            return self._compute_rows(state, request, rows)
        first, inverse = groups
        values, gpu = self._compute_rows(state, request, rows[first])
        return values[inverse], gpu[inverse]

    def _compute_rows(
        self, state: FleetState, request: PodRequest, rows: Rows
    ) -> tuple[FloatArray, IntArray]:
        """Per row, the score and (for a share pod) the GPU taken: fragmentation gain, CPU-stranding gain
        and the best-fit tie-breaker."""
        model = self.model
        share_gpu = np.zeros(rows.size, dtype=np.int64)
        if request.kind is GpuKind.SHARE:
            cand_row, cand_gpu, gains = model.share_gains(state, request, rows)
            frag_gain, share_gpu = best_per_row(rows.size, cand_row, cand_gpu, gains)
        else:
            frag_gain = model.gain(state, request, rows)
        idle = model.idle[rows]
        cpu_free = state.cpu_free[rows]
        if rows.size <= SCALAR_ROWS:
            return self._finish_scalar(state, request, rows, frag_gain, idle, cpu_free), share_gpu
        taken = request.total_gpu_milli
        cpu_gain = self._cpu_stranded(idle, cpu_free) - self._cpu_stranded(
            idle - taken, cpu_free - request.cpu_milli
        )
        # Best-fit tie-breaker in [0, 1]: nodes left with less free CPU and GPU score higher.
        cpu_left = (cpu_free - request.cpu_milli) / np.maximum(state.cpu_cap[rows], 1)
        gpu_left = (idle - taken) / np.maximum(state.gpu_count[rows] * GPU_MILLI, 1)
        fullness = 1.0 - 0.5 * (cpu_left + gpu_left)
        return np.asarray(frag_gain + cpu_gain + TIE_WEIGHT * fullness, dtype=np.float64), share_gpu

    def _finish_scalar(
        self,
        state: FleetState,
        request: PodRequest,
        rows: Rows,
        frag_gain: FloatArray,
        idle: IntArray,
        cpu_free: IntArray,
    ) -> FloatArray:
        """The end of `_compute_rows` for a few rows, in Python floats: the same operations in the same
        order (each exactly rounded, on integers exact in a double), so the same values to the bit,
        without the fixed cost of a dozen numpy calls on arrays of one or two."""
        feed, cpu_ask, taken = self._feed, request.cpu_milli, request.total_gpu_milli
        out = []
        for gain, idle_r, cpu_r, cap, gpus in zip(
            frag_gain.tolist(),
            idle.tolist(),
            cpu_free.tolist(),
            state.cpu_cap[rows].tolist(),
            state.gpu_count[rows].tolist(),
            strict=True,
        ):
            cpu_gain = max(idle_r - max(cpu_r, 0) * feed, 0.0) - max(
                (idle_r - taken) - max(cpu_r - cpu_ask, 0) * feed, 0.0
            )
            cpu_left = (cpu_r - cpu_ask) / max(cap, 1)
            gpu_left = (idle_r - taken) / max(gpus * GPU_MILLI, 1)
            fullness = 1.0 - 0.5 * (cpu_left + gpu_left)
            out.append(gain + cpu_gain + TIE_WEIGHT * fullness)
        return np.array(out, dtype=np.float64)

    def _cpu_stranded(self, idle: IntArray | FloatArray, cpu_free: IntArray) -> FloatArray:
        """Idle GPU milli that the free CPU cannot feed at the observed CPU-per-GPU ratio."""
        return np.asarray(np.maximum(idle - np.maximum(cpu_free, 0) * self._feed, 0.0), dtype=np.float64)


class _DomainMap:
    """Where each row's rack tie-break looks: the finest topology level at which the row has a domain.

    With levels such as the Kubernetes default [zone, block, rack, clique], only some nodes carry the
    finest label (GB200/NVL72 cliques); a node without it is judged by its rack, or its block, and a
    node without any topology label by itself alone (a domain of one node), never as an empty domain.
    Counted once per fleet generation (labels and nodes do not change within one) and GPU health change
    (a domain's GPUs are its healthy ones).
    """

    def __init__(self, state: FleetState) -> None:
        n = state.n_rows
        domains = state.domain[:, :n]
        has = (domains >= 0) & state.alive[:n]
        # The deepest level with a domain per row; -1 for a row outside every domain.
        self.level = np.where(has.any(axis=0), len(state.levels) - 1 - np.argmax(has[::-1], axis=0), -1)
        gpus_per_row = state.gpu_ok[:n].sum(axis=1).astype(np.float64)
        # GPUs per domain of each level (all its nodes, as the domain's whole free GPUs count them all).
        self.gpus: list[FloatArray] = []
        for level in range(len(state.levels)):
            inside = has[level]
            size = int(domains[level].max(initial=-1)) + 1
            counted = np.bincount(domains[level][inside], weights=gpus_per_row[inside], minlength=size)
            self.gpus.append(np.asarray(np.maximum(counted, 1.0), dtype=np.float64))

    def fullness(self, state: FleetState, rows: Rows) -> FloatArray:
        """Per row, the share of its domain's GPUs that are not whole and free. Read at every call, since
        any placement in a domain moves it for all its nodes."""
        level = self.level[rows]
        out = np.empty(rows.size, dtype=np.float64)
        alone = level < 0
        own = rows[alone]
        out[alone] = 1.0 - state.whole_free[own] / np.maximum(state.gpu_ok[own].sum(axis=1), 1)
        for lv in np.unique(level[~alone]):
            at = level == lv
            domain = state.domain[lv, rows[at]]
            out[at] = 1.0 - state.domain_whole_free[lv][domain] / self.gpus[lv][domain]
        return out
