"""DRA in gang placement: a workload whose pods carry ResourceClaims is placed only where the claims can
be allocated, its devices are held in the snapshot (nothing is given twice), a failed or rolled-back
attempt gives them back, and a pod set that fits nowhere says why under `DynamicResources`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from dra_builders import CLASSES, DRIVER, claim, gpu, request, slice_spec

from gpufleet.fleet.devices import node_devices
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.placement.scoring import Scored
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import PodSet, Workload

A100_ONLY = 'device.attributes["gpu.nvidia.com"].productName == "A100"'


class FirstFit:
    """Lowest row first, no GPU proposal: what the test sees is the placer's own choice."""

    name = "firstfit"

    def score(self, state: FleetState, request: PodRequest, rows: Any) -> Scored:
        return Scored(-rows.astype(np.float64), [()] * rows.size)

    def observe(self, state: FleetState, row: int) -> None:
        pass


def indexed_gpus(n: int, **kwargs: Any) -> list[dict[str, Any]]:
    devices = []
    for i in range(n):
        device = gpu(f"gpu-{i}", **kwargs)
        device["attributes"]["index"] = {"int": i}
        devices.append(device)
    return devices


def dra_fleet(published: dict[str, int]) -> FleetState:
    """Nodes dra-* publish `published[name]` GPUs in ResourceSlices; node `ext` advertises
    `nvidia.com/gpu` only (both paths in one fleet)."""
    state = FleetState()
    for name in (*published, "ext"):
        state.add_node(NodeSpec(name, "H100-80GB", 8, 96_000, 1 << 20))
    for name, count in published.items():
        spec = slice_spec(name, indexed_gpus(count))
        state.devices.set_node(name, node_devices([spec], node_name=name, labels={}))
    state.devices.set_classes(CLASSES)
    return state


def claimed(name: str, pods: int, gpus: int, *selectors: str) -> Workload:
    template = claim("gpus", request(count=gpus, selectors=list(selectors)))
    pod_set = PodSet("main", pods, PodRequest(gpus=gpus), claims=(template,))
    return Workload(name, (pod_set,))


def place(state: FleetState, workload: Workload, statement: Statement | None = None) -> Any:
    return place_workload(
        state, workload, policy=FirstFit(), rng=np.random.default_rng(0), statement=statement
    )


def test_dra_gang_takes_distinct_devices_and_the_gpus_they_are() -> None:
    state = dra_fleet({"dra-1": 8})
    result = place(state, claimed("train", 2, 4))
    assert result.no_fit is None
    assert [p.node for p in result.placements] == ["dra-1", "dra-1"]
    devices = [[d.device for d in p.claims[0].devices] for p in result.placements]
    assert devices == [[f"gpu-{i}" for i in range(4)], [f"gpu-{i}" for i in range(4, 8)]]
    assert [p.gpus for p in result.placements] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [p.claims[0].claim for p in result.placements] == ["team-a/gpus-0", "team-a/gpus-1"]
    status = result.placements[0].claims[0].to_status()
    assert status.node_selector is not None
    assert len(state.devices.in_use) == 8
    state.check_invariants()


def test_dra_devices_held_are_not_allocated_again_and_the_pod_set_pends_with_the_reason() -> None:
    state = dra_fleet({"dra-1": 8})
    assert place(state, claimed("first", 1, 6)).no_fit is None
    result = place(state, claimed("second", 1, 4))
    assert result.no_fit is not None
    # dra-1 has 2 free GPUs in its arrays and by its devices; ext has room but publishes no devices
    assert result.no_fit.filters["InsufficientGPU"] == 1
    assert result.no_fit.filters["DynamicResources"] == 1
    assert "0/1 nodes have the devices" in result.no_fit.message
    assert "node publishes no devices" in result.no_fit.message
    # the extended-resource path beside it is unchanged
    plain = Workload("plain", (PodSet("main", 1, PodRequest(gpus=8)),))
    assert [p.node for p in place(state, plain).placements] == ["ext"]


def test_dra_selector_rejection_is_counted_per_node() -> None:
    state = dra_fleet({"dra-1": 8, "dra-2": 8})
    result = place(state, claimed("a100", 1, 1, A100_ONLY))
    assert result.no_fit is not None
    assert result.no_fit.filters == {"DynamicResources": 3}
    assert "2 claim team-a/gpus-0 request gpus: request selector 0" in result.no_fit.message


def test_dra_failed_gang_and_rollback_give_the_devices_back() -> None:
    state = dra_fleet({"dra-1": 8})
    result = place(state, claimed("too-big", 3, 4))
    assert result.no_fit is not None
    assert state.devices.in_use == {}
    statement = Statement(state)
    assert place(state, claimed("tentative", 2, 4), statement).no_fit is None
    assert len(state.devices.in_use) == 8
    statement.discard()
    assert state.devices.in_use == {}
    state.check_invariants()


def test_dra_released_pod_frees_its_devices_for_the_next_workload() -> None:
    state = dra_fleet({"dra-1": 8})
    first = place(state, claimed("low", 1, 8))
    assert first.no_fit is None
    statement = Statement(state)
    statement.release(first.placements[0].pod)  # a preemption's eviction
    again = place(state, claimed("high", 1, 8), statement)
    assert again.no_fit is None
    assert again.placements[0].claims[0].devices[0].device == "gpu-0"
    statement.rollback(0)
    assert set(state.devices.in_use.values()) == {first.placements[0].pod}
    assert (DRIVER, "dra-1", "gpu-0") in state.devices.in_use


def test_dra_nodes_hand_out_gpus_through_claims_only() -> None:
    state = dra_fleet({"dra-1": 8})
    plain = Workload("plain", (PodSet("main", 2, PodRequest(gpus=8)),))
    result = place(state, plain)
    assert result.no_fit is not None  # only `ext` advertises GPUs as extended resources
    assert result.no_fit.filters == {"InsufficientGPU": 1}  # dra-1, counted as Kubernetes counts it
    assert "1/2 nodes have room for one, not enough for all (1 InsufficientGPU)" in result.no_fit.message
    assert [
        p.node for p in place(state, Workload("one", (PodSet("main", 1, PodRequest(gpus=8)),))).placements
    ] == ["ext"]
    cpu_only = Workload("cpu", (PodSet("main", 1, PodRequest(cpu_milli=1000)),))
    assert [p.node for p in place(state, cpu_only).placements] == ["dra-1"]


def shared_workload(name: str, pods: int, *, allocation: Any = None) -> Workload:
    made = claim("pair", request(count=2))
    shared = replace(made, shared=True, allocation=allocation)
    return Workload(name, (PodSet("main", pods, PodRequest(), claims=(shared,)),))


def test_dra_shared_claim_is_allocated_once_and_its_pods_follow_it() -> None:
    state = dra_fleet({"dra-1": 8, "dra-2": 8})
    result = place(state, shared_workload("pair", 3))
    assert result.no_fit is None
    assert {p.node for p in result.placements} == {"dra-1"}
    allocation = result.placements[0].claims[0]
    assert all(p.claims == (allocation,) for p in result.placements), "one allocation, joined by all"
    assert [d.device for d in allocation.devices] == ["gpu-0", "gpu-1"]
    assert state.devices.shared["team-a/pair"].users == {p.pod for p in result.placements}
    assert set(state.devices.in_use.values()) == {"team-a/pair"}
    state.check_invariants()
    # the claim is held while any pod uses it: released only with the last one
    for placement in result.placements[:-1]:
        state.release(placement.pod)
        assert len(state.devices.in_use) == 2
    state.release(result.placements[-1].pod)
    assert state.devices.in_use == {} and state.devices.shared == {}


def test_dra_shared_claim_already_allocated_is_respected_not_allocated_again() -> None:
    state = dra_fleet({"dra-1": 8, "dra-2": 8})
    first = place(state, shared_workload("before", 1))
    (allocation,) = first.placements[0].claims
    state.release(first.placements[0].pod)
    moved = replace(
        allocation,
        devices=tuple(replace(d, pool="dra-2") for d in allocation.devices),
        node="dra-2",
    )
    later = place(state, shared_workload("later", 2, allocation=moved))
    assert later.no_fit is None
    assert {p.node for p in later.placements} == {"dra-2"}  # where the stored allocation says
    assert all(p.claims == (moved,) for p in later.placements)
    # its devices held by another pod meanwhile: the claim cannot be joined anywhere
    for placement in later.placements:
        state.release(placement.pod)
    taker = place(state, claimed("taker", 1, 8))
    assert taker.no_fit is None and taker.placements[0].node == "dra-1"
    assert place(state, shared_workload("blocked", 1, allocation=allocation)).no_fit is not None
