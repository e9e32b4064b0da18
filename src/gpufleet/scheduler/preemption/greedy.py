"""Kueue's greedy minimal set: give up candidates in victim order until the preemptor fits, then add
back those not needed; and applying a chosen set to the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.scheduler.cache import Snapshot
from gpufleet.scheduler.preemption.order import WITHIN_QUEUE, Candidate, VictimSet
from gpufleet.scheduler.preemption.policy import borrows_any

Fits = Callable[[], bool]


def apply_candidate(snapshot: Snapshot, candidate: Candidate) -> None:
    """Takes `candidate` on the snapshot: shrinks its workload, or evicts it."""
    if candidate.kind == "shrink":
        snapshot.shrink(candidate.name, list(candidate.pods), candidate.counts)
    else:
        snapshot.remove(candidate.name)


def _still_applicable(snapshot: Snapshot, candidate: Candidate, flavors: set[str], removed: set[str]) -> bool:
    if candidate.name in removed:
        return False
    if candidate.kind == "evict" and candidate.name not in snapshot.cache.admitted:
        return False
    return candidate.cause == WITHIN_QUEUE or borrows_any(snapshot, candidate.admitted.queue, flavors)


def greedy_set(
    snapshot: Snapshot,
    ordered: Sequence[Candidate],
    fits: Fits,
    flavors: set[str],
    allowed: Callable[[Candidate], bool] | None = None,
) -> list[Candidate] | None:
    """Gives up candidates in order until `fits`, then adds back the unneeded; rolls everything back.
    `allowed`: a further test of each candidate, on the snapshot with those before it given up."""
    start = snapshot.mark()
    taken: list[Candidate] = []
    removed: set[str] = set()
    found = False
    for candidate in ordered:
        if not _still_applicable(snapshot, candidate, flavors, removed):
            continue
        if allowed is not None and not allowed(candidate):
            continue
        if candidate.kind == "evict" and any(c.name == candidate.name for c in taken):
            # Evicting a workload already shrunk here: undo nothing, evict what is left of it.
            pass
        apply_candidate(snapshot, candidate)
        if candidate.kind == "evict":
            removed.add(candidate.name)
        taken.append(candidate)
        if fits():
            found = True
            break
    snapshot.rollback(start)
    if not found:
        return None
    return _minimal(snapshot, taken, fits)


def _minimal(snapshot: Snapshot, taken: list[Candidate], fits: Fits) -> list[Candidate]:
    """Drops every candidate the preemptor does not need, trying the most expensive first."""
    needed = list(taken)
    for candidate in reversed(taken[:-1]):
        trial = [c for c in needed if c is not candidate]
        # A shrink of a workload that is evicted anyway adds nothing; an evict without its shrink works.
        start = snapshot.mark()
        for c in trial:
            if c.kind == "evict" or c.name in snapshot.cache.admitted:
                apply_if_held(snapshot, c)
        ok = fits()
        snapshot.rollback(start)
        if ok:
            needed = trial
    return needed


def apply_if_held(snapshot: Snapshot, candidate: Candidate) -> None:
    admitted = snapshot.cache.admitted.get(candidate.name)
    if admitted is None:
        return
    if candidate.kind == "shrink":
        if all(pod in admitted.pods for pod in candidate.pods):
            snapshot.shrink(candidate.name, list(candidate.pods), candidate.counts)
    else:
        snapshot.remove(candidate.name)


def apply_victims(snapshot: Snapshot, victims: VictimSet) -> None:
    """Applies a chosen set to the snapshot (its capacity is then the preemptor's for the cycle)."""
    for candidate in victims.victims:
        apply_if_held(snapshot, candidate)  # its queue's candidate lists no longer hold (see `holds`)
