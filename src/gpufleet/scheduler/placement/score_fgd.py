"""Fragmentation gradient descent (FGD, Weng et al., USENIX ATC 2023).

The fragmentation of a node, measured against a typical workload, is the expected amount of idle GPU
milli that a typical pod could not use there. For a pod shape p with frequency f_p:
frag_p(node) = all idle GPU milli if p cannot fit on the node at all (CPU, GPU count, model) or p asks for
no GPU, else the idle milli of the GPUs whose free milli is below p's per-GPU request.
F(node) = sum_p f_p * frag_p(node). FGD places a pod where F grows the least: score = F_before - F_after,
and a sharing pod takes the GPU with the best score on that node.

As in the paper's simulator: the typical workload is built from the trace's own pods, CPU-only pods
included, before the workload is resized; a CPU-only pod changes F only through the CPU it takes, so it
gets the neutral score (50 in integer points) on every node where each typical pod still fits as well
as before, and the tie rule of `pick` chooses among those.

Per node the policy caches, per typical shape, the number of GPUs that could host the shape and the
idle milli of those that could not; `observe` refreshes one row after an allocation, so scoring a pod
costs O(candidates x shapes) without rebuilding anything.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.fleet.state import DYNAMIC_CODE, FleetState
from gpufleet.scheduler.placement.scoring import (
    BoolArray,
    FloatArray,
    IntArray,
    Rows,
    Scored,
    gpu_choices,
    share_gpu_free,
    usable_free,
)

MAX_SCORE = 100
_NO_ROWS: Rows = np.zeros(0, dtype=np.intp)
# Rows marked changed that are kept for the next `sync` before it compares every row instead.
DIRTY_LIMIT = 4096
# Rows written since the last scoring up to which a recheck recomputes them without comparing first.
FEW_ROWS = 16
# Node states whose values a model keeps (`FragmentationModel._refresh_row`) before it starts afresh.
ROW_MEMO = 4096


@dataclass(frozen=True, slots=True, order=True)
class PodShape:
    """What fragmentation looks at in a pod: CPU, per-GPU milli, GPU count and allowed models."""

    cpu_milli: int
    gpu_milli: int
    gpus: int
    models: tuple[str, ...] = ()

    @classmethod
    def of(cls, request: PodRequest) -> PodShape:
        if request.kind is GpuKind.WHOLE:
            return cls(request.cpu_milli, GPU_MILLI, request.gpus, request.gpu_models)
        if request.kind is GpuKind.SHARE:
            return cls(request.cpu_milli, request.gpu_milli, 1, request.gpu_models)
        return cls(request.cpu_milli, 0, 0, ())


@dataclass(frozen=True, slots=True)
class TypicalWorkload:
    """Pod shapes with their frequencies (summing to 1): the workload fragmentation is measured against."""

    shapes: tuple[PodShape, ...]
    weights: tuple[float, ...]

    @classmethod
    def from_counts(cls, counts: dict[PodShape, float], coverage: float = 0.95) -> TypicalWorkload:
        """The most frequent shapes covering `coverage` of the total count, renormalised.

        Equal counts are ordered by the larger shape first, so the cut does not depend on input order.
        """
        total = float(sum(counts.values()))
        if total <= 0:
            return cls((), ())
        ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
        chosen: list[tuple[PodShape, float]] = []
        covered = 0.0
        for shape, count in ranked:
            if covered >= coverage * total:
                break
            chosen.append((shape, count))
            covered += count
        return cls(tuple(s for s, _ in chosen), tuple(c / covered for _, c in chosen))

    @classmethod
    def from_requests(cls, requests: Iterable[PodRequest], coverage: float = 0.95) -> TypicalWorkload:
        """The typical workload of a list of pod requests ("the shapes covering 95% of the pods")."""
        counts = Counter(PodShape.of(r) for r in requests)
        return cls.from_counts(dict(counts), coverage)

    def __len__(self) -> int:
        return len(self.shapes)


class FragmentationModel:
    """Per-node fragmentation against one typical workload, cached and refreshed row by row.

    With `by_capacity`, a shape weighs its frequency times the fleet's GPUs over the GPUs of the nodes
    it may use (its GPU models): its demand per GPU it can use. A shape that may use every node keeps
    its frequency (fleets where no pod names a model are scored as before). A shape restricted to a
    model that few nodes have weighs more, so the idle milli of those nodes, which it needs, counts more
    than pods of other shapes taking it: pods that may go elsewhere leave the scarce model to those that
    cannot (FGD's own weights, the frequencies, let any-model pods fill a scarce model first).
    """

    def __init__(self, typical: TypicalWorkload, *, by_capacity: bool = False) -> None:
        self.typical = typical
        shapes = typical.shapes
        self.frequencies = np.array(typical.weights, dtype=np.float64)
        self.weights = self.frequencies.copy()
        self.by_capacity = by_capacity
        self.cpu = np.array([s.cpu_milli for s in shapes], dtype=np.int64)
        self.milli = np.array([s.gpu_milli for s in shapes], dtype=np.int64)
        self.count = np.array([s.gpus for s in shapes], dtype=np.int64)
        self.cpu_only = self.milli == 0
        self._gpu_shape = ~self.cpu_only
        self._state: FleetState | None = None
        self._rows = 0
        self._generation = -1
        self._recheck = False
        self._touched = -1
        """The fleet's `touched` mark when every row was last known to agree with what the model saw
        (-1: never): a recheck compares only the rows written since."""
        # Rows allocated on or released since the last `sync`, recomputed together there: a what-if
        # that places and rolls back many pods between two scorings costs a list append per change.
        self._dirty: list[int] = []
        self._row_memo: dict[tuple[bytes, int, int], tuple[IntArray, IntArray, np.int64, FloatArray]] = {}
        """A row's values by what they are computed from, under the current weights (`_refresh_row`)."""
        k = len(shapes)
        self.access = np.zeros((0, k), dtype=np.bool_)
        # Per row, a number for its `access` row (rows with equal access rows get the same one; `row_key`).
        self.access_id = np.zeros(0, dtype=np.int64)
        self._access_ids: dict[bytes, int] = {}
        self.fit_gpus = np.zeros((0, k), dtype=np.int64)
        self.stranded = np.zeros((0, k), dtype=np.int64)
        self.idle = np.zeros(0, dtype=np.int64)
        self.frag = np.zeros(0, dtype=np.float64)
        # What each row's scores were computed from (usable free milli per GPU, free CPU, and pods per
        # GPU where replicas limit them: a time-slicing or MPS GPU with no replica left takes no share
        # pod whatever its free milli), to find the rows that changed behind the model's back (`recheck`).
        self._free_seen = np.zeros((0, 0), dtype=np.int64)
        self._cpu_seen = np.zeros(0, dtype=np.int64)
        self._pods_seen = np.zeros((0, 0), dtype=np.int64)

    # ------------------------------------------------------------------ cache
    def sync(self, state: FleetState) -> Rows | None:
        """Brings the cache up to date: every row for a new state or fleet generation (nodes added,
        removed, relabelled), then the rows a `recheck` finds changed, then rows not seen yet.

        Returns the rows recomputed because they had or may have changed (new rows aside; a few rows
        the fleet's journal names are recomputed without a comparison), or None when every row was (a
        caller with caches of its own drops them all).
        """
        changed: Rows | None = _NO_ROWS
        if self._state is not state or self._generation != state.generation:
            self._state, self._rows, self._generation = state, 0, state.generation
            self._recheck = False
            self._dirty.clear()
            self._touched = state.touched.mark()
            changed = None
        elif self._recheck:
            self._recheck = False
            # The rows marked since stay changed whatever the comparison finds.
            dirty = set(self._dirty)
            self._dirty.clear()
            touched = state.touched.since(self._touched) if self._touched >= 0 else None
            self._touched = state.touched.mark()
            if touched is not None and len(touched) + len(dirty) <= FEW_ROWS:
                # Nearly every row written since has changed, and comparing a few rows costs more than
                # recomputing them: they are recomputed, to the same values where nothing changed.
                rows = self._rows
                changed = np.array(sorted(r for r in dirty.union(touched) if r < rows), dtype=np.intp)
            else:
                candidates = None if touched is None else np.unique(np.asarray(touched, dtype=np.intp))
                kept = np.array(sorted(dirty), dtype=np.intp)
                changed = np.union1d(self._changed_rows(state, candidates), kept[kept < self._rows])
            if changed.size:
                self._refresh(state, changed)
        elif len(self._dirty) == 1 and self._dirty[0] < self._rows:
            # The usual case in a stream: one placement since the last scoring.
            row = self._dirty.pop()
            changed = np.array([row], dtype=np.intp)
            self._refresh_row(state, row)
        elif self._dirty:
            marked = np.array(sorted(set(self._dirty)), dtype=np.intp)  # a few rows: cheaper than np.unique
            self._dirty.clear()
            changed = marked[marked < self._rows]
            if changed.size:
                self._refresh(state, changed)
        n = state.n_rows
        if n > self._rows:
            if self.idle.size < n or self._free_seen.shape[1] != state.gpu_free.shape[1]:
                self._grow(max(n, 2 * self.idle.size), state.gpu_free.shape[1])
            new = np.arange(self._rows, n, dtype=np.intp)
            self.access[new] = self._access(state, new)
            ids = self._access_ids
            self.access_id[new] = [ids.setdefault(a.tobytes(), len(ids)) for a in self.access[new]]
            if self.by_capacity and self._reweigh(state, n):
                # Every row's fragmentation changes with the weights.
                new = np.arange(n, dtype=np.intp)
                changed = None
            self._refresh(state, new)
            self._rows = n
        return changed

    def _reweigh(self, state: FleetState, n: int) -> bool:
        """Weights by demand per usable GPU (see the class); whether they changed."""
        gpus = np.where(state.alive[:n], state.gpu_count[:n], 0).astype(np.float64)
        usable = (self.access[:n] * gpus[:, None]).sum(axis=0)
        # A shape no node can host changes no node's ranking; it keeps its frequency.
        scale = np.where(usable > 0, gpus.sum() / np.maximum(usable, 1.0), 1.0)
        weights = self.frequencies * scale
        if np.array_equal(weights, self.weights):
            return False
        self.weights = weights
        self._row_memo.clear()
        return True

    def recheck(self) -> None:
        """The fleet may have changed without `refresh` (between two scheduling cycles): the next `sync`
        recomputes the rows marked changed meanwhile and the rows the fleet's journal names since the
        last one (up to `FEW_ROWS` of them at once; more are first compared with what they were
        computed from, and every row is when the journal forgot some)."""
        self._recheck = True

    def _changed_rows(self, state: FleetState, candidates: Rows | None = None) -> Rows:
        """The rows (of `candidates`, sorted and unique, when given: every other row is known not to
        have changed) whose values differ from what the model computed them from."""
        n = self._rows
        rows: Rows = np.arange(n, dtype=np.intp) if candidates is None else candidates[candidates < n]
        free = np.where(state.gpu_ok[rows], state.gpu_free[rows], 0)
        differ = (free != self._free_seen[rows]).any(axis=1) | (state.cpu_free[rows] != self._cpu_seen[rows])
        differ |= (_limited_pods(state, rows) != self._pods_seen[rows]).any(axis=1)
        found: Rows = rows[differ]
        return found

    def refresh(self, state: FleetState, row: int) -> None:
        """Recomputes one row after an allocation or a release there."""
        self.sync(state)
        self._refresh(state, np.array([row], dtype=np.intp))

    def mark(self, row: int) -> None:
        """Row `row` changed (an allocation or a release there): recomputed at the next `sync`."""
        if len(self._dirty) >= DIRTY_LIMIT:
            # Changes pile up while nothing is scored (this policy's classes are not being placed):
            # comparing every row later costs less than keeping them all; the comparison covers all that
            # a row's scores depend on, so the marks can go.
            self._dirty.clear()
            self._recheck = True
            return
        self._dirty.append(row)

    def _grow(self, size: int, gpus: int) -> None:
        def grown(arr: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
            out = np.zeros((size, *arr.shape[1:]), dtype=arr.dtype)
            out[: arr.shape[0]] = arr
            return out

        self.access = grown(self.access)  # type: ignore[assignment]
        self.access_id = grown(self.access_id)  # type: ignore[assignment]
        self.fit_gpus = grown(self.fit_gpus)  # type: ignore[assignment]
        self.stranded = grown(self.stranded)  # type: ignore[assignment]
        self.idle = grown(self.idle)  # type: ignore[assignment]
        self.frag = grown(self.frag)  # type: ignore[assignment]
        self._cpu_seen = grown(self._cpu_seen)  # type: ignore[assignment]
        free_seen = np.zeros((size, gpus), dtype=np.int64)
        pods_seen = np.zeros((size, gpus), dtype=np.int64)
        if self._free_seen.shape[1] == gpus:
            free_seen[: self._free_seen.shape[0]] = self._free_seen
            pods_seen[: self._pods_seen.shape[0]] = self._pods_seen
        self._free_seen = free_seen
        self._pods_seen = pods_seen

    def row_key(self, rows: Rows) -> IntArray:
        """Per row, columns that determine everything the model keeps for it (`fit_gpus`, `stranded`,
        `idle`, `frag`, `access`): rows equal on them are equal on those (after `sync`)."""
        return np.concatenate(
            (self._free_seen[rows], self._cpu_seen[rows, None], self.access_id[rows, None]), axis=1
        )

    def _access(self, state: FleetState, rows: Rows) -> BoolArray:
        access = np.ones((rows.size, len(self.typical)), dtype=np.bool_)
        node_models = state.model[rows]
        for k, shape in enumerate(self.typical.shapes):
            if shape.models:
                codes = np.array([state.model_id(m) for m in shape.models], dtype=np.int64)
                access[:, k] = np.isin(node_models, codes[codes >= 0])
        access &= (state.gpu_count[rows] > 0)[:, None]
        return access

    def _refresh(self, state: FleetState, rows: Rows) -> None:
        if rows.size == 1:
            self._refresh_row(state, int(rows[0]))
            return
        free = usable_free(state, rows)
        self._free_seen[rows] = free
        self._cpu_seen[rows] = state.cpu_free[rows]
        self._pods_seen[rows] = _limited_pods(state, rows)
        enough = free[:, :, None] >= self.milli[None, None, :]
        fit_gpus = self.fit_gpus[rows] = enough.sum(axis=1)
        stranded = self.stranded[rows] = np.where(enough, 0, free[:, :, None]).sum(axis=1)
        idle = self.idle[rows] = free.sum(axis=1)
        self.frag[rows] = self.amount(idle, state.cpu_free[rows], fit_gpus, stranded, self.access[rows])

    def _refresh_row(self, state: FleetState, row: int) -> None:
        """`_refresh` of one row with plain indexing, which costs less than gathering arrays of one row: a
        stream of placements refreshes one row at a time. The same operations, so the same values.

        A row's values follow from its usable free milli per GPU, its free CPU, its access row and the
        weights: nodes pass through the same few states again and again (empty, one pod, ...), so the
        values of each state are kept (`_row_memo`) until the weights change."""
        free = np.where(state.gpu_ok[row], state.gpu_free[row], 0)
        cpu_free = state.cpu_free[row]
        pods = state.gpu_pods[row] if state.mode[row] != DYNAMIC_CODE else 0
        self._free_seen[row] = free
        self._cpu_seen[row] = cpu_free
        self._pods_seen[row] = pods
        key = (free.tobytes(), int(cpu_free), int(self.access_id[row]))
        known = self._row_memo.get(key)
        if known is None:
            enough = free[:, None] >= self.milli
            fit_gpus = enough.sum(axis=0)
            stranded = np.where(enough, 0, free[:, None]).sum(axis=0)
            idle = free.sum()
            frag = self.amount(idle, cpu_free, fit_gpus, stranded, self.access[row])
            if len(self._row_memo) >= ROW_MEMO:
                self._row_memo.clear()
            known = self._row_memo[key] = (fit_gpus, stranded, idle, frag)
        self.fit_gpus[row], self.stranded[row], self.idle[row], self.frag[row] = known

    # ------------------------------------------------------------- formula
    def amount(
        self, idle: IntArray, cpu_free: IntArray, fit_gpus: IntArray, stranded: IntArray, access: BoolArray
    ) -> FloatArray:
        """F for nodes described by their idle milli, free CPU and per-shape GPU counts (leading dims)."""
        fits = access & self._gpu_shape & (cpu_free[..., None] >= self.cpu) & (fit_gpus >= self.count)
        per_shape = np.where(fits, stranded, idle[..., None])
        # A row's value must not depend on which other rows are computed with it (a matrix product may
        # round differently by batch size), or exact ties between nodes would break by rounding.
        return np.asarray((per_shape * self.weights).sum(axis=-1), dtype=np.float64)

    def gain(self, state: FleetState, request: PodRequest, rows: Rows) -> FloatArray:
        """Per row, F_before - F_after of placing a pod that takes no share (whole GPUs, CPU only)."""
        self.sync(state)
        cpu_after = state.cpu_free[rows] - request.cpu_milli
        fit, stranded, idle = self.fit_gpus[rows], self.stranded[rows], self.idle[rows]
        if request.kind is GpuKind.WHOLE:
            # Whole GPUs come from fully free ones, which count as usable for every shape.
            fit = fit - request.gpus
            idle = idle - request.gpus * GPU_MILLI
        elif request.kind is not GpuKind.NONE:
            return np.zeros(rows.size, dtype=np.float64)
        return self.frag[rows] - self.amount(idle, cpu_after, fit, stranded, self.access[rows])

    def share_gains(
        self, state: FleetState, request: PodRequest, rows: Rows
    ) -> tuple[IntArray, IntArray, FloatArray]:
        """For a sharing pod: candidate (row index, GPU) pairs and F_before - F_after of each.

        GPUs of one node with the same free milli give the same result, so only the lowest index of
        each free value is a candidate.
        """
        self.sync(state)
        free = share_gpu_free(state, request, rows)
        if rows.size == 1:
            return self._share_gains_row(state, request, int(rows[0]), free[0])
        # A GPU is a candidate unless a lower-index GPU of its node has the same free milli: a few
        # elementwise operations on (rows, GPUs, GPUs), cheaper than sorting each row.
        repeated = ((free[:, :, None] == free[:, None, :]) & _earlier(free.shape[1])).any(axis=2)
        cand_row, cand_gpu = np.nonzero(~repeated & (free >= 0))
        f_old = free[cand_row, cand_gpu][:, None]
        f_new = f_old - request.gpu_milli
        m = self.milli
        sub = rows[cand_row]
        fit = self.fit_gpus[sub] - (f_old >= m) + (f_new >= m)
        stranded = self.stranded[sub] - np.where(f_old < m, f_old, 0) + np.where(f_new < m, f_new, 0)
        idle = self.idle[sub] - request.gpu_milli
        cpu_after = state.cpu_free[sub] - request.cpu_milli
        after = self.amount(idle, cpu_after, fit, stranded, self.access[sub])
        return cand_row, cand_gpu.astype(np.int64), self.frag[sub] - after

    def _share_gains_row(
        self, state: FleetState, request: PodRequest, row: int, free: IntArray
    ) -> tuple[IntArray, IntArray, FloatArray]:
        """`share_gains` of one row with plain indexing (most scorings in a stream rescore the one node
        the last placement changed): the same candidates and operations, so the same values."""
        first_gpu: dict[int, int] = {}
        for gpu, milli in enumerate(free.tolist()):
            if milli >= 0:
                first_gpu.setdefault(milli, gpu)
        cand_gpu = np.array(sorted(first_gpu.values()), dtype=np.int64)
        f_old = free[cand_gpu][:, None]
        f_new = f_old - request.gpu_milli
        m = self.milli
        fit = self.fit_gpus[row] - (f_old >= m) + (f_new >= m)
        stranded = self.stranded[row] - np.where(f_old < m, f_old, 0) + np.where(f_new < m, f_new, 0)
        idle = self.idle[row] - request.gpu_milli
        cpu_after = state.cpu_free[row] - request.cpu_milli
        after = self.amount(idle, cpu_after, fit, stranded, self.access[row])
        return np.zeros(cand_gpu.size, dtype=np.intp), cand_gpu, self.frag[row] - after


@cache
def _earlier(gpus: int) -> BoolArray:
    """[g, h]: whether GPU h comes before GPU g."""
    return np.tri(gpus, k=-1, dtype=np.bool_)


def _limited_pods(state: FleetState, rows: Rows) -> IntArray:
    """Pods per GPU on the rows whose replicas limit them (time-slicing, MPS), zero elsewhere."""
    limited = state.mode[rows] != DYNAMIC_CODE
    return np.where(limited[:, None], state.gpu_pods[rows], 0)


# Rows up to which `best_per_row` loops in Python.
SCALAR_BEST_ROWS = 4


def best_per_row(
    count: int, cand_row: IntArray, cand_gpu: IntArray, values: FloatArray
) -> tuple[FloatArray, IntArray]:
    """Per row, the highest candidate value and its GPU (the lowest index among equal values); -inf and
    GPU 0 for a row without candidates. Values must not be NaN or -inf."""
    if count <= SCALAR_BEST_ROWS:
        # A few rows (a stream rescores one or two nodes per pod): a pass over the candidates in Python
        # costs less than the numpy calls below.
        top, top_gpu = [-math.inf] * count, [0] * count
        for row, cand, value in zip(cand_row.tolist(), cand_gpu.tolist(), values.tolist(), strict=True):
            if value > top[row] or (value == top[row] and cand < top_gpu[row]):
                top[row], top_gpu[row] = value, cand
        return np.array(top, dtype=np.float64), np.array(top_gpu, dtype=np.int64)
    # A row x GPU grid where non-candidates are -inf: argmax takes the first, lowest-index, best GPU.
    grid = np.full((count, int(cand_gpu.max(initial=0)) + 1), -np.inf, dtype=np.float64)
    grid[cand_row, cand_gpu] = values
    gpu = np.asarray(grid.argmax(axis=1), dtype=np.int64)
    return grid[np.arange(count), gpu], gpu


def reference_points(gain: FloatArray) -> FloatArray:
    """The reference simulator's integer node score: int(sigmoid(gain / 1000) * 100)."""
    return np.asarray(np.floor(MAX_SCORE / (1.0 + np.exp(-gain / GPU_MILLI))), dtype=np.float64)


class FgdPolicy:
    """FGD against a fixed typical workload (the trace's, as in the paper).

    With `integer_scores` (default) scores are the reference simulator's integer points, computed per
    GPU, so a sharing pod takes the lowest-index GPU among those with the best points; otherwise gains.
    """

    name = "fgd"

    def __init__(
        self, typical: TypicalWorkload | None = None, integer_scores: bool = True, seed: int | None = None
    ) -> None:
        if typical is None or not len(typical):
            raise ValueError("fgd needs a typical workload; pass typical=TypicalWorkload.from_requests(...)")
        self.model = FragmentationModel(typical)
        self.integer_scores = integer_scores
        self.seed = seed

    def observe(self, state: FleetState, row: int) -> None:
        self.model.refresh(state, row)

    def learn(self, request: PodRequest) -> None:
        """The typical workload is given, as in the paper: nothing to learn."""

    def invalidate(self) -> None:
        self.model.recheck()

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored:
        share_gpu: IntArray | None = None
        if request.kind is GpuKind.SHARE:
            cand_row, cand_gpu, gains = self.model.share_gains(state, request, rows)
            values = reference_points(gains) if self.integer_scores else gains
            scores, share_gpu = best_per_row(rows.size, cand_row, cand_gpu, values)
        else:
            gains = self.model.gain(state, request, rows)
            scores = reference_points(gains) if self.integer_scores else gains
        return Scored(scores, gpu_choices(state, request, rows, share_gpu))
