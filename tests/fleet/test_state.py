"""FleetState: node validation, allocation records, health, removal, copies and domain bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.api.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import AllocationError, FleetState, MigSlot


def h100(name: str, **kw: object) -> NodeSpec:
    base: dict[str, object] = {
        "gpu_model": "H100-80GB",
        "gpus": 8,
        "cpu_milli": 64_000,
        "memory_mib": 512_000,
    }
    base.update(kw)
    return NodeSpec(name, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (h100("n", nvlink_domains=((0, 1), (1, 2))), "nvlinkDomains"),
        (h100("n", nvlink_domains=((0, 9),)), "nvlinkDomains"),
        (h100("n", unhealthy_gpus=(8,)), "unhealthyGpus"),
        (h100("n", replicas=0), "replicas"),
        (h100("n", gpus=-1), "gpus"),
        (h100("n", mig_layouts={0: ("3g.40gb",)}), "sharing"),
        (h100("n", gpu_model="L4", sharing=SharingMode.MIG), "sharing"),
        (h100("n", sharing=SharingMode.MIG, mig_layouts={0: ("4g.40gb", "4g.40gb")}), "migLayouts[0]"),
        (h100("n", sharing=SharingMode.MIG, mig_layouts={0: ("3g.20gb",)}), "migLayouts[0]"),
    ],
)
def test_invalid_node_specs_name_the_field_and_add_nothing(spec: NodeSpec, field: str) -> None:
    state = FleetState()
    with pytest.raises(ValidationError) as err:
        state.add_node(spec)
    assert field in str(err.value) and "node n" in str(err.value)
    assert state.n_rows == 0 and not state.index


def test_duplicate_node_is_a_conflict() -> None:
    state = FleetState()
    state.add_node(h100("n"))
    with pytest.raises(ConflictError):
        state.add_node(h100("n"))


def test_allocation_records_exactly_what_is_held() -> None:
    state = FleetState()
    state.add_node(h100("n0", nvlink_domains=((0, 1, 2, 3), (4, 5, 6, 7))))
    state.add_node(h100("m0", sharing=SharingMode.MIG, mig_layouts={1: ("3g.40gb", "3g.40gb")}))
    whole = state.allocate("a", 0, PodRequest(gpus=2, cpu_milli=1000), (4, 5))
    share = state.allocate("b", 0, PodRequest(gpu_milli=250), (0,))
    inst = state.allocate("c", 1, PodRequest(mig="3g.40gb"))
    assert (whole.gpus, whole.milli, whole.cpu_milli) == ((4, 5), 1000, 1000)
    assert (share.gpus, share.milli) == ((0,), 250)
    assert inst.mig == MigSlot(gpu=1, profile="3g.40gb", start=0)
    assert state.whole_free[0] == 5 and state.gpu_free[0, 0] == 750
    assert state.mig_free[1, state.mig_profile_column("3g.40gb")] == 1
    state.check_invariants()


@pytest.mark.parametrize(
    ("request_", "gpus"),
    [
        (PodRequest(gpus=2), (0, 0)),
        (PodRequest(gpus=2), (0,)),
        (PodRequest(gpus=1), (9,)),
        (PodRequest(gpus=1), (1,)),  # held by the share pod below
        (PodRequest(gpu_milli=900), (1,)),
        (PodRequest(cpu_milli=10**9), ()),
        (PodRequest(mig="3g.40gb"), ()),
    ],
)
def test_refused_allocations_change_nothing(request_: PodRequest, gpus: tuple[int, ...]) -> None:
    state = FleetState()
    state.add_node(h100("n0"))
    state.allocate("s", 0, PodRequest(gpu_milli=200), (1,))
    before = (state.gpu_free.tobytes(), state.cpu_free.tobytes(), state.whole_free.tobytes())
    with pytest.raises(AllocationError):
        state.allocate("x", 0, request_, gpus)
    assert (state.gpu_free.tobytes(), state.cpu_free.tobytes(), state.whole_free.tobytes()) == before
    with pytest.raises(AllocationError):
        state.allocate("s", 0, PodRequest(gpu_milli=1), (2,))  # the same pod twice


def test_time_slicing_counts_replicas_and_refuses_whole_gpus() -> None:
    state = FleetState()
    state.add_node(h100("t", gpus=1, sharing=SharingMode.TIME_SLICING, replicas=2))
    state.allocate("a", 0, PodRequest(gpu_milli=100), (0,))
    state.allocate("b", 0, PodRequest(gpu_milli=100), (0,))
    with pytest.raises(AllocationError, match="replica"):
        state.allocate("c", 0, PodRequest(gpu_milli=100), (0,))
    with pytest.raises(AllocationError, match="whole"):
        state.allocate("d", 0, PodRequest(gpus=1), (0,))


def test_gpu_failure_reports_holders_and_removes_capacity() -> None:
    state = FleetState(("rack",))
    state.add_node(h100("n0", labels={"rack": "r0"}))
    state.add_node(
        h100("m0", sharing=SharingMode.MIG, mig_layouts={0: ("3g.40gb", "3g.40gb")}, labels={"rack": "r0"})
    )
    state.allocate("a", 0, PodRequest(gpus=2), (2, 3))
    state.allocate("m", 1, PodRequest(mig="3g.40gb"))
    assert state.set_gpu_health("n0", 3, False) == ["a"]
    assert state.set_gpu_health("n0", 5, False) == []
    assert state.whole_free[0] == 5 and state.free_whole_gpus_in("rack")[0] == 5
    assert state.set_gpu_health("m0", 0, False) == ["m"]
    assert state.mig_free[1].sum() == 0
    state.release("m")  # an instance on a failed GPU does not come back as free
    assert state.mig_free[1].sum() == 0
    state.set_gpu_health("m0", 0, True)
    assert state.mig_free[1].sum() == 2
    state.release("a")
    assert state.whole_free[0] == 6  # GPU 3 is free but unhealthy, GPU 5 unhealthy
    state.check_invariants()
    with pytest.raises(NotFoundError):
        state.set_gpu_health("n0", 8, False)


def test_remove_node_releases_its_pods_and_domains() -> None:
    state = FleetState(("rack",))
    state.add_node(h100("n0", labels={"rack": "r0"}))
    state.add_node(h100("n1", labels={"rack": "r0"}))
    state.allocate("a", 0, PodRequest(gpus=1), (0,))
    assert state.remove_node("n0") == ["a"]
    assert "a" not in state.allocations and state.free_whole_gpus_in("rack")[0] == 8
    order, bounds = state.domain_members(0)
    assert list(order[bounds[0] : bounds[1]]) == [1]
    state.add_node(h100("n0", labels={"rack": "r1"}))  # the name may come back, on a new row
    assert state.index["n0"] == 2
    state.check_invariants()
    with pytest.raises(NotFoundError):
        state.remove_node("nope")


def test_domains_are_named_by_their_path() -> None:
    state = FleetState(("block", "rack"))
    state.add_node(h100("a", labels={"block": "b1", "rack": "r1"}))
    state.add_node(h100("b", labels={"block": "b2", "rack": "r1"}))
    state.add_node(h100("c", labels={"block": "b2"}))  # no rack: in no rack domain
    assert [state.domain_name(1, d) for d in range(2)] == ["b1/r1", "b2/r1"]
    assert list(state.free_whole_gpus_in("rack")) == [8, 8]
    assert list(state.free_whole_gpus_in("block")) == [8, 16]
    assert state.domain[1, 2] == -1


def test_copy_is_independent() -> None:
    state = FleetState(("rack",))
    state.add_node(h100("n0", labels={"rack": "r0"}))
    state.add_node(h100("m0", sharing=SharingMode.MIG, mig_layouts={0: ("7g.80gb",)}))
    state.allocate("a", 0, PodRequest(gpus=1), (0,))
    clone = state.copy()
    clone.allocate("b", 0, PodRequest(gpus=1), (1,))
    clone.allocate("m", 1, PodRequest(mig="7g.80gb"))
    clone.release("a")
    clone.add_node(h100("n9", labels={"rack": "r0"}))
    assert set(state.allocations) == {"a"} and state.n_rows == 2
    assert state.whole_free[0] == 7 and state.free_whole_gpus_in("rack")[0] == 7
    assert state.mig_instances(1)[0][0][2] is None
    state.check_invariants()
    clone.check_invariants()


def test_reinstate_restores_a_released_allocation_exactly() -> None:
    state = FleetState()
    state.add_node(h100("m0", sharing=SharingMode.MIG, mig_layouts={0: ("3g.40gb", "3g.40gb")}))
    state.allocate("x", 0, PodRequest(mig="3g.40gb"))
    alloc = state.allocate("y", 0, PodRequest(mig="3g.40gb"))
    before = state.mig_free.tobytes()
    state.release("y")
    state.reinstate(alloc)
    assert state.allocations["y"] == alloc and state.mig_free.tobytes() == before
    with pytest.raises(AllocationError):
        state.reinstate(alloc)
    state.check_invariants()


def test_arrays_grow_past_their_initial_capacity() -> None:
    state = FleetState(("rack",), max_gpus=2, capacity=1)
    for i in range(9):
        state.add_node(h100(f"n{i}", gpus=2 + i % 3, labels={"rack": f"r{i % 5}"}))
    assert state.max_gpus >= 4 and state.n_rows == 9
    assert int(np.sum(state.free_whole_gpus_in("rack"))) == sum(2 + i % 3 for i in range(9))
    state.check_invariants()
