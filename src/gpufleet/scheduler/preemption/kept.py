"""Each queue's candidates, kept on the cache across cycles and checked against what they came from.

Every preemptor of a tree looks at the same borrowing queues, cycle after cycle: a queue's candidate
list is computed once and reused while its members are the same objects (docs/scheduling.md decision
19); only the lost work, which depends on the time, is computed again when the time moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.scheduler.cache import Admitted, Snapshot
from gpufleet.scheduler.flavors import Assignment, usage_of
from gpufleet.scheduler.preemption.order import Candidate, victim_order
from gpufleet.scheduler.preemption.pool import PoolPart
from gpufleet.scheduler.queueing import QueueSettings
from gpufleet.scheduler.workload import Workload


class ListKey(NamedTuple):
    """A kept list's key in `ClusterCache.candidate_lists`."""

    queue: str
    cause: str


class _Token(NamedTuple):
    """What a kept list holds for, besides its members: changed only between cycles."""

    epoch: int
    """The queue's epoch (`ClusterCache.queue_epochs`)."""
    generation: int
    """The fleet's nodes (`FleetState.generation`)."""
    settings: QueueSettings


class _Check(NamedTuple):
    """When a kept list was last found to hold."""

    serial: int
    """The snapshot's (`Snapshot.serial`: one per cycle)."""
    charges: int
    """The queue's charge count (`ClusterCache.charges`)."""


_NEVER = _Check(-1, -1)


_Member = tuple[str, Admitted, Workload, Assignment]
"""A member as a kept list saw it: name, and its `Admitted`, `Workload` and `Assignment` objects."""


@dataclass(slots=True)
class KeptList:
    """One queue's candidates for one cause, as last computed, and what they were computed from."""

    token: _Token
    members: tuple[_Member, ...]
    candidates: list[Candidate]
    """Every preemptible member not admitted in the cycle that computed them, minimum runtime or not."""
    removed: tuple[int | None, ...]
    """Per candidate, the milli-GPU it gives up (None: all of its workload's)."""
    now: float
    """The time the candidates' lost work is computed for (NaN: not yet)."""
    checked: _Check = _NEVER
    """The last check that found the members unchanged."""
    part: PoolPart | None = None
    """The candidates in victim order and grouped per node, as timed at `now` (built on first use)."""

    def holds(self, snapshot: Snapshot, queue: str, token: _Token) -> bool:
        """Whether the queue still has exactly these members, unchanged (the same objects).

        Inside a cycle every change of members charges or refunds the queue (`ClusterCache.charges`),
        so a check at the same count in the same cycle stands; the world may replace a workload between
        cycles (a checkpoint) without one, so each cycle checks once in full."""
        cache = snapshot.cache
        if token != self.token:
            return False
        checked = _Check(snapshot.serial, cache.charges.get(queue, 0))
        if checked == self.checked:
            return True
        if len(cache.by_queue.get(queue, ())) != len(self.members):
            return False
        admitted = cache.admitted
        for name, held, workload, assignment in self.members:
            now = admitted.get(name)
            if now is not held or now.workload is not workload or now.assignment is not assignment:
                return False
        self.checked = checked
        return True


def kept_candidates(
    snapshot: Snapshot, queue: str, cause: str, *, now: float
) -> tuple[list[Candidate], PoolPart | None]:
    """A queue's workloads that any preemptor may take from (preemptible, past the minimum runtime,
    not admitted in this cycle) as `cause` candidates, and, when that is the whole kept list, its
    `PoolPart` (sorted and grouped per node once for every preemptor that takes the list whole).

    Kept on the cache across cycles (every preemptor of a tree looks at the same borrowing queues, cycle
    after cycle): reused while the queue's members are the same objects (an admission, eviction, shrink
    or checkpoint replaces one), its settings and the fleet's nodes unchanged; only the lost work, which
    depends on the time, is computed again when the time moved (and the part built again).
    """
    cache = snapshot.cache
    key = ListKey(queue, cause)
    settings = cache.settings[queue]
    found = cache.candidate_lists.get(key)
    # Found unchanged in this cycle at this charge count: it holds (settings, the fleet's nodes and the
    # queue's epoch change only between cycles), so not even the token is built.
    if not (
        isinstance(found, KeptList) and found.checked == _Check(snapshot.serial, cache.charges.get(queue, 0))
    ):
        token = _Token(cache.queue_epochs.get(queue, 0), cache.fleet.generation, settings)
        if not (isinstance(found, KeptList) and found.holds(snapshot, queue, token)):
            found = _compute(snapshot, queue, cause, token)
            cache.candidate_lists[key] = found
    if found.now != now:
        for candidate, removed in zip(found.candidates, found.removed, strict=True):
            candidate.lost_gpu_seconds = candidate.admitted.lost_gpu_seconds(now, removed)
            candidate.order = victim_order(candidate)
        found.now = now
        if found.part is not None:
            found.part.retimed()
    min_runtime = settings.min_runtime_seconds
    if min_runtime <= 0:
        if found.part is None:
            found.part = PoolPart(found.candidates, shared=True)
        return found.candidates, found.part
    return [c for c in found.candidates if now - _started(c.admitted, now) >= min_runtime], None


def _started(admitted: Admitted, now: float) -> float:
    started = admitted.workload.admitted_at
    return started if started is not None else now


def _compute(snapshot: Snapshot, queue: str, cause: str, token: _Token) -> KeptList:
    """The queue's members as they are now and the candidates they give (timed by the caller)."""
    cache = snapshot.cache
    members: list[_Member] = []
    out: list[Candidate] = []
    removed: list[int | None] = []
    for name in cache.by_queue.get(queue, ()):
        admitted = cache.admitted[name]
        workload = admitted.workload
        members.append((name, admitted, workload, admitted.assignment))
        if not workload.preemptible or name in snapshot.assumed:
            continue
        shrink = _shrink_of(admitted) if _elastic(workload) else None
        if shrink is not None:
            pods, counts = shrink
            rows = tuple(dict.fromkeys(admitted.pods[pod].node for pod in pods))
            out.append(Candidate(admitted, "shrink", cause, 0.0, pods, counts, rows))
            removed.append(admitted.assignment.gpu_milli - milli_at(admitted, counts))
        gpus: dict[int, int] = {}
        for alloc in admitted.pods.values():
            gpus[alloc.node] = gpus.get(alloc.node, 0) + len(alloc.gpus)
        out.append(Candidate(admitted, "evict", cause, 0.0, (), (), tuple(gpus), tuple(gpus.values())))
        removed.append(None)
    return KeptList(token, tuple(members), out, tuple(removed), float("nan"))


def _elastic(workload: Workload) -> bool:
    return any(ps.min_count is not None and ps.min_count < ps.count for ps in workload.pod_sets)


def milli_at(admitted: Admitted, counts: Sequence[int]) -> int:
    return sum(usage_of(admitted.workload, admitted.assignment.model, counts).values())


def _shrink_of(admitted: Admitted) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """The pods beyond each pod set's minimum (highest indices go first) and the counts left."""
    workload = admitted.workload
    pods: list[str] = []
    counts: list[int] = []
    for pod_set, count in zip(workload.pod_sets, admitted.assignment.counts, strict=True):
        keep = min(count, pod_set.minimum)
        held = sorted(
            (pod for pod in admitted.pods if pod.startswith(f"{workload.name}/{pod_set.name}/")),
            key=lambda pod: int(pod.rpartition("/")[2]),
        )
        pods.extend(held[keep:])
        counts.append(keep)
    return (tuple(pods), tuple(counts)) if pods else None
