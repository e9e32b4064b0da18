"""The classic placement heuristics: random, dot product, GPU clustering, GPU packing, best fit, spread.

The first five follow the FGD paper's baselines (its Kubernetes scheduler simulator, one score plugin
per run). That simulator scores nodes as integers from 0 to 100, which groups near-equal nodes together,
and gives its tied nodes to `pick`'s tie rule; `integer_scores=True` (the default) keeps the integer
scores so the published figures can be reproduced, `False` ranks by the exact value.

Rules for pods without GPUs, as in the reference plugins: Packing and Clustering give every node the same
(minimum) score, so the tie rule alone places them; BestFit and DotProd still score their CPU.
"""

from __future__ import annotations

import numpy as np

from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.scoring import (
    FloatArray,
    Gpus,
    IntArray,
    LazyGpus,
    Rows,
    Scored,
    gpu_choices,
    loosest_share_gpu,
    share_gpu_free,
    tightest_share_gpu,
    usable_free,
)

MAX_SCORE = 100
# Normalisation scales of the reference simulator: the largest node of the Alibaba fleet.
REF_CPU_MILLI = 128_000
REF_GPU_MILLI = 8 * GPU_MILLI


def points(fraction: FloatArray) -> FloatArray:
    """A [0, 1] score as the reference simulator's integer points (truncated towards zero)."""
    return np.trunc(fraction * MAX_SCORE)


def normalize_points(scores: FloatArray) -> FloatArray:
    """Min-max rescales integer points to 0..100 with integer division, as the reference simulator does."""
    if scores.size == 0:
        return scores
    low, high = scores.min(), scores.max()
    if high == low:
        return np.zeros_like(scores)
    return np.asarray(np.floor((scores - low) * MAX_SCORE / (high - low)), dtype=np.float64)


def gpu_left_after(state: FleetState, request: PodRequest, rows: Rows) -> IntArray:
    """Free GPU milli of each row once the pod is placed there."""
    return np.asarray(state.free_milli[rows] - request.total_gpu_milli, dtype=np.int64)


class StatelessPolicy:
    """Base of policies that keep nothing per node. `seed` is accepted by every policy for uniformity."""

    name = "stateless"

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def observe(self, state: FleetState, row: int) -> None:
        """Nothing is cached, so there is nothing to refresh."""

    def learn(self, request: PodRequest) -> None:
        """The score does not depend on the workload seen so far."""

    def invalidate(self) -> None:
        """Nothing is cached, so there is nothing to rebuild."""


class RandomPolicy(StatelessPolicy):
    """A uniformly random feasible node; a share pod takes a uniformly random fitting GPU.

    The policy draws the node itself and gives it the only top score (the reference simulator's Random
    plugin does the same), so the choice stays uniform whatever rule `pick` uses for ties.
    """

    name = "random"

    def __init__(self, seed: int | None = 0) -> None:
        super().__init__(seed)
        self._rng = np.random.default_rng(seed)

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        scores = np.zeros(rows.size, dtype=np.float64)
        if rows.size:
            scores[self._rng.integers(rows.size)] = 1.0
        if request.kind is not GpuKind.SHARE:
            return Scored(scores, gpu_choices(state, request, rows))

        def choose(i: int) -> Gpus:
            fits = np.flatnonzero(share_gpu_free(state, request, rows[i : i + 1])[0] >= 0)
            return (int(fits[self._rng.integers(fits.size)]),)

        return Scored(scores, LazyGpus(rows.size, choose))


class BestFitPolicy(StatelessPolicy):
    """The node left with the least CPU and GPU (half weight each); share pods on the tightest GPU."""

    name = "bestfit"

    def __init__(self, integer_scores: bool = True, seed: int | None = None) -> None:
        super().__init__(seed)
        self.integer_scores = integer_scores

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        cpu_left = state.cpu_free[rows] - request.cpu_milli
        gpu_left = gpu_left_after(state, request, rows)
        waste = 0.5 * cpu_left / REF_CPU_MILLI + 0.5 * gpu_left / REF_GPU_MILLI
        scores = 1.0 - waste
        if self.integer_scores:
            scores = normalize_points(points(scores))
        return Scored(scores, gpu_choices(state, request, rows))


class DotProductPolicy(StatelessPolicy):
    """Tetris-style alignment: the smallest dot product of the free (cpu, gpu) vector with the request."""

    name = "dotprod"

    def __init__(self, integer_scores: bool = True, seed: int | None = None) -> None:
        super().__init__(seed)
        self.integer_scores = integer_scores

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        cpu = state.cpu_free[rows] / REF_CPU_MILLI * (request.cpu_milli / REF_CPU_MILLI)
        gpu_free = usable_free(state, rows).sum(axis=1)
        gpu = gpu_free / REF_GPU_MILLI * (request.total_gpu_milli / REF_GPU_MILLI)
        scores = 1.0 - (cpu + gpu) / 2.0
        if self.integer_scores:
            scores = points(scores)
        return Scored(scores, gpu_choices(state, request, rows))


class PackingPolicy(StatelessPolicy):
    """Fill partly used GPUs first (fuller first), then free GPUs of used nodes, then idle nodes."""

    name = "packing"

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        kind = request.kind
        if kind not in (GpuKind.WHOLE, GpuKind.SHARE):
            return Scored(np.zeros(rows.size, dtype=np.float64), gpu_choices(state, request, rows))
        healthy = state.gpu_ok[rows].sum(axis=1)
        whole_free = state.whole_free[rows]
        idle = whole_free == healthy
        # Idle nodes: fewer GPUs first (the reference caps this at the GPU count).
        idle_score = np.maximum(MAX_SCORE // 3 - whole_free, whole_free)
        share_gpu: IntArray | None = None
        if kind is GpuKind.WHOLE:
            used_score = np.maximum(MAX_SCORE // 2 - request.gpus, MAX_SCORE // 3)
            scores = np.where(idle, idle_score, used_score)
        else:
            share_gpu = tightest_share_gpu(state, request, rows)
            tight = usable_free(state, rows)[np.arange(rows.size), share_gpu]
            on_shared = np.maximum(MAX_SCORE - (tight * 100 // GPU_MILLI) // 10, MAX_SCORE // 2)
            on_free = MAX_SCORE // 2 - 1
            scores = np.where(idle, idle_score, np.where(tight == GPU_MILLI, on_free, on_shared))
        return Scored(scores.astype(np.float64), gpu_choices(state, request, rows, share_gpu))


def request_class(gpus: int, milli: int) -> int:
    """The GPU-request class of a pod for clustering: 0 for a share, k for k whole GPUs, -1 for none."""
    if gpus == 0 and milli == 0:
        return -1
    return 0 if milli < GPU_MILLI else gpus


class ClusteringPolicy:
    """Nodes already hosting pods of the same GPU-request class first; fuller nodes first in a tier.

    Tiers: only this class on the node, this class among others, an idle node, other classes only.
    """

    name = "clustering"

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._counts = np.zeros((0, 0), dtype=np.int64)
        # Rows counted so far: a node's pods placed before this policy was told of them (another cycle,
        # a new fleet) are counted when the node is first scored after that.
        self._counted = 0
        self._state: FleetState | None = None

    def _ensure(self, state: FleetState) -> None:
        if state is not self._state:
            self._state, self._counted = state, 0
        rows, classes = state.n_rows, state.max_gpus + 1
        if self._counts.shape[0] < rows or self._counts.shape[1] < classes:
            grown = np.zeros((max(rows, 2 * self._counts.shape[0]), classes), dtype=np.int64)
            grown[: self._counts.shape[0], : self._counts.shape[1]] = self._counts
            self._counts = grown
        while self._counted < rows:
            self._count(state, self._counted)
            self._counted += 1

    def learn(self, request: PodRequest) -> None:
        """The score depends on the pods on each node, not on the workload seen so far."""

    def invalidate(self) -> None:
        self._counted = 0

    def observe(self, state: FleetState, row: int) -> None:
        self._ensure(state)
        self._count(state, row)

    def _count(self, state: FleetState, row: int) -> None:
        counts = np.zeros(self._counts.shape[1], dtype=np.int64)
        for pod in state.node_pods[row]:
            alloc = state.allocations[pod]
            cls = request_class(len(alloc.gpus), alloc.milli)
            if cls >= 0:
                counts[cls] += 1
        self._counts[row] = counts

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        self._ensure(state)
        cls = request_class(request.gpus or (1 if request.gpu_milli else 0), request.gpu_milli or GPU_MILLI)
        if request.kind not in (GpuKind.WHOLE, GpuKind.SHARE) or cls < 0:
            return Scored(np.zeros(rows.size, dtype=np.float64), gpu_choices(state, request, rows))
        counts = self._counts[rows]
        same = counts[:, cls] > 0
        kinds = (counts > 0).sum(axis=1)
        fullness = (MAX_SCORE // 4) * (REF_GPU_MILLI - usable_free(state, rows).sum(axis=1)) // REF_GPU_MILLI
        tier = np.where(same, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0))
        scores = fullness + tier * (MAX_SCORE // 4)
        return Scored(scores.astype(np.float64), gpu_choices(state, request, rows))


class SpreadPolicy(StatelessPolicy):
    """Least allocated first (the inference default): the most free CPU, memory and GPU after placement."""

    name = "spread"

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        cpu_cap = np.maximum(state.cpu_cap[rows], 1)
        mem_cap = np.maximum(state.mem_cap[rows], 1)
        gpu_cap = np.maximum(state.gpu_count[rows] * GPU_MILLI, 1)
        cpu = (state.cpu_free[rows] - request.cpu_milli) / cpu_cap
        mem = (state.mem_free[rows] - request.memory_mib) / mem_cap
        gpu = gpu_left_after(state, request, rows) / gpu_cap
        scores = np.asarray((cpu + mem + gpu) / 3.0, dtype=np.float64)
        share_gpu = loosest_share_gpu(state, request, rows) if request.kind is GpuKind.SHARE else None
        return Scored(scores, gpu_choices(state, request, rows, share_gpu))
