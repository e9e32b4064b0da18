"""Filter masks on small hand-made fleets."""

from __future__ import annotations

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import GPU_MODEL, filter_nodes, never_fits


def mixed_fleet() -> FleetState:
    state = FleetState()
    state.add_node(NodeSpec("cpu-only", "", 0, 64_000, 65_536))
    state.add_node(NodeSpec("t4", "T4", 2, 64_000, 65_536))
    return state


def test_a_model_no_node_has_matches_no_node_not_even_those_without_gpus() -> None:
    state = mixed_fleet()
    request = PodRequest(cpu_milli=1_000, gpus=1, gpu_models=("A100",))
    result = filter_nodes(state, request, explain=True)
    assert not result.feasible.any()
    # Both nodes fail on the model, the GPU-less one included (its code -1 must not equal "unknown").
    assert result.rejected == {GPU_MODEL: 2}
    assert never_fits(state, request) == "no node in the fleet has a GPU of model A100"


def test_a_known_model_among_unknown_ones_still_matches_its_nodes() -> None:
    state = mixed_fleet()
    request = PodRequest(cpu_milli=1_000, gpu_milli=500, gpu_models=("A100", "T4"))
    assert filter_nodes(state, request).rows.tolist() == [1]
