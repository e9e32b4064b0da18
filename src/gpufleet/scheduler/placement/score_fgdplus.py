"""`fgd+`: fragmentation gradient descent that learns its workload online and counts CPU-stranded GPUs.

Three changes to FGD, each a general rule rather than a fit to one trace:

1. The typical workload is estimated online from the pods the scheduler has placed so far (a scheduler
   does not know its trace in advance; `learn`), starting from a weak prior of generic shapes and
   refitted at growing intervals.
2. FGD only sees CPU when a single typical pod no longer fits. Here a node's fragmentation also counts
   the idle GPU milli that its free CPU cannot feed at the workload's observed CPU-per-GPU ratio, so a
   CPU-heavy pod (including CPU-only pods, which FGD scores as ties) goes where CPU is plentiful
   relative to idle GPUs.
3. Exact gains instead of integer points; among equal gains the fuller node wins (best fit), and among
   nodes equal on both, the one in the fuller rack (the finest topology level), so that pods without a
   topology request leave empty racks whole for gangs that require one.

The CPU-per-GPU ratio is taken at each refit, and scores are kept per request and node row until the
row changes (`RowScores`), so a pod costs the rescoring of the few nodes changed since the last one.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.fleet.state import FleetState
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
    register,
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
# Below the node's own fullness: among nodes equal on both, the one in the fullest rack (the finest
# topology domain) wins, so that pods without a topology request (whole-node ones above all) fill domains
# already in use and leave empty ones whole for gangs that require one.
DOMAIN_TIE_WEIGHT = 1e-6


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

    A row's values stay valid until the row changes (`observe`) or the model is refitted: a stream of
    alike pods then rescores only the few nodes the last placements and releases touched, not the fleet.
    """

    __slots__ = ("gpu", "valid", "values")

    def __init__(self, size: int) -> None:
        self.values = np.zeros(size, dtype=np.float64)
        self.gpu = np.zeros(size, dtype=np.int64)
        self.valid = np.zeros(size, dtype=np.bool_)

    def fit(self, size: int) -> None:
        """Makes room for `size` rows (new rows are not valid yet)."""
        have = self.valid.size
        if size <= have:
            return
        size = max(size, 2 * have)
        values, gpu, valid = self.values, self.gpu, self.valid
        self.values = np.zeros(size, dtype=np.float64)
        self.gpu = np.zeros(size, dtype=np.int64)
        self.valid = np.zeros(size, dtype=np.bool_)
        self.values[:have], self.gpu[:have], self.valid[:have] = values, gpu, valid


# Requests whose per-row scores are kept at once; the oldest is dropped first. A scheduler's stream has
# a few dozen distinct shapes at a time, and a miss only costs one full scoring, as without the cache.
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
        # Per row its domain of the finest topology level and GPUs per domain, with the fleet generation
        # they were counted at.
        self._domains: tuple[int, IntArray, FloatArray] | None = None
        self._refit()

    def _refit(self) -> None:
        self.model = FragmentationModel(self.estimate.typical())
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
        self._domains = None

    def _sync(self, state: FleetState) -> None:
        """Brings the model up to date (rows observed, rows found changed after `invalidate`, new rows)
        and drops the kept scores of every row it recomputed."""
        changed = self.model.sync(state)
        if changed is None or state is not self._state:
            self._state = state
            self._scores.clear()
        elif changed.size:
            for cached in self._scores.values():
                cached.valid[changed[changed < cached.valid.size]] = False

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        self._sync(state)
        cached = self._scores.get(request)
        if cached is None:
            if len(self._scores) >= CACHED_REQUESTS:
                del self._scores[next(iter(self._scores))]
            cached = self._scores[request] = RowScores(state.n_rows)
        cached.fit(state.n_rows)
        stale = rows[~cached.valid[rows]]
        if stale.size:
            values, gpu = self._compute(state, request, stale)
            cached.values[stale] = values
            cached.gpu[stale] = gpu
            cached.valid[stale] = True
        share_gpu = cached.gpu[rows] if request.kind is GpuKind.SHARE else None
        scores = cached.values[rows]
        if state.levels:
            scores += DOMAIN_TIE_WEIGHT * self._domain_fullness(state, rows)
        return Scored(scores, gpu_choices(state, request, rows, share_gpu))

    def _domain_fullness(self, state: FleetState, rows: Rows) -> FloatArray:
        """Per row, the share of its finest topology domain's GPUs that are not whole and free (0 outside
        any domain). Read at every call, since any placement in a domain moves it for all its nodes."""
        level = len(state.levels) - 1
        if self._domains is None or self._domains[0] != state.generation:
            self._domains = (state.generation, *self._count_domains(state, level))
        _, row_domain, gpus = self._domains
        full = np.zeros(gpus.size + 1, dtype=np.float64)  # the last entry: outside any domain
        full[:-1] = 1.0 - state.domain_whole_free[level][: gpus.size] / gpus
        return np.asarray(full[row_domain[rows]], dtype=np.float64)

    @staticmethod
    def _count_domains(state: FleetState, level: int) -> tuple[IntArray, FloatArray]:
        """Per row its domain index (the domain count for a row outside any), and GPUs per domain."""
        n = state.n_rows
        domains = state.domain[level, :n]
        inside = (domains >= 0) & state.alive[:n]
        size = int(domains.max(initial=-1)) + 1
        gpus = np.bincount(domains[inside], weights=state.gpu_ok[:n][inside].sum(axis=1), minlength=size)
        row_domain = np.where(inside, domains, size)
        return np.asarray(row_domain, dtype=np.int64), np.maximum(gpus, 1.0)

    def _compute(self, state: FleetState, request: PodRequest, rows: Rows) -> tuple[FloatArray, IntArray]:
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
        taken = request.total_gpu_milli
        cpu_gain = self._cpu_stranded(idle, cpu_free) - self._cpu_stranded(
            idle - taken, cpu_free - request.cpu_milli
        )
        # Best-fit tie-breaker in [0, 1]: nodes left with less free CPU and GPU score higher.
        cpu_left = (cpu_free - request.cpu_milli) / np.maximum(state.cpu_cap[rows], 1)
        gpu_left = (idle - taken) / np.maximum(state.gpu_count[rows] * GPU_MILLI, 1)
        fullness = 1.0 - 0.5 * (cpu_left + gpu_left)
        return np.asarray(frag_gain + cpu_gain + TIE_WEIGHT * fullness, dtype=np.float64), share_gpu

    def _cpu_stranded(self, idle: IntArray | FloatArray, cpu_free: IntArray) -> FloatArray:
        """Idle GPU milli that the free CPU cannot feed at the observed CPU-per-GPU ratio."""
        return np.asarray(np.maximum(idle - np.maximum(cpu_free, 0) * self._feed, 0.0), dtype=np.float64)


register("fgd+", AdaptiveFgdPolicy)
