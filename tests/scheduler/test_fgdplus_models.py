"""`fgd+` where pods name GPU models: a typical shape weighs its demand per GPU it may use, so pods that
accept any model leave a scarce model to the pods that can only run there."""

from __future__ import annotations

import numpy as np

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import filter_nodes
from gpufleet.scheduler.placement.score_fgd import FragmentationModel, TypicalWorkload
from gpufleet.scheduler.placement.score_fgdplus import AdaptiveFgdPolicy

ANY = PodRequest(cpu_milli=8_000, gpus=1)
T4_ONLY = PodRequest(cpu_milli=8_000, gpus=1, gpu_models=("T4",))
G2_ONLY = PodRequest(cpu_milli=8_000, gpus=1, gpu_models=("G2",))


def fleet() -> FleetState:
    """One small node of a scarce model (2 T4) beside two large ones of a plentiful model (16 G2)."""
    state = FleetState(max_gpus=8)
    state.add_node(NodeSpec("t4", "T4", 2, 64_000, 262_144))
    for i in range(2):
        state.add_node(NodeSpec(f"g2-{i}", "G2", 8, 96_000, 393_216))
    return state


def test_without_model_constraints_every_shape_keeps_its_frequency() -> None:
    state = fleet()
    typical = TypicalWorkload.from_requests([ANY] * 3 + [PodRequest(cpu_milli=2_000, gpu_milli=500)])
    model = FragmentationModel(typical, by_capacity=True)
    model.sync(state)
    assert model.weights.tolist() == list(typical.weights)


def test_a_shape_weighs_its_demand_per_gpu_of_its_models() -> None:
    state = fleet()
    typical = TypicalWorkload.from_requests([ANY] * 6 + [T4_ONLY] * 2 + [G2_ONLY] * 2)
    model = FragmentationModel(typical, by_capacity=True)
    model.sync(state)
    weight = dict(zip(typical.shapes, model.weights.tolist(), strict=True))
    frequency = dict(zip(typical.shapes, typical.weights, strict=True))
    shape = {r: next(s for s in typical.shapes if s.models == r.gpu_models) for r in (ANY, T4_ONLY, G2_ONLY)}
    assert weight[shape[ANY]] == frequency[shape[ANY]]
    assert weight[shape[T4_ONLY]] == frequency[shape[T4_ONLY]] * 18 / 2
    assert weight[shape[G2_ONLY]] == frequency[shape[G2_ONLY]] * 18 / 16


def learnt_policy() -> AdaptiveFgdPolicy:
    # More G2-only pods than T4-only ones, but the T4-only ones need far more of their model's GPUs.
    policy = AdaptiveFgdPolicy(first_refit=8)
    for request in ([ANY] * 3 + [G2_ONLY] * 2 + [T4_ONLY]) * 11:  # refitted at the 64th
        policy.learn(request)
    return policy


def test_a_pod_that_accepts_any_model_leaves_the_scarce_model_to_the_pods_that_need_it() -> None:
    state = fleet()
    policy = learnt_policy()
    rows = filter_nodes(state, ANY).rows
    scores = policy.score(state, ANY, rows).scores
    best = int(rows[int(np.argmax(scores))])
    assert state.names[best].startswith("g2")
    # Frequencies alone (FGD's weights) would send it to the T4 node: G2-only pods are the more frequent.
    plain = FragmentationModel(policy.model.typical)
    gains = plain.gain(state, ANY, rows)
    assert state.names[int(rows[int(np.argmax(gains))])] == "t4"


def test_t4_only_pods_still_fit_after_any_model_pods_fill_the_fleet_around_them() -> None:
    state = fleet()
    policy = learnt_policy()
    for i in range(16):
        rows = filter_nodes(state, ANY).rows
        scored = policy.score(state, ANY, rows)
        index = int(np.argmax(scored.scores))
        state.allocate(f"any-{i}", int(rows[index]), ANY, scored.gpus[index])
        policy.observe(state, int(rows[index]))
    assert filter_nodes(state, T4_ONLY).rows.size == 1
