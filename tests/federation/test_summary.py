"""A worker's summary: per GPU model, free GPUs per sharing mode and domains by free GPUs per level."""

from __future__ import annotations

from gpufleet.federation.summary import summarize
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState


def fleet() -> FleetState:
    state = FleetState(["block", "rack"])
    for rack in ("r1", "r2"):
        for i in range(2):
            state.add_node(
                NodeSpec(
                    f"{rack}-h{i}",
                    gpu_model="H100-80GB",
                    gpus=8,
                    cpu_milli=64_000,
                    memory_mib=1 << 20,
                    labels={"block": "b1", "rack": rack},
                    nvlink_domains=((0, 1, 2, 3), (4, 5, 6, 7)),
                    sharing=SharingMode.EXCLUSIVE,
                )
            )
    state.add_node(
        NodeSpec(
            "ts-1",
            gpu_model="A100-40GB",
            gpus=4,
            cpu_milli=64_000,
            memory_mib=1 << 20,
            sharing=SharingMode.TIME_SLICING,
            replicas=4,
        )
    )
    state.add_node(
        NodeSpec(
            "cordoned",
            gpu_model="H100-80GB",
            gpus=8,
            cpu_milli=64_000,
            memory_mib=1 << 20,
            labels={"block": "b1", "rack": "r2"},
            unschedulable=True,
        )
    )
    return state


def test_an_idle_fleet_is_summarised_per_model_mode_and_level() -> None:
    summary = summarize(fleet())
    h100 = summary["H100-80GB"]
    assert (h100.gpus, h100.free_gpus) == (32, 32), "the cordoned node takes no new work"
    assert h100.free_domains["host"] == {8: 4}
    assert h100.free_domains["nvlink"] == {4: 8}
    assert h100.free_domains["rack"] == {16: 2} and h100.free_domains["block"] == {32: 1}
    assert h100.by_mode["exclusive"].free_gpus == 32 and h100.free_share_milli == 0
    a100 = summary["A100-40GB"]
    assert a100.free_gpus == 0, "time-sliced GPUs are offered as shares only"
    assert a100.free_share_milli == 4000 and a100.by_mode["timeSlicing"].free_gpu_milli == 4000


def test_allocations_show_in_the_histograms() -> None:
    state = fleet()
    state.allocate("a", state.row_of("r1-h0"), PodRequest(gpus=3, cpu_milli=1000, memory_mib=1024), (0, 1, 2))
    state.allocate("b", state.row_of("r1-h1"), PodRequest(gpus=8, cpu_milli=1000, memory_mib=1024), range(8))
    h100 = summarize(state)["H100-80GB"]
    assert h100.free_gpus == 32 - 11
    assert h100.free_domains["host"] == {8: 2, 5: 1}
    assert h100.free_domains["rack"] == {5: 1, 16: 1}
    assert h100.largest_free("rack") == 16 and h100.largest_free("zone") == 0
    assert h100.free_domains["nvlink"] == {4: 5, 1: 1}, "GPUs 0-2 leave one of the first NVLink domain"
