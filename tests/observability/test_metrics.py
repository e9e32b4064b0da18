"""The control plane's metrics, recorded by the code paths both worlds share."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from gpufleet.controllers import fleetmetrics, queuestatus
from gpufleet.controllers.decisions import Carrier, run_cycles
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.observability import metrics
from gpufleet.scheduler.cache import Admitted, ClusterCache
from gpufleet.scheduler.cycle import Scheduler
from gpufleet.scheduler.explain import Admit, Preempt
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _total(name: str, **labels: str) -> float:
    """The sum of every series of `name` whose labels include `labels`."""
    total = 0.0
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def _cache(queue: str) -> ClusterCache:
    fleet = FleetState()
    fleet.add_node(NodeSpec("n0", H100, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree(
        [
            QuotaNode(f"{queue}-root"),
            QuotaNode(queue, f"{queue}-root", {H100: FlavorLimits(4000, borrowing_limit=8000)}),
            QuotaNode(f"{queue}-lender", f"{queue}-root", {H100: FlavorLimits(4000)}),
        ]
    )
    settings = {name: QueueSettings(name) for name in tree.nodes}
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _workload(name: str, queue: str, *, gpus: int, at: float, priority: int = 0) -> Workload:
    pod_sets = (PodSet("main", 1, PodRequest(gpus=gpus)),)
    return Workload(name, pod_sets, queue=queue, priority=priority, submitted_at=at)


def _carrier(cache: ClusterCache) -> Carrier:
    def admit(decision: Admit, now: float) -> None:
        workload = cache.pending[decision.workload]
        cache.admit(workload, decision.assignment, decision.allocations, now=now)

    def preempt(decision: Preempt, now: float) -> None:
        cache.evict(decision.victim, now=now)

    def leave_out(name: str, error: Exception) -> None:
        raise error  # no attempt raises here: one that did would be a bug to see

    return Carrier(preempt=preempt, admit=admit, leave_out=leave_out)


def _run(cache: ClusterCache, now: float) -> None:
    run_cycles(scheduler=Scheduler(), cache=cache, carrier=_carrier(cache), now=now, max_cycles=10)


def test_cycles_admissions_waits_and_pending_reasons_are_recorded_per_queue() -> None:
    queue = "metrics-a"
    cache = _cache(queue)
    cycles = _value("gpufleet_scheduling_cycles_total")
    observed = _value("gpufleet_scheduling_cycle_duration_seconds_count")
    cache.submit(_workload("first", queue, gpus=6, at=0.0))
    cache.submit(_workload("second", queue, gpus=6, at=40.0))
    _run(cache, now=100.0)

    assert _value("gpufleet_admissions_total", queue=queue, flavor=H100) == 1
    assert _value("gpufleet_admission_wait_seconds_count", queue=queue) == 1
    assert _value("gpufleet_admission_wait_seconds_sum", queue=queue) == 100.0
    assert _value("gpufleet_scheduling_cycles_total") > cycles
    assert _value("gpufleet_scheduling_cycle_duration_seconds_count") > observed
    # The second waits: one series for its queue, with the core's reason and its age.
    assert _total("gpufleet_pending_workloads", queue=queue) == 1
    (reason,) = {
        s.labels["reason"]
        for m in REGISTRY.collect()
        for s in m.samples
        if s.name == "gpufleet_pending_workloads" and s.labels["queue"] == queue
    }
    assert reason
    assert _value("gpufleet_pending_oldest_seconds", queue=queue, reason=reason) == 60.0

    # Once nothing waits, the queue's pending series are gone, not left at their last value.
    cache.pending.clear()
    _run(cache, now=200.0)
    assert _total("gpufleet_pending_workloads", queue=queue) == 0
    assert REGISTRY.get_sample_value("gpufleet_pending_workloads", {"queue": queue, "reason": reason}) is None


def test_a_preemption_is_counted_against_the_victims_queue(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.controllers.decisions")
    queue = "metrics-b"
    cache = _cache(queue)
    cache.submit(_workload("low", queue, gpus=8, at=0.0))
    _run(cache, now=10.0)
    assert "low" in cache.admitted
    before = _total("gpufleet_preemptions_total", queue=queue)
    cache.submit(_workload("high", queue, gpus=8, at=20.0, priority=100))
    _run(cache, now=30.0)
    assert "high" in cache.admitted
    assert _total("gpufleet_preemptions_total", queue=queue) == before + 1
    # And logged with the victim, its queue and the cycle as fields.
    (record,) = [r for r in caplog.records if r.getMessage().startswith("preempting for high")]
    assert (record.workload, record.queue) == ("low", queue)  # type: ignore[attr-defined]
    assert isinstance(record.cycle, int)  # type: ignore[attr-defined]


def test_queue_gauges_say_nominal_used_and_borrowed_gpus() -> None:
    queue = "metrics-c"
    cache = _cache(queue)
    cache.admit(_workload("w", queue, gpus=6, at=0.0), Assignment(H100, (1,), {H100: 6000}), [], now=0.0)
    queuestatus.reports(cache, cache.tree.nodes, invalid={})
    assert _value("gpufleet_queue_nominal_gpus", queue=queue, flavor=H100) == 4
    assert _value("gpufleet_queue_used_gpus", queue=queue, flavor=H100) == 6
    assert _value("gpufleet_queue_borrowed_gpus", queue=queue, flavor=H100) == 2
    # The parent counts its child's use against its own (subtree) nominal.
    assert _value("gpufleet_queue_used_gpus", queue=f"{queue}-root", flavor=H100) == 6


def test_a_trainingjobs_series_go_when_it_goes() -> None:
    metrics.record_job(
        "ns", "job", restarts=2, lost_gpu_seconds=30.5, checkpoint_time=1000.0, checkpoint_interval=600.0
    )
    assert _value("gpufleet_trainingjob_restarts", namespace="ns", trainingjob="job") == 2
    assert _value("gpufleet_trainingjob_lost_gpu_seconds", namespace="ns", trainingjob="job") == 30.5
    assert (
        _value("gpufleet_trainingjob_last_checkpoint_timestamp_seconds", namespace="ns", trainingjob="job")
        == 1000
    )
    assert (
        _value("gpufleet_trainingjob_checkpoint_interval_seconds", namespace="ns", trainingjob="job") == 600
    )
    # Not running (or no checkpoints configured): no checkpoint series to alert on.
    metrics.record_job(
        "ns", "job", restarts=2, lost_gpu_seconds=None, checkpoint_time=None, checkpoint_interval=None
    )
    assert (
        REGISTRY.get_sample_value(
            "gpufleet_trainingjob_last_checkpoint_timestamp_seconds",
            {"namespace": "ns", "trainingjob": "job"},
        )
        is None
    )
    metrics.forget_job("ns", "job")
    assert (
        REGISTRY.get_sample_value("gpufleet_trainingjob_restarts", {"namespace": "ns", "trainingjob": "job"})
        is None
    )
    metrics.forget_job("ns", "job")  # twice is harmless
    # Forgotten while it runs with checkpoints: its checkpoint pair goes too.
    metrics.record_job(
        "ns", "job", restarts=0, lost_gpu_seconds=None, checkpoint_time=2000.0, checkpoint_interval=60.0
    )
    metrics.forget_job("ns", "job")
    for name in ("last_checkpoint_timestamp_seconds", "checkpoint_interval_seconds", "restarts"):
        assert (
            REGISTRY.get_sample_value(
                f"gpufleet_trainingjob_{name}", {"namespace": "ns", "trainingjob": "job"}
            )
            is None
        )


def test_every_series_name_follows_prometheus_conventions() -> None:
    names = metrics.exported_names()
    assert "gpufleet_admissions_total" in names
    assert "gpufleet_scheduling_cycle_duration_seconds_bucket" in names
    for name in names:
        assert name.startswith("gpufleet_"), name
        assert name == name.lower(), name


def _with(fleet: FleetState) -> ClusterCache:
    tree = QuotaTree([QuotaNode("q")])
    return ClusterCache(
        fleet=fleet, tree=tree, settings={"q": QueueSettings("q")}, history=UsageHistory(3600)
    )


def test_gpus_per_pool_and_model_by_state_and_fragmentation() -> None:
    fleet = FleetState()
    pool = {"gpufleet.io/pool": "metrics-pool"}
    fleet.add_node(NodeSpec("d0", H100, 4, 64_000, 512_000, labels=pool))
    fleet.add_node(NodeSpec("d1", H100, 4, 64_000, 512_000, labels=pool, unhealthy_gpus=(3,)))
    mig = {"gpufleet.io/pool": "metrics-mig"}
    layouts = {0: ("3g.20gb", "3g.20gb"), 1: ("7g.40gb",)}
    fleet.add_node(
        NodeSpec(
            "m0", "A100-40GB", 2, 64_000, 512_000, labels=mig, sharing=SharingMode.MIG, mig_layouts=layouts
        )
    )
    whole = fleet.allocate("whole", 0, PodRequest(gpus=2), [0, 1])
    share = fleet.allocate("share", 1, PodRequest(gpu_milli=500), [0])
    instance = fleet.allocate("instance", 2, PodRequest(mig="3g.20gb"), mig_gpu=0)
    cache = _with(fleet)
    # What the world would have admitted: two workloads of queue q, their pods on two pools.
    for name, pods in (("wa", [whole, share]), ("wb", [instance])):
        workload = _workload(name, "q", gpus=1, at=0.0)
        cache.admitted[name] = Admitted(workload, Assignment(H100, (1,), {}), {a.pod: a for a in pods})
    fleetmetrics.record(cache)

    def gpus(pool: str, model: str, state: str) -> float | None:
        return REGISTRY.get_sample_value("gpufleet_gpus", {"pool": pool, "model": model, "state": state})

    assert gpus("metrics-pool", H100, "allocated") == 3
    assert gpus("metrics-pool", H100, "idle") == 4
    assert gpus("metrics-pool", H100, "unhealthy") == 1
    assert _value("gpufleet_fragmented_gpus", pool="metrics-pool", model=H100) == 1  # the shared one
    assert gpus("metrics-mig", "A100-40GB", "allocated") == 1
    assert gpus("metrics-mig", "A100-40GB", "idle") == 1
    assert _value("gpufleet_fragmented_gpus", pool="metrics-mig", model="A100-40GB") == 1
    # Per queue and pool: 2 whole GPUs and half of one; 3 of the 7 slices of an A100.
    assert _value("gpufleet_queue_pool_gpus", queue="q", pool="metrics-pool") == 2.5
    assert _value("gpufleet_queue_pool_gpus", queue="q", pool="metrics-mig") == round(3 / 7, 3)
    cache.admitted.clear()
    # A pool whose nodes are gone leaves no series behind.
    fleet.remove_node("m0")
    fleetmetrics.record(_with(fleet))
    assert gpus("metrics-mig", "A100-40GB", "idle") is None
    assert (
        REGISTRY.get_sample_value("gpufleet_queue_pool_gpus", {"queue": "q", "pool": "metrics-mig"}) is None
    )


def test_set_series_leaves_exactly_the_series_given_each_time() -> None:
    """Series gone from one call to the next are removed, changed ones updated, others kept, as
    a scrape between the calls sees; a series set by other means before the first call goes too."""
    registry = CollectorRegistry()
    gauge = Gauge("gpufleet_test_series", "test", ["queue"], registry=registry)
    gauge.labels("old").set(9)

    def scrape() -> dict[str, float]:
        return {s.labels["queue"]: s.value for m in registry.collect() for s in m.samples}

    metrics.set_series(gauge, {("a",): 1.0, ("b",): 2.0})
    assert scrape() == {"a": 1.0, "b": 2.0}
    metrics.set_series(gauge, {("a",): 1.0, ("c",): 3.0})
    assert scrape() == {"a": 1.0, "c": 3.0}
    metrics.set_series(gauge, {("a",): 4.0, ("c",): 3.0})
    assert scrape() == {"a": 4.0, "c": 3.0}
    metrics.set_series(gauge, {})
    assert scrape() == {}
