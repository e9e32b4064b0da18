"""`fgd+`: fragmentation gradient descent that learns its workload online and counts CPU-stranded GPUs.

Three changes to FGD, each a general rule rather than a fit to one trace:

1. The typical workload is estimated online from the pods the scheduler has scored so far (a scheduler
   does not know its trace in advance), starting from a weak prior of generic shapes and refitted at
   growing intervals.
2. FGD only sees CPU when a single typical pod no longer fits. Here a node's fragmentation also counts
   the idle GPU milli that its free CPU cannot feed at the workload's observed CPU-per-GPU ratio, so a
   CPU-heavy pod (including CPU-only pods, which FGD scores as ties) goes where CPU is plentiful
   relative to idle GPUs.
3. Exact gains instead of integer points, and among equal gains the fuller node wins (best fit).
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
    usable_free,
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


class AdaptiveFgdPolicy:
    """FGD with an online typical workload, CPU-stranding awareness and best-fit tie-breaking."""

    name = "fgd+"

    def __init__(self, seed: int | None = None, prior_weight: float = 1.0, first_refit: int = 16) -> None:
        self.seed = seed
        self.estimate = WorkloadEstimate(prior_weight)
        self.model = FragmentationModel(self.estimate.typical())
        self._next_refit = first_refit

    def observe(self, state: FleetState, row: int) -> None:
        self.model.refresh(state, row)

    def _learn(self, request: PodRequest) -> None:
        self.estimate.add(request)
        if self.estimate.seen >= self._next_refit:
            # Refit at doubling intervals (then every 1,000 pods): cheap, and stable once learnt.
            self.model = FragmentationModel(self.estimate.typical())
            self._next_refit = min(2 * self._next_refit, self.estimate.seen + 1_000)

    def _cpu_stranded(self, idle: IntArray | FloatArray, cpu_free: IntArray) -> FloatArray:
        """Idle GPU milli that the free CPU cannot feed at the observed CPU-per-GPU ratio."""
        feedable = np.maximum(cpu_free, 0) * (GPU_MILLI / self.estimate.cpu_per_gpu)
        return np.asarray(np.maximum(idle - feedable, 0.0), dtype=np.float64)

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        self._learn(request)
        model = self.model
        model.sync(state)
        share_gpu: IntArray | None = None
        if request.kind is GpuKind.SHARE:
            cand_row, cand_gpu, gains = model.share_gains(state, request, rows)
            frag_gain, share_gpu = best_per_row(rows.size, cand_row, cand_gpu, gains)
        else:
            frag_gain = model.gain(state, request, rows)
        idle = model.idle[rows]
        cpu_free = state.cpu_free[rows]
        cpu_gain = self._cpu_stranded(idle, cpu_free) - self._cpu_stranded(
            idle - request.total_gpu_milli, cpu_free - request.cpu_milli
        )
        scores = frag_gain + cpu_gain + TIE_WEIGHT * self._fullness(state, request, rows)
        return Scored(scores, gpu_choices(state, request, rows, share_gpu))

    @staticmethod
    def _fullness(state: FleetState, request: PodRequest, rows: Rows) -> FloatArray:
        """Best-fit tie-breaker in [0, 1]: nodes left with less free CPU and GPU share score higher."""
        cpu_left = (state.cpu_free[rows] - request.cpu_milli) / np.maximum(state.cpu_cap[rows], 1)
        gpu_cap = np.maximum(state.gpu_count[rows] * GPU_MILLI, 1)
        gpu_left = (usable_free(state, rows).sum(axis=1) - request.total_gpu_milli) / gpu_cap
        return np.asarray(1.0 - 0.5 * (cpu_left + gpu_left), dtype=np.float64)


register("fgd+", AdaptiveFgdPolicy)
