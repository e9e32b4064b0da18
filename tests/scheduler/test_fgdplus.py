"""`fgd+` keeps per-node scores across pods and cycles: they must equal scores computed afresh."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import filter_nodes
from gpufleet.scheduler.placement.score_fgd import DIRTY_LIMIT, FragmentationModel
from gpufleet.scheduler.placement.score_fgdplus import AdaptiveFgdPolicy
from gpufleet.scheduler.placement.scoring import pick
from gpufleet.sim.throughput import STREAM_CLASSES, ThroughputConfig

REQUESTS = (
    PodRequest(cpu_milli=8_000, gpus=1),
    PodRequest(cpu_milli=20_000, gpus=2),
    PodRequest(cpu_milli=40_000, gpus=4),
    PodRequest(cpu_milli=64_000, gpus=8),
    PodRequest(cpu_milli=2_000, gpu_milli=250),
    PodRequest(cpu_milli=4_000, gpu_milli=500),
    PodRequest(cpu_milli=6_000),
)


def racked_fleet(nodes: int, per_rack: int) -> FleetState:
    state = FleetState(("rack",), max_gpus=8)
    for i in range(nodes):
        spec = NodeSpec(f"n{i}", "H100-80GB", 8, 96_000, 1_024_000, labels={"rack": f"r{i // per_rack}"})
        state.add_node(spec)
    return state


def afresh(policy: AdaptiveFgdPolicy) -> AdaptiveFgdPolicy:
    """The same policy (same typical workload and CPU ratio) with nothing kept per node."""
    fresh = copy.deepcopy(policy)
    fresh.model = FragmentationModel(policy.model.typical)
    fresh._scores = {}
    fresh._state = None
    return fresh


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_scores_equal_scores_computed_afresh(seed: int) -> None:
    rng = np.random.default_rng(seed)
    state = racked_fleet(12, 4)
    policy = AdaptiveFgdPolicy(first_refit=4)
    running: list[str] = []
    for step in range(400):
        request = REQUESTS[int(rng.integers(len(REQUESTS)))]
        rows = filter_nodes(state, request).rows
        if rows.size:
            kept = policy.score(state, request, rows)
            fresh = afresh(policy).score(state, request, rows)
            np.testing.assert_allclose(kept.scores, fresh.scores, rtol=1e-12, atol=1e-9)
            index = pick(kept, rng)
            assert list(kept.gpus) == list(fresh.gpus)
            row = int(rows[index])
            state.allocate(f"p{step}", row, request, kept.gpus[index])
            policy.observe(state, row)
            policy.learn(request)
            running.append(f"p{step}")
        if running and rng.random() < 0.45:
            pod = running.pop(int(rng.integers(len(running))))
            behind_its_back = rng.random() < 0.2
            alloc = state.release(pod)
            if behind_its_back:
                # The world changed the fleet between two cycles; the next cycle starts with invalidate.
                policy.invalidate()
            else:
                policy.observe(state, alloc.node)
    state.check_invariants()


def test_whole_node_pods_without_topology_fill_the_rack_already_in_use() -> None:
    state = racked_fleet(8, 4)
    policy = AdaptiveFgdPolicy()
    node = PodRequest(cpu_milli=16_000, gpus=8)
    state.allocate("resident", 5, node, tuple(range(8)))  # rack r1 (n4-n7) is in use
    policy.invalidate()
    chosen = []
    for i in range(3):
        rows = filter_nodes(state, node).rows
        scored = policy.score(state, node, rows)
        row = int(rows[pick(scored, np.random.default_rng(i))])
        state.allocate(f"w{i}", row, node, scored.gpus[0])
        policy.observe(state, row)
        chosen.append(state.names[row])
    # r1's three free nodes are taken before any of r0, which stays whole for a gang requiring a rack.
    assert sorted(chosen) == ["n4", "n6", "n7"]


def test_throughput_bench_runs_the_default_policy_of_each_streams_class() -> None:
    from gpufleet.scheduler.config import SchedulerConfig

    defaults = SchedulerConfig()
    assert ThroughputConfig().policies() == {s: defaults.policy_for(c) for s, c in STREAM_CLASSES.items()}
    assert set(ThroughputConfig(policy="bestfit").policies().values()) == {"bestfit"}


def test_changes_observed_while_nothing_is_scored_are_bounded_and_still_seen() -> None:
    # A policy whose classes are not being placed still observes every change; it keeps a bounded
    # record of them and scores correctly when asked again.
    state = racked_fleet(4, 2)
    policy = AdaptiveFgdPolicy()
    one = REQUESTS[0]
    policy.score(state, one, filter_nodes(state, one).rows)
    for i in range(DIRTY_LIMIT + 10):
        state.allocate(f"p{i}", i % 4, one, (i // 4 % 8,))
        policy.observe(state, i % 4)
        state.release(f"p{i}")
        policy.observe(state, i % 4)
    assert len(policy.model._dirty) <= DIRTY_LIMIT
    state.allocate("last", 2, one, (0,))
    policy.observe(state, 2)
    rows = filter_nodes(state, one).rows
    np.testing.assert_allclose(
        policy.score(state, one, rows).scores, afresh(policy).score(state, one, rows).scores
    )
