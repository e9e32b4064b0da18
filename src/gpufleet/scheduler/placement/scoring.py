"""Scoring policies: among the nodes that passed the filters, which is best for one pod, and on which GPUs.

A policy scores the candidate rows all at once (numpy over rows) and says, per row, which GPUs it would
take there. The placer calls, per pod: `filter_nodes` -> `policy.score(rows)` -> `pick` ->
`state.allocate(...)` -> `policy.observe(row)`, and once the pod is placed for good `policy.learn(request)`.
`observe` lets a policy keep per-node values cached (fragmentation, for instance) and refresh only the rows
that changed; `learn` lets it model the workload it is placing.

Policies live in `score_*.py` modules and are listed by name in `policies.py`; this module holds the
interface and the GPU-choice helpers they share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, overload

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import share_fit

Rows = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Gpus = tuple[int, ...]


class LazyGpus(Sequence[Gpus]):
    """Per candidate row, the GPUs a policy would take; computed only for the rows someone looks at.

    Scoring touches every feasible node, but only the picked one is allocated, so building a tuple per
    row would cost more than the scoring itself on large fleets.
    """

    __slots__ = ("_cache", "_choose", "_count")

    def __init__(self, count: int, choose: Callable[[int], Gpus]) -> None:
        self._count = count
        self._choose = choose
        self._cache: dict[int, Gpus] = {}

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Gpus: ...
    @overload
    def __getitem__(self, index: slice) -> list[Gpus]: ...
    def __getitem__(self, index: int | slice) -> Gpus | list[Gpus]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        found = self._cache.get(index)
        if found is None:
            found = self._choose(index)
            self._cache[index] = found
        return found

    def __iter__(self) -> Iterator[Gpus]:
        return (self[i] for i in range(self._count))


@dataclass(slots=True)
class Scored:
    """A policy's verdict on the candidate rows: one score per row (higher is better) and GPUs per row."""

    scores: FloatArray
    gpus: Sequence[Gpus]


class ScorePolicy(Protocol):
    """A placement scoring policy, built once per scheduler and kept for its lifetime.

    `observe` is called after any allocation or release on `row`; `learn` once per pod placed, whichever
    policy placed it (so a policy that models the workload sees the whole workload, not only the class it
    places); `invalidate` when the fleet may have changed without `observe` (the world carried out the
    last cycle's decisions, nodes came and went): per-node caches must no longer be trusted (rebuilt, or
    checked against the fleet), while what was learnt stays.
    """

    name: str

    def score(self, state: FleetState, request: PodRequest, rows: Rows) -> Scored: ...

    def observe(self, state: FleetState, row: int) -> None: ...

    def learn(self, request: PodRequest) -> None: ...

    def invalidate(self) -> None: ...


def pick(scored: Scored, rng: np.random.Generator, rank: IntArray | None = None) -> int:
    """Index (into the scored rows) of the best score.

    Ties go to the candidate with the lowest `rank` when one is given (a fixed node order, as the FGD
    paper's simulator breaks ties: its scheduler takes the first best node in an order drawn once per
    run), else to one drawn uniformly at random. The two differ a lot for policies that give many nodes
    the same score: a fixed order keeps filling the same nodes, random draws spread the pods out.
    """
    scores = scored.scores
    if scores.size == 0:
        raise ValueError("no candidate to pick from")
    best = np.flatnonzero(scores == scores.max())
    if best.size == 1:
        return int(best[0])
    if rank is not None:
        return int(best[np.argmin(rank[best])])
    return int(best[rng.integers(best.size)])


# ------------------------------------------------------------------ GPU choice helpers
def whole_gpus(state: FleetState, row: int, count: int) -> Gpus:
    """`count` free whole GPUs of `row`, inside one NVLink domain when any domain has enough.

    Among the domains that fit, the one with the fewest free GPUs is used, so larger free domains stay
    whole for later multi-GPU pods; inside it (and in the fallback) the lowest indices are taken.
    """
    gpus = int(state.gpu_count[row])
    # A node's few GPUs: Python lists do this in a fraction of the numpy calls' fixed cost.
    milli, ok = state.gpu_free[row, :gpus].tolist(), state.gpu_ok[row, :gpus].tolist()
    free = [g for g in range(gpus) if milli[g] == GPU_MILLI and ok[g]]
    if len(free) < count:
        raise ValueError(f"row {row} has only {len(free)} free GPUs, {count} asked")
    nvlink = state.nvlink[row, :gpus].tolist()
    domains: dict[int, list[int]] = {}
    for g in free:
        if nvlink[g] >= 0:
            domains.setdefault(nvlink[g], []).append(g)
    best: Gpus | None = None
    best_size = 0
    for dom in sorted(domains):
        members = domains[dom]
        if len(members) >= count and (best is None or len(members) < best_size):
            best = tuple(members[:count])
            best_size = len(members)
    return best if best is not None else tuple(free[:count])


def share_gpu_free(state: FleetState, request: PodRequest, rows: Rows) -> IntArray:
    """Per row and GPU, the free milli where this share pod fits, and -1 where it does not."""
    fits = share_fit(state, request, rows)
    return np.where(fits, state.gpu_free[rows], -1)


def tightest_share_gpu(state: FleetState, request: PodRequest, rows: Rows) -> IntArray:
    """Per row, the fitting GPU with the least free milli (lowest index on ties): best fit."""
    free = share_gpu_free(state, request, rows)
    masked = np.where(free >= 0, free, np.iinfo(np.int64).max)
    return np.asarray(masked.argmin(axis=1), dtype=np.int64)


def loosest_share_gpu(state: FleetState, request: PodRequest, rows: Rows) -> IntArray:
    """Per row, the fitting GPU with the most free milli (lowest index on ties): worst fit."""
    free = share_gpu_free(state, request, rows)
    return np.asarray(free.argmax(axis=1), dtype=np.int64)


def gpu_choices(
    state: FleetState, request: PodRequest, rows: Rows, share_gpu: IntArray | None = None
) -> Sequence[Gpus]:
    """The GPUs per row: whole GPUs by `whole_gpus`, a share on `share_gpu[i]` (best fit when None)."""
    kind = request.kind
    count = int(rows.size)
    if kind is GpuKind.WHOLE:
        return LazyGpus(count, lambda i: whole_gpus(state, int(rows[i]), request.gpus))
    if kind is GpuKind.SHARE:
        chosen = tightest_share_gpu(state, request, rows) if share_gpu is None else share_gpu
        return LazyGpus(count, lambda i: (int(chosen[i]),))
    return LazyGpus(count, lambda i: ())


def usable_free(state: FleetState, rows: Rows) -> IntArray:
    """Free milli per GPU of each row, zero for unhealthy GPUs."""
    return np.where(state.gpu_ok[rows], state.gpu_free[rows], 0)
