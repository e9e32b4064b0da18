"""The CudaDriver filter: a pod that states a CUDA version goes only where the driver runs it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from placement_builders import FirstFit, fleet, gpus, node, workload

from gpufleet.api.errors import ValidationError
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.placement.filters import (
    CUDA_DRIVER,
    FILTER_ORDER,
    GPU_MODEL,
    filter_nodes,
    never_fits,
    static_mask,
)


def with_driver(spec: NodeSpec, driver: str) -> NodeSpec:
    return dataclasses.replace(spec, driver_version=driver)


def drivers_fleet() -> FleetState:
    return fleet(
        with_driver(node("old"), "470.82.01"),  # CUDA 11.4 branch
        with_driver(node("mid"), "535.104.05"),  # CUDA 12.2 branch
        with_driver(node("new"), "580.65.06"),  # CUDA 13.0
        node("unknown"),  # reports no driver
    )


def names(state: FleetState, rows: np.ndarray) -> list[str]:
    return [state.names[row] for row in rows]


@pytest.mark.parametrize(
    ("version", "passing"),
    [
        ((11, 8), ["old", "mid", "new", "unknown"]),  # minor version compatibility from 450.80.02
        ((12, 8), ["mid", "new", "unknown"]),  # 12.x from 525.60.13
        ((13, 0), ["new", "unknown"]),  # 13.x from 580
        ((14, 0), ["unknown"]),  # no driver gpufleet knows of runs it; unknown still passes
    ],
)
def test_only_nodes_whose_driver_runs_the_version_pass(version: tuple[int, int], passing: list[str]) -> None:
    state = drivers_fleet()
    result = filter_nodes(state, gpus(1, cuda_version=version), explain=True)
    assert names(state, result.rows) == passing
    rejected = 4 - len(passing)
    assert result.rejected == ({CUDA_DRIVER: rejected} if rejected else {})


def test_without_a_cuda_version_the_filter_takes_no_step() -> None:
    state = drivers_fleet()
    result = filter_nodes(state, gpus(1), explain=True)
    assert names(state, result.rows) == ["old", "mid", "new", "unknown"]
    assert result.rejected == {}
    # The static mask of such a request is the one every request without constraints shares.
    assert static_mask(state, gpus(1)) is static_mask(state, gpus(2))


def test_the_filter_counts_after_the_gpu_model_and_before_capacity() -> None:
    order = FILTER_ORDER.index
    assert order(GPU_MODEL) < order(CUDA_DRIVER) < order("InsufficientCPU")
    state = fleet(
        with_driver(node("a100-old", model="A100-80GB"), "470.82.01"),
        with_driver(node("h100-old"), "470.82.01"),
        with_driver(node("h100-new", gpus=2), "570.124.06"),
    )
    request = gpus(4, gpu_models=("H100-80GB",), cuda_version=(12, 8))
    result = filter_nodes(state, request, explain=True)
    # Counted against the first filter that rejects it: the A100 node on its model.
    assert result.rejected == {GPU_MODEL: 1, CUDA_DRIVER: 1, "InsufficientGPU": 1}
    assert sum(result.rejected.values()) == state.n_rows


def test_no_node_with_a_new_enough_driver_never_fits_and_says_what_is_needed() -> None:
    state = fleet(with_driver(node("a"), "470.82.01"), with_driver(node("b"), "515.65.01"))
    why = never_fits(state, gpus(1, cuda_version=(12, 8)))
    assert why is not None
    assert "CUDA 12.8" in why and ">= 525.60.13" in why
    assert "the newest driver in the fleet is 515.65.01" in why
    assert never_fits(state, gpus(1, cuda_version=(11, 8))) is None


def test_the_newest_driver_named_is_among_the_nodes_of_the_accepted_model() -> None:
    state = fleet(
        with_driver(node("h100"), "580.65.06"),
        with_driver(node("a100", model="A100-80GB"), "470.82.01"),
    )
    why = never_fits(state, gpus(1, gpu_models=("A100-80GB",), cuda_version=(12, 4)))
    assert why is not None and "on a node of model A100-80GB is 470.82.01" in why


def test_a_workload_that_cannot_fit_now_names_version_and_driver_in_its_reason() -> None:
    # The one node with a new driver is busy; the old one is free but cannot run CUDA 12.8.
    state = fleet(with_driver(node("old"), "470.82.01"), with_driver(node("new"), "570.124.06"))
    state.allocate("other", state.row_of("new"), gpus(8), tuple(range(8)))
    job = workload("job", ("worker", 1, gpus(8, cuda_version=(12, 8))))
    result = place_workload(state, job, policy=FirstFit(), rng=np.random.default_rng(0))
    assert result.no_fit is not None and not result.no_fit.never
    assert result.no_fit.filters == {CUDA_DRIVER: 1, "InsufficientGPU": 1}
    assert "CUDA 12.8 needs an NVIDIA driver >= 525.60.13" in result.no_fit.message
    assert "the newest driver in the fleet is 570.124.06" in result.no_fit.message


def test_a_workload_no_driver_runs_is_never_placed_and_the_reason_says_why() -> None:
    state = fleet(with_driver(node("old"), "470.82.01"))
    job = workload("job", ("worker", 2, gpus(8, cuda_version=(12, 8))))
    result = place_workload(state, job, policy=FirstFit(), rng=np.random.default_rng(0))
    assert result.no_fit is not None and result.no_fit.never
    assert result.no_fit.filters == {CUDA_DRIVER: 1}
    assert result.no_fit.message.startswith("pod set worker is built for CUDA 12.8, which needs")
    assert "470.82.01" in result.no_fit.message


def test_the_pod_is_placed_on_the_node_whose_driver_runs_it() -> None:
    state = fleet(with_driver(node("old"), "470.82.01"), with_driver(node("new"), "570.124.06"))
    job = workload("job", ("worker", 1, gpus(8, cuda_version=(12, 8))))
    result = place_workload(state, job, policy=FirstFit(), rng=np.random.default_rng(0))
    assert result.placed and set(result.nodes().values()) == {"new"}


def test_a_malformed_driver_names_the_node_and_the_field() -> None:
    state = FleetState()
    with pytest.raises(ValidationError, match="node bad: field driverVersion: 'r550' is not an NVIDIA"):
        state.add_node(with_driver(node("bad"), "r550"))
    assert state.n_rows == 0


def test_a_copied_fleet_keeps_its_drivers() -> None:
    state = drivers_fleet()
    clone = state.copy()
    state.add_node(with_driver(node("later"), "580.65.06"))
    result = filter_nodes(clone, gpus(1, cuda_version=(13, 0)))
    assert names(clone, result.rows) == ["new", "unknown"]


def test_drivers_survive_the_fleet_growing_its_arrays() -> None:
    state = FleetState(capacity=2)
    for i in range(5):
        state.add_node(with_driver(node(f"old{i}"), "470.82.01") if i % 2 else node(f"unknown{i}"))
    result = filter_nodes(state, gpus(1, cuda_version=(12, 0)))
    assert names(state, result.rows) == ["unknown0", "unknown2", "unknown4"]


def test_in_an_empty_fleet_the_driver_is_not_what_is_missing() -> None:
    why = never_fits(FleetState(), gpus(1, cuda_version=(12, 4)))
    assert why == "asks for 1 GPUs per pod; the largest node has 0"
