"""Parking of inadmissible workloads: skipped while nothing relevant changes, woken when it does."""

from __future__ import annotations

import dataclasses

import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler import cycle as cycle_module
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"
A100 = "A100-80GB"
NOW = 1000.0
NO_RECLAIM = PreemptionPolicy(within_queue="Never", reclaim_within_cohort="Never")


def _cache(
    queues: dict[str, tuple[str | None, dict[str, int]]],
    nodes: dict[str, str],
    policy: PreemptionPolicy = NO_RECLAIM,
) -> ClusterCache:
    """`queues`: name -> (parent, {model: nominal GPUs}); `nodes`: name -> model (8 GPUs each)."""
    fleet = FleetState()
    for name, model in nodes.items():
        fleet.add_node(NodeSpec(name, model, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree(
        QuotaNode(name, parent, {m: FlavorLimits(g * 1000) for m, g in quotas.items()})
        for name, (parent, quotas) in queues.items()
    )
    settings = {name: QueueSettings(name, preemption=policy) for name in queues}
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _workload(name: str, queue: str, gpus: int, *, model: str = H100, at: float = 0.0) -> Workload:
    request = PodRequest(gpus=gpus, gpu_models=(model,))
    return Workload(name, (PodSet("main", 1, request),), queue=queue, submitted_at=at)


def _run(cache: ClusterCache, scheduler: Scheduler, *, cycles: int = 10) -> CycleResult:
    result = CycleResult()
    for _ in range(cycles):
        result = scheduler.cycle(cache, now=NOW)
        apply_decisions(cache, result, now=NOW)
        if not result.changed:
            break
    return result


def test_parked_for_quota_is_admitted_as_soon_as_a_sibling_finishes() -> None:
    cache = _cache({"root": (None, {}), "q": ("root", {H100: 8})}, {"n1": H100, "n2": H100})
    scheduler = Scheduler()
    cache.submit(_workload("first", "q", 4, at=1))
    cache.submit(_workload("sibling", "q", 4, at=2))
    cache.submit(_workload("big", "q", 8, at=3))  # the queue's head while both wait
    cache.submit(_workload("small", "q", 4, at=4))
    result = _run(cache, scheduler)
    assert set(cache.admitted) == {"first", "sibling"}
    assert result.pending["small"].reason.type == "QuotaExceeded"
    assert {"big", "small"} <= set(cache.parking.entries)

    cache.finish("sibling", now=NOW)
    result = scheduler.cycle(cache, now=NOW)
    assert [a.workload for a in result.admitted] == ["small"]
    assert result.pending["big"].reason.type == "QuotaExceeded"


def test_parked_for_quota_wakes_when_a_sibling_queue_releases_what_it_borrowed() -> None:
    queues = {"root": (None, {}), "a": ("root", {H100: 4}), "b": ("root", {H100: 4})}
    cache = _cache(queues, {"n1": H100, "n2": H100})
    scheduler = Scheduler()
    cache.submit(_workload("kept", "a", 4, at=0))
    cache.submit(_workload("borrower", "a", 4, at=1))
    _run(cache, scheduler)
    cache.submit(_workload("owner-big", "b", 8, at=2))
    cache.submit(_workload("owner", "b", 4, at=3))
    result = _run(cache, scheduler)
    assert result.pending["owner"].reason.type == "QuotaExceeded"  # reclaim is Never for this test
    assert {"owner-big", "owner"} <= set(cache.parking.entries)

    cache.finish("borrower", now=NOW)
    result = scheduler.cycle(cache, now=NOW)
    assert {a.workload for a in result.admitted} == {"owner"}


def test_parked_workload_keeps_its_reason_and_is_not_retried_while_nothing_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = _cache({"root": (None, {}), "q": ("root", {H100: 8})}, {"n1": H100, "n2": H100})
    scheduler = Scheduler()
    cache.submit(_workload("first", "q", 8, at=1))
    cache.submit(_workload("second", "q", 8, at=2))
    cache.submit(_workload("third", "q", 8, at=3))
    _run(cache, scheduler)
    entry = cache.parking.entries["third"]

    tried: list[str] = []
    original = cycle_module._Cycle._attempt

    def counting(self: cycle_module._Cycle, workload: Workload) -> object:
        tried.append(workload.name)
        return original(self, workload)

    monkeypatch.setattr(cycle_module._Cycle, "_attempt", counting)
    result = scheduler.cycle(cache, now=NOW)
    assert "third" not in tried  # only the queue's first parked workload stands in the order
    assert result.pending["third"] is entry.pending
    assert set(result.pending) == {"second", "third"}


def test_parked_for_no_fit_wakes_only_for_capacity_of_its_model() -> None:
    queues = {"root": (None, {}), "q": ("root", {H100: 64, A100: 64})}
    cache = _cache(queues, {"h1": H100, "a1": A100})
    scheduler = Scheduler()
    cache.submit(_workload("h-running", "q", 8, at=1))
    cache.submit(_workload("a-running", "q", 8, model=A100, at=2))
    _run(cache, scheduler)
    cache.submit(_workload("h-waiting", "q", 8, at=3))
    result = _run(cache, scheduler)
    assert result.pending["h-waiting"].reason.type == "NoFit"
    assert "h-waiting" in cache.parking.entries

    cache.finish("a-running", now=NOW)  # A100 capacity: no news for an H100 workload
    result = scheduler.cycle(cache, now=NOW)
    assert not result.admitted
    assert "h-waiting" in cache.parking.entries

    cache.finish("h-running", now=NOW)
    result = scheduler.cycle(cache, now=NOW)
    assert [a.workload for a in result.admitted] == ["h-waiting"]


def test_parked_for_no_fit_wakes_when_a_node_is_added() -> None:
    cache = _cache({"root": (None, {}), "q": ("root", {H100: 64})}, {"h1": H100})
    scheduler = Scheduler()
    cache.submit(_workload("running", "q", 8, at=1))
    cache.submit(_workload("waiting", "q", 8, at=2))
    _run(cache, scheduler)
    assert "waiting" in cache.parking.entries

    cache.fleet.add_node(NodeSpec("h2", H100, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    result = scheduler.cycle(cache, now=NOW)
    assert [a.workload for a in result.admitted] == ["waiting"]


def test_a_workload_changed_by_the_world_is_tried_again() -> None:
    cache = _cache({"root": (None, {}), "q": ("root", {H100: 8})}, {"n1": H100, "n2": H100})
    scheduler = Scheduler()
    cache.submit(_workload("first", "q", 8, at=1))
    cache.submit(_workload("second", "q", 8, at=2))
    _run(cache, scheduler)
    assert "second" in cache.parking.entries

    # The world shrinks the request in place of the old object (a controller's update).
    smaller = dataclasses.replace(
        cache.pending["second"],
        pod_sets=(PodSet("main", 1, PodRequest(gpus=0, cpu_milli=1000)),),
    )
    cache.pending["second"] = smaller
    result = scheduler.cycle(cache, now=NOW)
    assert [a.workload for a in result.admitted] == ["second"]


def test_cleared_parking_changes_no_decision_at_a_fixed_point() -> None:
    queues = {"root": (None, {}), "a": ("root", {H100: 8}), "b": ("root", {H100: 8})}
    cache = _cache(queues, {f"n{i}": H100 for i in range(3)}, PreemptionPolicy())
    scheduler = Scheduler()
    for i in range(12):
        cache.submit(_workload(f"w{i}", "ab"[i % 2], [1, 2, 4, 8][i % 4], at=i))
    result = _run(cache, scheduler, cycles=50)
    assert not result.changed
    assert cache.parking.entries
    cache.parking.clear()
    again = scheduler.cycle(cache, now=NOW)
    assert not again.changed
    assert {p.reason.type for p in again.pending.values()} == {p.reason.type for p in result.pending.values()}


def test_no_node_of_any_model_is_a_no_fit_and_a_node_of_a_new_model_wakes_it() -> None:
    fleet = FleetState()
    fleet.add_node(NodeSpec("cpu", "", 0, 64_000, 512_000))
    tree = QuotaTree([QuotaNode("default", unlimited=True)])
    settings = {"default": QueueSettings("default")}
    cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))
    scheduler = Scheduler()
    request = PodRequest(gpus=1)
    # The queue's first parked workload is tried each cycle anyway; the second shows the wake-up.
    for i, name in enumerate(("first", "second")):
        cache.submit(Workload(name, (PodSet("main", 1, request),), queue="default", submitted_at=i))
    result = _run(cache, scheduler)
    reason = result.pending["second"].reason
    assert reason.type == "NoFit"
    assert reason.message == "no node of an accepted GPU model exists (second accepts any GPU model)"
    assert {"first", "second"} <= set(cache.parking.entries)

    cache.fleet.add_node(NodeSpec("cpu-2", "", 0, 64_000, 512_000))  # no GPU model: stays parked
    result = scheduler.cycle(cache, now=NOW)
    assert not result.admitted and "second" in cache.parking.entries

    cache.fleet.add_node(NodeSpec("a100", A100, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    result = scheduler.cycle(cache, now=NOW)
    assert sorted((a.workload, a.nodes) for a in result.admitted) == [
        ("first", ("a100",)),
        ("second", ("a100",)),
    ]
