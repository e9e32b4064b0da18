"""The preemption memos never change a decision (docs/scheduling.md decisions 10 and 19).

The victim search keeps each queue's candidates across cycles (`ClusterCache.candidate_lists`, checked
against the members they were computed from) and, inside a cycle, reuses parts found usable whole, the
borrowing queues and a node index from one preemptor to the next (`Snapshot.memo`). A stale kept list
rarely crashes: it just decides differently. So the same random world is run three times, in lockstep:

- `kept`: as the scheduler runs;
- `per_cycle`: the kept lists dropped before every cycle (nothing carried across cycles);
- `per_search`: the kept lists and the cycle's memos dropped before every preemptor's search (nothing
  carried from one preemptor to the next either), and every node scope given its tight bound when it
  first comes first (none waits with a lower one, decision 10),

and every cycle must admit the same workloads on the same nodes and GPUs, preempt the same victims (pods,
counts and lost work) for the same preemptors, and give the same pending reasons. Placement draws from
the scheduler's random generator, so a search that tries one placement more or less than the reference
also shows as a difference in a later cycle.

The worlds are built to exercise the memo's checks: borrowers fill the fleet beyond their quota, lenders
reclaim with several arrivals per cycle, and between cycles time moves (sometimes not at all, so nothing
is re-timed), workloads finish, checkpoint or change priority (the same `Admitted` with a new
`Workload`), and nodes are cordoned.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Literal

import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler import cycle as cycle_module
from gpufleet.scheduler import preemption
from gpufleet.scheduler.cache import ClusterCache, Snapshot
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.preemption.bounds import Bounds
from gpufleet.scheduler.preemption.pool import PoolPart
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

H100 = "H100-80GB"
SEEDS = range(60)

Mode = Literal["kept", "per_cycle", "per_search"]
MODES: tuple[Mode, ...] = ("kept", "per_cycle", "per_search")

Admission = tuple[str, tuple[str, ...], tuple[tuple[str, int, tuple[int, ...]], ...]]
Preemption = tuple[str, str, tuple[str, ...], tuple[int, ...], float]
Decisions = tuple[tuple[Admission, ...], tuple[Preemption, ...], tuple[tuple[str, str, str], ...]]


def _decisions(result: CycleResult) -> Decisions:
    """What a user sees of a cycle: admissions with their nodes and GPUs, preemptions, pending reasons."""
    admitted = tuple(
        (
            admit.workload,
            admit.nodes,
            tuple(sorted((al.pod, al.node, al.gpus) for al in admit.allocations)),
        )
        for admit in result.admitted
    )
    preempted = tuple((p.victim, p.preemptor, p.pods, p.counts, p.lost_gpu_seconds) for p in result.preempted)
    pending = tuple(sorted((name, p.reason.type, p.reason.message) for name, p in result.pending.items()))
    return admitted, preempted, pending


class _World:
    """One random world; every random choice comes from its own generator, and the choices between
    cycles depend only on the cache, so worlds built from one seed stay alike while they decide alike."""

    def __init__(self, seed: int, mode: Mode) -> None:
        self.rng = random.Random(seed)
        self.mode = mode
        self.now = 100.0
        self.made = 0
        self.cache = self._cache()
        self.scheduler = Scheduler()
        self.cycles = self.rng.randint(6, 10)
        self._fill()

    # ------------------------------------------------------------ building
    def _cache(self) -> ClusterCache:
        rng = self.rng
        fleet = FleetState(("rack",))
        nodes = rng.randint(6, 12)
        for i in range(nodes):
            nvlink = ((0, 1, 2, 3), (4, 5, 6, 7)) if rng.random() < 0.3 else None
            fleet.add_node(
                NodeSpec(
                    f"n{i:02d}",
                    H100,
                    8,
                    512_000,
                    512_000,
                    labels={"rack": f"r{i % 3}"},
                    sharing=SharingMode.EXCLUSIVE,
                    nvlink_domains=nvlink,
                )
            )
        self.borrowers = [f"b{i}" for i in range(rng.randint(2, 4))]
        self.lenders = [f"l{i}" for i in range(rng.randint(2, 4))]
        total = self.total = nodes * 8
        # Borrowers hold little nominal quota (some with a borrowing limit), lenders the rest of the fleet
        # (some lending only part of it): reclaim has borrowers to take from, within their limits.
        lend = max(1, (total - 2 * len(self.borrowers)) // len(self.lenders))
        cohort = rng.random() < 0.4
        tree_nodes = [QuotaNode("root")] + ([QuotaNode("sub", "root")] if cohort else [])
        for name in self.borrowers:
            limits = FlavorLimits(rng.choice((0, 2, 2, 4)) * 1000, rng.choice((None, None, 16_000)))
            tree_nodes.append(
                QuotaNode(name, "sub" if cohort and rng.random() < 0.5 else "root", {H100: limits})
            )
        for name in self.lenders:
            limits = FlavorLimits(lend * 1000, None, rng.choice((None, None, 8_000)))
            tree_nodes.append(QuotaNode(name, "root", {H100: limits}))
        tree = QuotaTree(tree_nodes)
        settings = {
            name: QueueSettings(
                name,
                preemption=PreemptionPolicy(
                    within_queue=rng.choice(
                        ("LowerPriority", "LowerPriority", "Never", "LowerOrNewerEqualPriority")
                    ),
                    reclaim_within_cohort=rng.choice(("Any", "Any", "Any", "Any", "LowerPriority")),
                    borrow_within_cohort=rng.choice(("Never", "Never", "LowerPriority")),
                    max_priority_threshold=rng.choice((None, None, 1)),
                ),
                min_runtime_seconds=rng.choice((0.0, 0.0, 0.0, 0.0, 60.0)),
            )
            for name in tree.nodes
        }
        return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))

    def _submit(
        self, queue: str, gpus: int, pods: int, min_count: int | None, priority: int, topology: str | None
    ) -> None:
        request = PodRequest(cpu_milli=1000, memory_mib=1024, gpus=gpus)
        workload = Workload(
            f"w{self.made:03d}",
            (PodSet("main", pods, request, min_count=min_count),),
            queue=queue,
            priority=priority,
            topology=TopologyRequest(required=topology),
            preemptible=self.rng.random() > 0.05,
            submitted_at=self.now,
        )
        self.made += 1
        self.cache.submit(workload)

    def _fill(self) -> None:
        """Borrowers' low-priority work, up to the whole fleet: gangs, elastic workloads, one-pod jobs."""
        rng = self.rng
        for _ in range(rng.randint(self.total // 2, self.total)):
            pods = rng.choice((1, 1, 1, 2, 3))
            elastic = rng.randint(1, pods - 1) if pods > 1 and rng.random() < 0.5 else None
            topology = rng.choice(("host", "rack")) if rng.random() < 0.08 else None
            self._submit(
                rng.choice(self.borrowers),
                rng.choice((1, 1, 2, 4)),
                pods,
                elastic,
                rng.choice((0, 1, 2)),
                topology,
            )
            self.now += 1.0

    # ------------------------------------------------------------ running
    def cycle(self) -> Decisions:
        if self.mode != "kept":
            self.cache.candidate_lists.clear()
        result = self.scheduler.cycle(self.cache, now=self.now)
        apply_decisions(self.cache, result, now=self.now)
        return _decisions(result)

    def between_cycles(self) -> None:
        rng, cache = self.rng, self.cache
        # By 0 too: then nothing is re-timed, and a kept list must still see a checkpoint or a new priority.
        self.now += rng.choice((0.0, 0.0, 25.0, 50.0))
        for name in sorted(cache.admitted):
            x = rng.random()
            if x < 0.05:
                cache.finish(name, now=self.now)
            elif x < 0.2:
                cache.checkpoint(name, now=self.now)
            elif x < 0.25:
                held = cache.admitted[name]
                held.workload = dataclasses.replace(held.workload, priority=rng.choice((0, 1, 2, 10)))
        if rng.random() < 0.15:
            cache.fleet.set_schedulable(rng.choice(sorted(cache.fleet.index)), False)
        # High-priority arrivals in several queues at once: one cycle searches for several preemptors.
        for _ in range(rng.randint(3, 8)):
            topology = rng.choice(("host", "rack", "nvlink")) if rng.random() < 0.12 else None
            pods = rng.choice((1, 1, 1, 2))
            queue = rng.choice(self.lenders + self.borrowers[:1])
            self._submit(queue, rng.choice((1, 2, 4, 8)), pods, None, rng.choice((2, 5, 10)), topology)
        if rng.random() < 0.5:
            self._submit(rng.choice(self.borrowers), rng.choice((1, 2)), 1, None, rng.choice((0, 1)), None)


Candidates = Callable[..., Sequence[preemption.Candidate]]


def _from_scratch(fresh: set[int], searches: dict[int, int], original: Candidates) -> Candidates:
    """`candidates` that, for the caches in `fresh`, first drops every memo a search may read: the
    kept lists and the cycle's memos (parts taken whole, borrowing queues, node index). Counts the
    searches per cache in `searches`."""

    def search_from_scratch(
        snapshot: Snapshot, preemptor: Workload, assignment: Assignment, *, now: float
    ) -> Sequence[preemption.Candidate]:
        searches[id(snapshot.cache)] = searches.get(id(snapshot.cache), 0) + 1
        if id(snapshot.cache) in fresh:
            snapshot.cache.candidate_lists.clear()
            snapshot.memo.clear()
        return original(snapshot, preemptor, assignment, now=now)

    return search_from_scratch


Waits = Callable[[Bounds, int, "PoolPart | list[PoolPart]"], bool]


def _never_waiting(fresh: set[int], original: Waits) -> Waits:
    """`Bounds.below_nominal` that, for the caches in `fresh`, is never sure (always allowed: a node
    scope then has its tight bound computed instead of waiting with a bound that starts with 1)."""

    def below_nominal(bounds: Bounds, node: int, parts: PoolPart | list[PoolPart]) -> bool:
        return id(bounds.snapshot.cache) not in fresh and original(bounds, node, parts)

    return below_nominal


def _first_difference(reference: Decisions, other: Decisions) -> str:
    labels = ("admitted", "preempted", "pending")
    return "; ".join(
        f"{label}: kept={a} reference={b}"
        for label, a, b in zip(labels, other, reference, strict=True)
        if a != b
    )


def _run_in_lockstep(seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Runs the world of `seed` in every mode, cycle by cycle, failing at the first cycle where a mode
    decides otherwise than the kept memos; returns the kept world's searches and preemptions."""
    worlds = {mode: _World(seed, mode) for mode in MODES}
    fresh = {id(worlds["per_search"].cache)}
    searches: dict[int, int] = {}
    monkeypatch.setattr(cycle_module, "candidates", _from_scratch(fresh, searches, preemption.candidates))
    waits = _never_waiting(fresh, Bounds.below_nominal)
    monkeypatch.setattr(Bounds, "below_nominal", waits)
    preempted = 0
    for step in range(worlds["kept"].cycles):
        decided = {mode: world.cycle() for mode, world in worlds.items()}
        for mode in ("per_cycle", "per_search"):
            assert decided["kept"] == decided[mode], (
                f"seed {seed} cycle {step}, {mode}: {_first_difference(decided[mode], decided['kept'])}"
            )
        preempted += len(decided["kept"][1])
        for world in worlds.values():
            world.between_cycles()
    return searches.get(id(worlds["kept"].cache), 0), preempted


@pytest.mark.parametrize("seed", SEEDS)
def test_the_memos_decide_as_a_search_from_scratch(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    searched, _ = _run_in_lockstep(seed, monkeypatch)
    assert searched >= 3  # victims were searched for cycle after cycle: the kept lists were read again


def test_the_worlds_make_the_scheduler_preempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison is not vacuous: in most worlds the searches find victims and preempt."""
    preempting = sum(1 for seed in range(10) if _run_in_lockstep(seed, monkeypatch)[1] > 0)
    assert preempting >= 8
