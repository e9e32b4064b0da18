"""The preemptor's candidate pool as kept per queue (sorted and grouped per node once, shared by every
preemptor that takes a queue's list whole) decides exactly as the plain sorted list of candidates: the
same pool in the same order, the same victims, and the same placements tried on the way (placement
draws from the scheduler's random generator, so one extra try would change later decisions)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler import cycle as cycle_module
from gpufleet.scheduler import preemption
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.preemption.feasibility import capacity_feasible, quota_feasible
from gpufleet.scheduler.preemption.node_index import NodeIndex, node_heap
from gpufleet.scheduler.preemption.pool import CandidatePool
from gpufleet.scheduler.preemption.scopes import POSITION, SCOPE, TIGHT, bound_of, scope_level
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


BORROWERS = ("b0", "b1", "b2", "b3")
LENDERS = ("l0", "l1", "l2", "l3")


def _cache(rng: random.Random) -> ClusterCache:
    fleet = FleetState()
    for i in range(8):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 512_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    quotas = {**dict.fromkeys(BORROWERS, 4), **dict.fromkeys(LENDERS, 12)}  # 64 GPUs: the fleet
    tree = QuotaTree(
        [QuotaNode("root")]
        + [QuotaNode(name, "root", {H100: FlavorLimits(gpus * 1000)}) for name, gpus in quotas.items()]
    )
    # Most queues take other queues' workloads whole (reclaim `Any`, no minimum runtime): their kept
    # lists are shared by every preemptor of a cycle; a few filter them per preemptor (`LowerPriority`)
    # or keep young workloads (a minimum runtime): both ways of building the pool.
    settings = {
        name: QueueSettings(
            name,
            preemption=PreemptionPolicy(reclaim_within_cohort=rng.choice(("Any",) * 4 + ("LowerPriority",))),
            min_runtime_seconds=rng.choice((0.0,) * 4 + (60.0,)),
        )
        for name in tree.nodes
    }
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _job(
    name: str, queue: str, gpus: int, pods: int, min_count: int | None, priority: int, at: float
) -> Workload:
    request = PodRequest(cpu_milli=1000, memory_mib=1024, gpus=gpus)
    return Workload(
        name,
        (PodSet("main", pods, request, min_count=min_count),),
        queue=queue,
        priority=priority,
        submitted_at=at,
    )


def _victims(found: preemption.VictimSet | None) -> list[tuple[str, str, tuple[str, ...]]] | None:
    return None if found is None else [(c.name, c.kind, c.pods) for c in found.victims]


def _check_index(snapshot: Any, preemptor: Workload, pool: CandidatePool) -> None:
    """After a node-by-node search (not the cycle's first), the cycle's node index is that of the pool's
    kept parts as if built afresh: the same nodes, bounds and parts per node, in bound order."""
    index = snapshot.memo.get(NodeIndex)
    shared = [part for part in pool.parts if part.shared]
    if not isinstance(index, NodeIndex) or not index.members:
        return  # no node-by-node search yet in this cycle, or only the first (which bounds every node)
    if scope_level(preemptor) not in ("host", "nvlink"):
        return
    fresh = {entry[POSITION]: entry for entry in node_heap(shared)}
    # Everything but the scope, which is the parts there in whatever order (compared below).
    assert {
        node: (bound_of(entry), entry[TIGHT], entry[POSITION]) for node, entry in index.entries.items()
    } == {node: (bound_of(entry), entry[TIGHT], entry[POSITION]) for node, entry in fresh.items()}
    for node, entry in fresh.items():
        scope = entry[SCOPE]
        parts = scope if isinstance(scope, list) else [scope]
        assert {id(p) for p in index.where[node]} == {id(p) for p in parts}
    assert index.order == sorted(index.entries.values())
    assert {id(part) for part in shared} == set(index.members)


@pytest.mark.parametrize("seed", range(30))
def test_the_kept_pool_decides_as_the_sorted_list(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    cache = _cache(rng)
    t = 0.0
    # Borrowers fill the fleet far beyond their nominal quota: every lender's arrival must reclaim.
    for i in range(40):
        pods = rng.choice((1, 1, 1, 2))
        elastic = 1 if pods > 1 and rng.random() < 0.5 else None
        gpus = rng.choice((1, 1, 2, 4))
        cache.submit(_job(f"w{i:02d}", rng.choice(BORROWERS), gpus, pods, elastic, rng.choice((1, 2)), t))
        t += 1.0
    compared = []
    original = preemption.select_victims

    def spy(snapshot: Any, preemptor: Workload, assignment: Any, fits: Any, **kwargs: Any) -> Any:
        now = kwargs["now"]
        pool = preemption.candidates(snapshot, preemptor, assignment, now=now)
        plain = sorted(pool, key=preemption.victim_order)
        assert list(pool) == plain
        assert isinstance(pool, CandidatePool)
        assert list(pool.in_order()) == plain

        def counted(calls: list[int]) -> Any:
            def fits_counted() -> bool:
                calls.append(1)
                return bool(fits())

            return fits_counted

        from_list: list[int] = []
        expected = original(snapshot, preemptor, assignment, counted(from_list), now=now, pool=plain)
        from_pool: list[int] = []
        found = original(snapshot, preemptor, assignment, counted(from_pool), now=now, pool=pool)
        assert _victims(found) == _victims(expected)
        assert len(from_pool) == len(from_list)
        if (
            pool
            and quota_feasible(snapshot, preemptor, assignment, pool)
            and capacity_feasible(snapshot, preemptor, assignment, pool)
        ):
            _check_index(snapshot, preemptor, pool)  # the search reached the scopes
        compared.append(found is not None)
        return found

    monkeypatch.setattr(cycle_module, "select_victims", spy)
    scheduler = Scheduler()
    now = 100.0
    for step in range(5):
        result = scheduler.cycle(cache, now=now)
        apply_decisions(cache, result, now=now)
        now += 50.0  # the candidates are re-timed in the next cycle
        # Arrivals in several lenders at once: one cycle searches for several preemptors in turn.
        for j in range(6):
            gpus = rng.choice((1, 2, 4, 8))
            pods = rng.choice((1, 1, 1, 2))
            queue = rng.choice(LENDERS + BORROWERS[:1])
            cache.submit(_job(f"hi{step}-{j}", queue, gpus, pods, None, rng.choice((2, 10)), now))
    for _ in range(3):
        result = scheduler.cycle(cache, now=now)
        apply_decisions(cache, result, now=now)
        now += 50.0
    assert any(compared)  # a preemption was decided both ways
