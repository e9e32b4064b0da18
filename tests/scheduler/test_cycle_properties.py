"""Properties of the cycle on random worlds: limits hold, reasons exist, capacity is never exceeded."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

F = "H100-80GB"
NOW = 10_000.0

queue_st = st.tuples(
    st.integers(0, 8),  # nominal GPUs
    st.one_of(st.none(), st.integers(0, 8)),  # borrowing limit
    st.one_of(st.none(), st.integers(0, 8)),  # lending limit (clipped to nominal)
    st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
    st.sampled_from(["Never", "LowerPriority", "Any"]),
    st.sampled_from(["Never", "LowerPriority"]),
)
workload_st = st.tuples(
    st.integers(0, 2),  # queue index
    st.integers(0, 3),  # priority
    st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
    st.integers(1, 2),  # pods
    st.booleans(),  # preemptible
    st.booleans(),  # running at start
)


def _world(
    queues: list[tuple], workloads: list[tuple], nodes: int
) -> tuple[ClusterCache, dict[str, Workload]]:
    fleet = FleetState()
    for i in range(nodes):
        fleet.add_node(NodeSpec(f"n{i}", F, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree_nodes = [QuotaNode("root")]
    settings_by_name = {"root": QueueSettings("root")}
    for i, (nominal, borrow, lend, within, reclaim, borrow_policy) in enumerate(queues):
        lend = None if lend is None else min(lend, nominal)
        limits = FlavorLimits(
            nominal * 1000, None if borrow is None else borrow * 1000, None if lend is None else lend * 1000
        )
        tree_nodes.append(QuotaNode(f"q{i}", "root", {F: limits}))
        settings_by_name[f"q{i}"] = QueueSettings(
            f"q{i}", preemption=PreemptionPolicy(within, reclaim, borrow_policy)
        )
    tree = QuotaTree(tree_nodes)
    cache = ClusterCache(fleet=fleet, tree=tree, settings=settings_by_name, history=UsageHistory(3600))
    made = {}
    for i, (queue, priority, gpus, pods, preemptible, _) in enumerate(workloads):
        request = PodRequest(gpus=gpus)
        made[f"w{i}"] = Workload(
            f"w{i}",
            (PodSet("main", pods, request),),
            queue=f"q{queue % len(queues)}",
            priority=priority,
            preemptible=preemptible,
            submitted_at=float(i),
        )
    return cache, made


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    queues=st.lists(queue_st, min_size=1, max_size=3),
    workloads=st.lists(workload_st, min_size=1, max_size=10),
    nodes=st.integers(1, 3),
)
def test_cycle_invariants(queues: list[tuple], workloads: list[tuple], nodes: int) -> None:
    cache, made = _world(queues, workloads, nodes)
    scheduler = Scheduler()
    # Start the "running" ones through the scheduler itself, then submit the rest.
    for spec, workload in zip(workloads, made.values(), strict=True):
        if spec[5]:
            cache.submit(workload)
    apply_decisions(cache, scheduler.cycle(cache, now=NOW - 5000), now=NOW - 5000)
    for spec, workload in zip(workloads, made.values(), strict=True):
        if not spec[5] and workload.name not in cache.pending:
            cache.submit(workload)
    evicted: set[str] = set()
    result = None
    for _ in range(60):
        before = cache.usage.snapshot(), dict(cache.fleet.allocations)
        result = scheduler.cycle(cache, now=NOW)
        assert (cache.usage.snapshot(), dict(cache.fleet.allocations)) == before, "a cycle changed the cache"
        for preempt in result.preempted:
            assert made[preempt.victim].preemptible, "a non-preemptible workload was preempted"
            evicted.add(preempt.victim)
        apply_decisions(cache, result, now=NOW)
        cache.fleet.check_invariants()
        _check_limits(cache)
        if not result.changed:
            break
    assert result is not None
    for name in cache.pending:
        assert name in result.pending, f"pending {name} has no reason"
        assert result.pending[name].reason.type
    if not result.changed:
        # Parking only skips work: with every parked workload woken, the fixed point stays one.
        cache.parking.clear()
        again = scheduler.cycle(cache, now=NOW)
        assert not again.changed, f"a parked workload could start: {again.admitted} {again.preempted}"
        assert set(again.pending) == set(cache.pending)


def _check_limits(cache: ClusterCache) -> None:
    tree, usage = cache.tree, cache.usage
    total_nominal = 0
    kept_unused = 0
    for name, node in tree.nodes.items():
        limits = node.quotas.get(F)
        if limits is None:
            continue
        used = usage.usage(name, F)
        if limits.borrowing_limit is not None:
            assert used <= limits.nominal + limits.borrowing_limit, (
                f"{name} is over nominal + borrowing limit"
            )
        total_nominal += limits.nominal
        if limits.lending_limit is not None:
            kept_unused += max(0, limits.nominal - limits.lending_limit - used)
    leaves_used = sum(usage.usage(name, F) for name in tree.nodes if tree.is_leaf(name))
    assert leaves_used <= total_nominal - kept_unused, "a lending limit was exceeded"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    queues=st.lists(queue_st, min_size=1, max_size=3),
    workloads=st.lists(workload_st, min_size=1, max_size=12),
    nodes=st.integers(1, 3),
    batch=st.integers(1, 4),
)
def test_cycles_cut_short_leave_nothing_admissible_pending(
    queues: list[tuple], workloads: list[tuple], nodes: int, batch: int
) -> None:
    """Cycles limited to `batch` admissions each reach a fixed point that a whole cycle cannot move:
    the limit changes when workloads start, and may change the order later cycles see (each sorts the
    queues afresh, with the usage of the admissions before it), but never leaves work that could start
    pending, and never exceeds a limit."""
    cache, made = _world(queues, [(*w[:4], False, False) for w in workloads], nodes)
    for workload in made.values():
        cache.submit(workload)
    scheduler = Scheduler()
    for _ in range(200):
        result = scheduler.cycle(cache, now=NOW, limit=batch)
        assert len(result.admitted) <= batch
        apply_decisions(cache, result, now=NOW)
        cache.fleet.check_invariants()
        _check_limits(cache)
        if not result.changed:
            break
    assert not result.changed
    cache.parking.clear()
    whole = scheduler.cycle(cache, now=NOW)
    assert not whole.changed, f"a whole cycle could still start {whole.admitted}"
