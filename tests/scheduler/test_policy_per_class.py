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
from gpufleet.scheduler.config import (
    DEFAULT_PLACEMENT,
    DEFAULT_PLACEMENT_BY_CLASS,
    WORKLOAD_CLASSES,
    SchedulerConfig,
)
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.placement.score_fgd import PodShape
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
    """A policy that prefers the lowest row (or the highest) and records what it is told."""

    def __init__(self, name: str, *, high: bool) -> None:
        self.name = name
        self.high = high
        self.scored: list[str] = []
        self.observed: list[int] = []
        self.learnt: list[PodRequest] = []
        self.invalidated = 0

    def score(self, state: FleetState, request: PodRequest, rows: np.ndarray) -> Scored:
        self.scored.append(self.name)
        scores = rows.astype(np.float64) if self.high else -rows.astype(np.float64)
        return Scored(scores, gpu_choices(state, request, rows))

    def observe(self, state: FleetState, row: int) -> None:
        self.observed.append(row)

    def learn(self, request: PodRequest) -> None:
        self.learnt.append(request)

    def invalidate(self) -> None:
        self.invalidated += 1


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
    result = scheduler.cycle(cache, now=10.0)
    nodes = {a.workload: a.nodes for a in result.admitted}
    assert nodes == {"replica": ("n3",), "trainer": ("n0", "n0")}
    by_name = {r.name: r for r in made}
    assert set(by_name) == {"low", "high"}
    assert by_name["high"].scored == ["high"]  # the one inference pod
    assert by_name["low"].scored == ["low", "low"]  # the two training pods
    # Both policies heard of all three allocations (and their undo when the cycle restored the cache),
    # whichever of them placed the pod, and both learnt all three pods.
    for recorder in made:
        assert sorted(recorder.observed) == [0, 0, 0, 0, 3, 3]
        assert recorder.learnt == [_workload("x", "batch").pod_sets[0].request] * 3
        assert recorder.invalidated == 1


def test_policies_live_as_long_as_the_scheduler_and_rebuild_their_caches_each_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Recorder] = []

    def get_policy(name: str) -> Recorder:
        made.append(Recorder(name, high=False))
        return made[-1]

    monkeypatch.setattr(cycle_module, "get_policy", get_policy)
    cache = _cache(2)
    scheduler = Scheduler(SchedulerConfig(placement="only"))
    for at in range(3):
        cache.submit(_workload(f"w{at}", "batch", at=at))
        apply_decisions(cache, scheduler.cycle(cache, now=10.0 + at), now=10.0 + at)
    [policy] = made  # one instance for all three cycles: what it learnt is kept
    assert len(policy.learnt) == 3
    # The world applied each cycle's admissions without telling the policy: each cycle invalidates.
    assert policy.invalidated == 3
    # A what-if cycle (its admissions not carried out) teaches nothing.
    cache.submit(_workload("trial", "batch", at=5))
    assert [a.workload for a in scheduler.cycle(cache, now=20.0, learn=False).admitted] == ["trial"]
    assert len(policy.learnt) == 3


def test_a_policy_learns_the_workload_of_every_class_not_only_of_its_own() -> None:
    # fgd+ places training only; inference replicas of another shape are placed by spread, and fgd+
    # still measures fragmentation against them.
    cache = _cache(4)
    scheduler = Scheduler(SchedulerConfig(placement_by_class={"training": "fgd+", "inference": "spread"}))
    replica = PodRequest(cpu_milli=3000, gpus=2)
    for i in range(20):
        cache.submit(
            Workload(f"r{i}", (PodSet("s", 1, replica),), submitted_at=i, workload_class="inference")
        )
    apply_decisions(cache, scheduler.cycle(cache, now=10.0), now=10.0)
    fgd_plus = scheduler.policies["fgd+"]
    assert fgd_plus.estimate.counts[PodShape.of(replica)] == 16  # type: ignore[attr-defined]
    assert PodShape.of(replica) in fgd_plus.model.typical.shapes  # type: ignore[attr-defined]


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


def test_what_the_user_says_wins_over_the_built_in_defaults() -> None:
    builtin = SchedulerConfig()
    assert {c: builtin.policy_for(c) for c in WORKLOAD_CLASSES} == dict(DEFAULT_PLACEMENT_BY_CLASS)
    # A user's `placement` applies to every class, training included, although training has a default.
    everywhere = SchedulerConfig(placement="bestfit")
    assert {everywhere.policy_for(c) for c in WORKLOAD_CLASSES} == {"bestfit"}
    # A class the user names keeps its own; the others take the user's `placement`.
    both = SchedulerConfig(placement="packing", placement_by_class={"inference": "spread"})
    assert [both.policy_for(c) for c in ("training", "inference", "batch")] == [
        "packing",
        "spread",
        "packing",
    ]
    # Without `placement`, a class the user does not name keeps its built-in default.
    one = SchedulerConfig(placement_by_class={"batch": "bestfit"})
    assert one.policy_for("batch") == "bestfit"
    assert one.policy_for("training") == DEFAULT_PLACEMENT_BY_CLASS["training"]
    assert one.policy_for("inference") == DEFAULT_PLACEMENT_BY_CLASS["inference"]
    assert set(one.policy_names()) == {"bestfit", *DEFAULT_PLACEMENT_BY_CLASS.values(), DEFAULT_PLACEMENT}
