"""Dynamic MIG in the fleet: a node whose GPUs are published as partitionable devices (the twin's slices
of a `dra` MIG pool) keeps in its arrays the MIG instances its claims were allocated, at their very
GPU and slices, and gives a GPU back to whole-GPU use when its last instance goes. A property over
random MIG and whole-GPU claims allocated and released: no GPU or slice held twice, no counter over
its capacity, and the arrays always match the claims."""

from __future__ import annotations

import re
from collections import defaultdict
from decimal import Decimal

import pytest
from dra_builders import CLASSES, GPU_CLASS, MIG_CLASS, claim, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.fleet.devices import node_devices
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import GPU_MILLI, PodRequest
from gpufleet.fleet.state import AllocationError, FleetState, MigSlot
from gpufleet.scheduler.placement.dra import DraUnsatisfied, allocate_claims
from gpufleet.scheduler.placement.dra.gang import device_gpus, held_devices
from gpufleet.sharing import mig
from gpufleet.sharing.dra_slices import node_slices

MODEL = "A100-40GB"
GPUS = 2
PROFILES = sorted(mig.catalogue(MODEL))
MIG_NAME = re.compile(r"gpu-(\d+)-mig-(\d+)-(\d+)-(\d+)")


def fleet() -> FleetState:
    state = FleetState()
    state.add_node(
        NodeSpec(
            name="n1",
            gpu_model=MODEL,
            gpus=GPUS,
            cpu_milli=10**6,
            memory_mib=10**7,
            sharing=SharingMode.EXCLUSIVE,
        )
    )
    slices = node_slices("n1", gpu_model=MODEL, gpus=GPUS, mig_gpus=range(GPUS))
    state.set_node_devices("n1", node_devices(slices, node_name="n1", labels={}))
    return state


def place(state: FleetState, pod: str, profile: str | None) -> bool:
    """Allocates a claim for one MIG instance of `profile` (None: a whole GPU) and records it in the
    fleet as the scheduler does; False when the allocator finds no devices."""
    if profile is None:
        wanted = claim(pod, request(device_class=GPU_CLASS))
    else:
        selector = f'device.attributes["gpu.nvidia.com"].profile == "{profile}"'
        wanted = claim(pod, request(device_class=MIG_CLASS, selectors=[selector]))
    node = state.devices.nodes["n1"]
    result = allocate_claims(
        [wanted], node_name="n1", node=node, classes=CLASSES, in_use=state.devices.in_use.keys()
    )
    if isinstance(result, DraUnsatisfied):
        return False
    whole, parent = device_gpus(node, result)
    pod_request = PodRequest(gpus=1) if profile is None else PodRequest(mig=profile)
    state.allocate(pod, 0, pod_request, whole, mig_gpu=parent, devices=held_devices(result))
    return True


def check(state: FleetState) -> None:
    state.check_invariants()
    node = state.devices.nodes["n1"]
    # no shared counter over its capacity
    used: dict[tuple[str, str, str, str], Decimal] = defaultdict(Decimal)
    by_id = {d.id: d for d in node.devices()}
    for device in state.devices.in_use:
        for counter, amount in by_id[device].consumption().items():
            used[counter] += amount
    capacity = node.counters()
    assert all(amount <= capacity[counter] for counter, amount in used.items())
    # the arrays name the GPUs and slices the claims got
    instances = state.mig_instances(0)
    whole_holders: dict[int, str] = {}
    for pod, alloc in state.allocations.items():
        (device,) = alloc.devices
        match = MIG_NAME.fullmatch(device[2])
        if match is None:
            assert alloc.mig is None and alloc.gpus == (int(device[2].removeprefix("gpu-")),)
            whole_holders[alloc.gpus[0]] = pod
            continue
        gpu, profile_id, start, _ = (int(g) for g in match.groups())
        profile = next(p.name for p in mig.catalogue(MODEL).values() if p.gi_profile_id == profile_id)
        assert alloc.mig == MigSlot(gpu, profile, start) and not alloc.gpus
        assert (profile, start, pod) in instances[gpu]
    for gpu in range(GPUS):
        if instances.get(gpu):
            assert gpu not in whole_holders and state.gpu_free[0, gpu] == 0
        else:
            assert state.gpu_free[0, gpu] == (0 if gpu in whole_holders else GPU_MILLI)
    assert state.whole_free[0] == sum(
        1 for g in range(GPUS) if not instances.get(g) and g not in whole_holders
    )


steps = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.sampled_from([None, *PROFILES])),
        st.tuples(st.just("release"), st.integers(0, 20)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_dra_dynamic_mig_arrays_follow_random_claims_and_nothing_is_held_twice(
    ops: list[tuple[str, str | int | None]],
) -> None:
    state = fleet()
    for n, (op, arg) in enumerate(ops):
        if op == "place":
            assert arg is None or isinstance(arg, str)
            free_whole = int(state.whole_free[0])
            placed = place(state, f"p{n}", arg)
            if arg is None:  # a whole GPU is refused exactly when no GPU is whole and free
                assert placed == (free_whole > 0)
        elif state.allocations:
            assert isinstance(arg, int)
            pods = sorted(state.allocations)
            state.release(pods[arg % len(pods)])
        check(state)


def test_dra_dynamic_mig_instance_is_made_at_the_device_s_placement_and_the_gpu_comes_back_whole() -> None:
    state = fleet()
    assert place(state, "a", "3g.20gb") and place(state, "b", "3g.20gb")
    # two 3g.20gb of one A100-40GB fill its GPU 0 (slices 0-3 and 4-7): the arrays say so
    assert state.mig_instances(0) == {0: [("3g.20gb", 0, "a"), ("3g.20gb", 4, "b")]}
    assert state.whole_free[0] == 1 and state.gpu_free[0, 0] == 0
    assert place(state, "w", None) and state.allocations["w"].gpus == (1,)
    assert not place(state, "w2", None)  # both GPUs are taken, one whole, one partitioned
    # a what-if on a clone leaves the fleet as it was
    what_if = state.copy()
    what_if.release("a")
    assert state.mig_instances(0)[0] == [("3g.20gb", 0, "a"), ("3g.20gb", 4, "b")]
    # undoing a release puts the instance back at its slices
    alloc = state.release("a")
    state.reinstate(alloc)
    assert ("3g.20gb", 0, "a") in state.mig_instances(0)[0]
    state.release("a")
    assert state.gpu_free[0, 0] == 0  # b still partitions GPU 0
    state.release("b")
    assert state.mig_instances(0) == {} and state.gpu_free[0, 0] == GPU_MILLI and state.whole_free[0] == 1
    check(state)


def test_dra_dynamic_mig_the_fleet_refuses_a_gpu_or_slices_held_already() -> None:
    """Even if a claim allocator erred, the fleet never records a GPU or a slice twice."""
    state = fleet()
    assert place(state, "w", None) and state.allocations["w"].gpus == (0,)
    device = ("gpu.nvidia.com", "n1", "gpu-0-mig-9-4-4")  # a 3g.20gb on the GPU w holds whole
    with pytest.raises(AllocationError, match="GPU 0 of n1 is held whole or shared"):
        state.allocate("m", 0, PodRequest(mig="3g.20gb"), devices=[device])
    state.release("w")
    state.allocate("m", 0, PodRequest(mig="3g.20gb"), devices=[device])
    overlapping = ("gpu.nvidia.com", "n1", "gpu-0-mig-5-0-4")  # 4g.20gb at slices 0-3: free
    state.allocate("m2", 0, PodRequest(mig="4g.20gb"), devices=[overlapping])
    clash = ("gpu.nvidia.com", "n1", "gpu-0-mig-14-2-2")  # 2g.10gb at 2-3: m2's
    with pytest.raises(AllocationError, match="memory slices 2-3 of GPU 0 of n1 are held by m2"):
        state.allocate("m3", 0, PodRequest(mig="2g.10gb"), devices=[clash])
    assert "m3" not in state.allocations
    # devices whose placement the fleet cannot see (a pod found bound before its node's slices were
    # read) are held in the device view, and no instance is recorded
    unknown = ("gpu.nvidia.com", "elsewhere", "gpu-0-mig-19-6-1")
    assert state.allocate("u", 0, PodRequest(mig="1g.5gb"), devices=[unknown]).mig is None
    assert state.devices.in_use[unknown] == "u" and len(state.mig_instances(0)[0]) == 2
    state.check_invariants()
