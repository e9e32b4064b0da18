"""Placement policy per workload class: the right policy places each class, every policy sees every change."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.api.errors import GpuFleetError
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler import cycle as cycle_module
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.placement.scoring import Scored, gpu_choices
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


def _cache(nodes: int) -> ClusterCache:
    fleet = FleetState()
    for i in range(nodes):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree([QuotaNode("default", unlimited=True)])
    return ClusterCache(
        fleet=fleet, tree=tree, settings={"default": QueueSettings("default")}, history=UsageHistory(3600)
    )


def _workload(name: str, cls: str, *, pods: int = 1, at: float = 0.0) -> Workload:
    request = PodRequest(cpu_milli=1000, gpus=1)
    return Workload(name, (PodSet("main", pods, request),), submitted_at=at, workload_class=cls)


class Recorder:
    """A policy that prefers the lowest row (or the highest) and records every row it is told of."""

    def __init__(self, name: str, *, high: bool) -> None:
        self.name = name
        self.high = high
        self.scored: list[str] = []
        self.observed: list[int] = []

    def score(self, state: FleetState, request: PodRequest, rows: np.ndarray) -> Scored:
        self.scored.append(self.name)
        scores = rows.astype(np.float64) if self.high else -rows.astype(np.float64)
        return Scored(scores, gpu_choices(state, request, rows))

    def observe(self, state: FleetState, row: int) -> None:
        self.observed.append(row)


def test_each_class_is_placed_by_its_policy_and_every_policy_sees_every_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Recorder] = []

    def get_policy(name: str) -> Recorder:
        made.append(Recorder(name, high=name == "high"))
        return made[-1]

    monkeypatch.setattr(cycle_module, "get_policy", get_policy)
    cache = _cache(4)
    config = SchedulerConfig(placement="low", placement_by_class={"inference": "high"})
    scheduler = Scheduler(config)
    cache.submit(_workload("replica", "inference", at=1))
    cache.submit(_workload("trainer", "training", pods=2, at=2))
    made.clear()
    result = scheduler.cycle(cache, now=10.0)
    nodes = {a.workload: a.nodes for a in result.admitted}
    assert nodes == {"replica": ("n3",), "trainer": ("n0", "n0")}
    by_name = {r.name: r for r in made}
    assert set(by_name) == {"low", "high"}
    assert by_name["high"].scored == ["high"]  # the one inference pod
    assert by_name["low"].scored == ["low", "low"]  # the two training pods
    # Both policies heard of all three allocations (and their undo when the cycle restored the cache),
    # whichever of them placed the pod.
    for recorder in made:
        assert sorted(recorder.observed) == [0, 0, 0, 0, 3, 3]


def test_default_policies_spread_inference_and_pack_training() -> None:
    cache = _cache(3)
    scheduler = Scheduler()
    for i in range(3):
        cache.submit(_workload(f"replica-{i}", "inference", at=i))
    result = scheduler.cycle(cache, now=10.0)
    apply_decisions(cache, result, now=10.0)
    assert sorted(n for a in result.admitted for n in a.nodes) == ["n0", "n1", "n2"]
    for i in range(3):
        cache.submit(_workload(f"trainer-{i}", "training", at=10 + i))
    result = scheduler.cycle(cache, now=20.0)
    assert len({n for a in result.admitted for n in a.nodes}) == 1  # packed onto one node


def test_config_refuses_unknown_classes_and_policies() -> None:
    with pytest.raises(GpuFleetError, match="workload class 'serving'"):
        Scheduler(SchedulerConfig(placement_by_class={"serving": "spread"}))
    with pytest.raises(GpuFleetError, match="unknown placement policy 'spreed'"):
        Scheduler(SchedulerConfig(placement_by_class={"inference": "spreed"}))
    assert SchedulerConfig().policy_for("inference") == "spread"
    assert SchedulerConfig(placement="fgd+").policy_for("training") == "fgd+"
    assert SchedulerConfig(placement="fgd+").policy_for("batch") == "fgd+"
