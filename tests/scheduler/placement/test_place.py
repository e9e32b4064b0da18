"""Table-driven placement cases: gangs, elasticity, topology, NVLink, constraints, sharing modes, MIG."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from placement_builders import FirstFit, fleet, gpus, node, racks, workload

from gpufleet.fleet.node import SharingMode
from gpufleet.fleet.request import PodRequest, Taint, Toleration
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.workload import Workload

NOSCHED = Taint("gpu", "reserved")


@dataclass
class Case:
    name: str
    build: Callable[[], FleetState]
    workload: Workload
    # Pods already running: (pod, node name, request, gpus).
    running: list[tuple[str, str, PodRequest, tuple[int, ...]]] = field(default_factory=list)
    nodes: list[str] | None = None  # expected node per pod, in pod order
    gpus: list[tuple[int, ...]] | None = None  # expected GPUs per pod
    counts: dict[str, int] | None = None  # expected pods per pod set
    same_domain: str | None = None  # level name: all pods in one domain of it
    no_fit: str | None = None  # a substring of the NoFit message
    filters: dict[str, int] | None = None  # exact NoFit filter counts


def two_racks() -> FleetState:
    # rack r0 has 3 nodes, rack r1 has 2: r1 is the smaller domain.
    return fleet(
        *(node(f"a{i}", labels={"block": "b", "rack": "r0"}) for i in range(3)),
        *(node(f"c{i}", labels={"block": "b", "rack": "r1"}) for i in range(2)),
        levels=("block", "rack"),
    )


def split_nvlink() -> FleetState:
    return fleet(node("n0", nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]))


CASES = [
    Case(
        "one whole-GPU pod",
        lambda: fleet(node("n0"), node("n1")),
        workload("w", ("p", 1, gpus(2))),
        nodes=["n0"],
        gpus=[(0, 1)],
    ),
    Case(
        "gang all or nothing",
        lambda: fleet(node("n0"), node("n1")),
        workload("w", ("p", 3, gpus(8))),
        no_fit="needs 3 pods at once",
    ),
    Case(
        "gang fits exactly",
        lambda: fleet(node("n0"), node("n1")),
        workload("w", ("p", 2, gpus(8))),
        nodes=["n0", "n1"],
    ),
    Case(
        "elastic places as many as fit",
        lambda: fleet(node("n0"), node("n1"), node("n2")),
        workload("w", ("p", 5, gpus(8), 2)),
        counts={"p": 3},
    ),
    Case(
        "elastic below min_count",
        lambda: fleet(node("n0")),
        workload("w", ("p", 4, gpus(8), 2)),
        no_fit="needs 2 pods at once",
    ),
    Case(
        "two pod sets, minimums first",
        lambda: fleet(node("n0"), node("n1")),
        workload("w", ("workers", 4, gpus(8), 1), ("launcher", 1, gpus(8))),
        counts={"workers": 1, "launcher": 1},
    ),
    Case(
        "required rack picks the smallest fitting rack",
        two_racks,
        workload("w", ("p", 2, gpus(8)), required="rack"),
        nodes=["c0", "c1"],
        same_domain="rack",
    ),
    Case(
        "required rack skips a rack that is too small",
        two_racks,
        workload("w", ("p", 3, gpus(8)), required="rack"),
        nodes=["a0", "a1", "a2"],
        same_domain="rack",
    ),
    Case(
        "required rack falls back to the next rack when the smallest is taken",
        two_racks,
        workload("w", ("p", 2, gpus(8)), required="rack"),
        running=[("x", "c0", gpus(1), (0,))],
        nodes=["a0", "a1"],
    ),
    Case(
        "required rack, no rack large enough",
        two_racks,
        workload("w", ("p", 4, gpus(8)), required="rack"),
        no_fit="largest free rack domain is b/r0 with 24 free GPUs",
    ),
    Case(
        "preferred rack falls back to the whole fleet",
        two_racks,
        workload("w", ("p", 4, gpus(8)), preferred="rack"),
        counts={"p": 4},
    ),
    Case(
        "required block holds what no rack can",
        two_racks,
        workload("w", ("p", 5, gpus(8)), required="block"),
        counts={"p": 5},
        same_domain="block",
    ),
    Case(
        "preferred host inside a required rack",
        two_racks,
        workload("w", ("p", 2, gpus(4)), required="rack", preferred="host"),
        running=[("x", "c0", gpus(4), (0, 1, 2, 3))],
        nodes=["a0", "a0"],  # c0 has only 4 free; among whole hosts the first
    ),
    Case(
        "preferred host falls back to the required rack",
        two_racks,
        workload("w", ("p", 2, gpus(6)), required="rack", preferred="host"),
        nodes=["c0", "c1"],
        same_domain="rack",
    ),
    Case(
        "required host",
        lambda: fleet(node("n0", 4), node("n1")),
        workload("w", ("p", 2, gpus(4)), required="host"),
        nodes=["n1", "n1"],
    ),
    Case(
        "multi-GPU pod stays in one NVLink domain",
        split_nvlink,
        workload("w", ("p", 1, gpus(4))),
        running=[("x", "n0", gpus(1), (0,))],
        gpus=[(4, 5, 6, 7)],
    ),
    Case(
        "NVLink best fit keeps the larger domain whole",
        split_nvlink,
        workload("w", ("p", 1, gpus(2))),
        running=[("x", "n0", gpus(2), (0, 1))],
        gpus=[(2, 3)],
    ),
    Case(
        "spans domains only when no domain has enough",
        split_nvlink,
        workload("w", ("p", 1, gpus(6))),
        running=[("x", "n0", gpus(1), (0,))],
        counts={"p": 1},
    ),
    Case(
        "gang required nvlink inside one host domain",
        split_nvlink,
        workload("w", ("p", 2, gpus(2)), required="nvlink"),
        running=[("x", "n0", gpus(1), (0,))],
        gpus=[(4, 5), (6, 7)],
    ),
    Case(
        "gang required nvlink and no domain is large enough",
        split_nvlink,
        workload("w", ("p", 3, gpus(2)), required="nvlink"),
        no_fit="no nvlink domain can hold",
    ),
    Case(
        "rack-scale NVLink fabric as a level",
        lambda: fleet(
            node("a0", labels={"clique": "x"}),
            node("b0", labels={"clique": "y"}),
            node("b1", labels={"clique": "y"}),
            levels=("clique",),
            nvlink_level="clique",
        ),
        workload("w", ("p", 2, gpus(8)), required="nvlink"),
        nodes=["b0", "b1"],
    ),
    Case(
        "taint repels pods that do not tolerate it",
        lambda: fleet(node("n0", taints=[NOSCHED]), node("n1")),
        workload("w", ("p", 1, gpus(8))),
        nodes=["n1"],
    ),
    Case(
        "toleration admits the pod",
        lambda: fleet(node("n0", taints=[NOSCHED]), node("n1", 4)),
        workload("w", ("p", 1, gpus(8, tolerations=(Toleration("gpu", "Equal", "reserved"),)))),
        nodes=["n0"],
    ),
    Case(
        "taint counted in NoFit",
        lambda: fleet(node("n0", taints=[NOSCHED]), node("n1", unschedulable=True)),
        workload("w", ("p", 1, gpus(1))),
        no_fit="0/2 nodes",
        filters={"NodeUnschedulable": 1, "TaintToleration": 1},
    ),
    Case(
        "cordoned node is skipped",
        lambda: fleet(node("n0", unschedulable=True), node("n1")),
        workload("w", ("p", 1, gpus(1))),
        nodes=["n1"],
    ),
    Case(
        "unhealthy GPUs are not handed out",
        lambda: fleet(node("n0", 4, unhealthy=[0, 1])),
        workload("w", ("p", 1, gpus(2))),
        gpus=[(2, 3)],
    ),
    Case(
        "unhealthy GPUs make a node too small",
        lambda: fleet(node("n0", 4, unhealthy=[0])),
        workload("w", ("p", 1, gpus(4))),
        no_fit="InsufficientGPU",
        filters={"InsufficientGPU": 1},
    ),
    Case(
        "GPU model list",
        lambda: fleet(node("n0", model="A100-80GB"), node("n1", model="H200-141GB")),
        workload("w", ("p", 1, gpus(1, gpu_models=("H200-141GB", "H100-80GB")))),
        nodes=["n1"],
    ),
    Case(
        "GPU model nowhere in the fleet",
        lambda: fleet(node("n0")),
        workload("w", ("p", 1, gpus(1, gpu_models=("B200",)))),
        no_fit="no node in the fleet has a GPU of model",
    ),
    Case(
        "more GPUs than any node",
        lambda: fleet(node("n0"), node("n1", 4)),
        workload("w", ("p", 1, gpus(16))),
        no_fit="the largest node has 8",
    ),
    Case(
        "CPU is a filter too",
        lambda: fleet(node("n0", cpu=4000), node("n1", cpu=64_000)),
        workload("w", ("p", 1, gpus(1, cpu_milli=8000))),
        nodes=["n1"],
    ),
    Case(
        "time-slicing replicas cap pods per GPU",
        lambda: fleet(node("n0", 1, sharing=SharingMode.TIME_SLICING, replicas=2)),
        workload("w", ("p", 3, PodRequest(gpu_milli=100))),
        no_fit="needs 3 pods at once",
    ),
    Case(
        "time-slicing takes replicas",
        lambda: fleet(node("n0", 1, sharing=SharingMode.TIME_SLICING, replicas=2)),
        workload("w", ("p", 2, PodRequest(gpu_milli=100))),
        gpus=[(0,), (0,)],
    ),
    Case(
        "time-slicing node refuses whole GPUs",
        lambda: fleet(node("n0", 2, sharing=SharingMode.TIME_SLICING, replicas=4)),
        workload("w", ("p", 1, gpus(1))),
        no_fit="InsufficientGPU",
    ),
    Case(
        "MPS shares by milli",
        lambda: fleet(node("n0", 1, sharing=SharingMode.MPS, replicas=8)),
        workload("w", ("p", 3, PodRequest(gpu_milli=400))),
        no_fit="needs 3 pods at once",
    ),
    Case(
        "share pods best-fit onto the fuller GPU",
        lambda: fleet(node("n0", 2)),
        workload("w", ("p", 1, PodRequest(gpu_milli=300))),
        running=[("x", "n0", PodRequest(gpu_milli=500), (1,))],
        gpus=[(1,)],
    ),
    Case(
        "exclusive node refuses shares",
        lambda: fleet(node("n0", 2, sharing=SharingMode.EXCLUSIVE)),
        workload("w", ("p", 1, PodRequest(gpu_milli=300))),
        no_fit="InsufficientGPU",
    ),
    Case(
        "MIG profile from the layout",
        lambda: fleet(
            node(
                "n0",
                2,
                model="A100-40GB",
                sharing=SharingMode.MIG,
                mig={0: ["3g.20gb", "2g.10gb", "1g.5gb"], 1: ["3g.20gb"]},
            )
        ),
        workload("w", ("p", 2, PodRequest(mig="3g.20gb"))),
        counts={"p": 2},
    ),
    Case(
        "MIG profile exhausted",
        lambda: fleet(node("n0", 1, model="A100-40GB", sharing=SharingMode.MIG, mig={0: ["3g.20gb"]})),
        workload("w", ("p", 2, PodRequest(mig="3g.20gb"))),
        no_fit="needs 2 pods at once",
    ),
    Case(
        "MIG profile unknown for every model",
        lambda: fleet(node("n0", 1, model="A100-40GB", sharing=SharingMode.MIG, mig={0: ["7g.40gb"]})),
        workload("w", ("p", 1, PodRequest(mig="3g.40gb"))),
        no_fit="unknown for every GPU model",
    ),
    Case(
        "MIG profile valid but in no layout",
        lambda: fleet(node("n0", 1, model="A100-40GB", sharing=SharingMode.MIG, mig={0: ["7g.40gb"]})),
        workload("w", ("p", 1, PodRequest(mig="1g.5gb"))),
        no_fit="no node's MIG layout offers",
    ),
    Case(
        "unknown topology level",
        lambda: fleet(node("n0")),
        workload("w", ("p", 1, gpus(1)), required="pod"),
        no_fit="not one of this fleet's levels",
    ),
    Case(
        "CPU-only pod",
        lambda: fleet(node("n0", 0), node("n1")),
        workload("w", ("p", 1, PodRequest(cpu_milli=1000))),
        nodes=["n0"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_placement(case: Case) -> None:
    state = case.build()
    for pod, name, request, held in case.running:
        state.allocate(pod, state.index[name], request, held)
    before = _arrays(state)
    result = place_workload(state, case.workload, policy=FirstFit(), rng=np.random.default_rng(0))
    state.check_invariants()
    if case.no_fit is not None:
        assert not result.placed, result
        assert result.no_fit is not None
        assert case.no_fit in result.no_fit.message, result.no_fit.message
        reason = result.no_fit.to_reason()
        assert reason["type"] == "NoFit"
        if case.filters is not None:
            assert reason["filters"] == case.filters
        assert _arrays(state) == before, "a failed placement left a trace"
        return
    assert result.placed, result.no_fit
    pods = result.placements
    if case.nodes is not None:
        assert [p.node for p in pods] == case.nodes
    if case.gpus is not None:
        assert [p.gpus for p in pods] == case.gpus
    if case.counts is not None:
        assert result.counts() == case.counts
    if case.same_domain is not None:
        level = state.levels.index(case.same_domain)
        assert len({int(state.domain[level, p.row]) for p in pods}) == 1
        assert result.domain is not None and result.domain.level == case.same_domain
    for p in pods:
        assert state.allocations[p.pod].node == p.row
    # Pod names follow {workload}/{podset}/{index}.
    assert all(p.pod.startswith(f"{case.workload.name}/{p.pod_set}/") for p in pods)


def _arrays(state: FleetState) -> dict[str, bytes]:
    names = ("cpu_free", "mem_free", "gpu_free", "gpu_pods", "whole_free", "mig_free")
    out = {name: getattr(state, name).tobytes() for name in names}
    out["domains"] = b"".join(t.tobytes() for t in state.domain_whole_free)
    out["allocations"] = repr(sorted(state.allocations.items())).encode()
    out["mig"] = repr([state.mig_instances(r) for r in state.rows()]).encode()
    return out


def test_no_fit_counts_add_up_to_the_fleet() -> None:
    state = fleet(
        node("n0", unschedulable=True),
        node("n1", taints=[NOSCHED]),
        node("n2", model="A100-80GB"),
        node("n3", cpu=1000),
        node("n4", 2),
        node("n5", 8),
    )
    request = gpus(4, cpu_milli=2000, gpu_models=("H100-80GB",))
    state.allocate("x", 5, gpus(6), (0, 1, 2, 3, 4, 5))
    result = place_workload(
        state, workload("w", ("p", 1, request)), policy=FirstFit(), rng=np.random.default_rng(0)
    )
    assert result.no_fit is not None
    assert result.no_fit.filters == {
        "NodeUnschedulable": 1,
        "TaintToleration": 1,
        "GpuModel": 1,
        "InsufficientCPU": 1,
        "InsufficientGPU": 2,
    }
    assert sum(result.no_fit.filters.values()) == 6
    assert result.no_fit.to_reason()["podSet"] == "p"
    # The counts are in the text a user reads too, kube-scheduler style.
    assert result.no_fit.message == (
        "0/6 nodes can hold a pod of pod set p: 1 NodeUnschedulable, 1 TaintToleration, 1 GpuModel, "
        "1 InsufficientCPU, 2 InsufficientGPU"
    )


def test_a_request_that_never_fits_says_which_filters_rejected_nodes() -> None:
    state = fleet(node("n0"), node("n1", unschedulable=True))
    result = place_workload(
        state, workload("w", ("p", 1, gpus(16))), policy=FirstFit(), rng=np.random.default_rng(0)
    )
    assert result.no_fit is not None and result.no_fit.never
    assert result.no_fit.message == (
        "pod set p asks for 16 GPUs per pod; the largest node has 8 "
        "(0/2 nodes can hold a pod of pod set p: 1 NodeUnschedulable, 1 InsufficientGPU)"
    )


def test_largest_free_domain_counts_only_gpus_the_workload_could_use() -> None:
    # Rack r1 has the most free GPUs, but one node is cordoned and the other tainted; in r2 only 2 GPUs
    # of the right model are healthy; r3's 8 are the most the workload could have had.
    rack = {"r1": {"rack": "r1"}, "r2": {"rack": "r2"}, "r3": {"rack": "r3"}}
    state = fleet(
        node("c1", labels=rack["r1"], unschedulable=True),
        node("t1", labels=rack["r1"], taints=[NOSCHED]),
        node("u1", labels=rack["r2"], unhealthy=range(6)),
        node("a1", labels=rack["r2"], model="A100-80GB"),
        node("h1", labels=rack["r3"]),
        levels=("rack",),
    )
    request = gpus(6, gpu_models=("H100-80GB",))
    result = place_workload(
        state,
        workload("g", ("p", 2, request), required="rack"),
        policy=FirstFit(),
        rng=np.random.default_rng(0),
    )
    assert result.no_fit is not None and result.no_fit.topology is not None
    assert result.no_fit.to_reason()["topology"]["largestFreeDomain"] == {"name": "r3", "freeGpus": 8}
    assert "the largest free rack domain is r3 with 8 free GPUs" in result.no_fit.message
    assert "1 NodeUnschedulable, 1 TaintToleration, 1 GpuModel, 1 InsufficientGPU" in result.no_fit.message


def test_topology_reason_names_the_largest_free_domain() -> None:
    state = racks(1, 2, 2)
    state.allocate("x", 0, gpus(8), tuple(range(8)))
    result = place_workload(
        state,
        workload("w", ("p", 3, gpus(8)), required="rack"),
        policy=FirstFit(),
        rng=np.random.default_rng(0),
    )
    assert result.no_fit is not None
    reason = result.no_fit.to_reason()
    assert reason["topology"] == {
        "level": "rack",
        "requiredGpus": 24,
        "largestFreeDomain": {"name": "b0/r1", "freeGpus": 16},
    }


def test_policy_hears_every_allocation() -> None:
    state = fleet(node("n0"), node("n1"))
    policy = FirstFit()
    place_workload(state, workload("w", ("p", 2, gpus(8))), policy=policy, rng=np.random.default_rng(0))
    assert policy.observed == [0, 1]


def test_gang_with_real_policy_lands_in_one_rack() -> None:
    from gpufleet.scheduler.placement.policies import get_policy

    state = racks(2, 4, 4)
    rng = np.random.default_rng(1)
    policy = get_policy("bestfit")
    for i in range(6):
        result = place_workload(
            state, workload(f"g{i}", ("p", 3, gpus(8)), required="rack"), policy=policy, rng=rng
        )
        assert result.placed
        level = state.levels.index("rack")
        assert len({int(state.domain[level, p.row]) for p in result.placements}) == 1
    state.check_invariants()
