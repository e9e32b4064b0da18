"""Properties of DRA allocation over random partitionable GPUs and random claims, allocated one pod after
another: no device is ever given twice, no shared counter is ever exceeded, every allocation meets its
count and constraint, and a pod is refused only if no set of free devices would have done."""

from __future__ import annotations

import itertools
from collections import defaultdict
from decimal import Decimal
from typing import Any

from dra_builders import CLASSES, DRIVER, GPU_CLASS, MIG_CLASS, claim, gpu, node_of, request, slice_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.fleet.devices import DeviceId, NodeDevices, PoolDevice
from gpufleet.scheduler.placement.dra import DraUnsatisfied, PodClaim, allocate_claims, attribute_value

CLIQUE = "gpu.nvidia.com/cliqueId"
SLICES = 8
"""Memory slices of one GPU: the whole GPU takes all, a MIG partition its profile's share."""


@st.composite
def nodes(draw: st.DrawFn) -> NodeDevices:
    devices: list[dict[str, Any]] = []
    counter_sets: dict[str, dict[str, str]] = {}
    for g in range(draw(st.integers(1, 3))):
        counter_set = f"gpu-{g}"
        counter_sets[counter_set] = {"memorySlices": str(SLICES)}
        clique = draw(st.sampled_from(["a", "b"]))
        devices.append(
            gpu(f"gpu-{g}", clique=clique, counters={"memorySlices": str(SLICES)}, counter_set=counter_set)
        )
        sizes = draw(st.lists(st.sampled_from([1, 2, 3, 4, 7]), max_size=4))
        for p, size in enumerate(sizes):
            devices.append(
                gpu(
                    f"gpu-{g}-mig-{p}",
                    kind="mig",
                    clique=clique,
                    counters={"memorySlices": str(size)},
                    counter_set=counter_set,
                )
            )
    # plain GPUs that consume no counters (published without partitioning)
    for extra in range(draw(st.integers(0, 2))):
        devices.append(gpu(f"plain-{extra}", clique=draw(st.sampled_from(["a", "b"]))))
    return node_of(slice_spec("n1", devices, counter_sets=counter_sets))


@st.composite
def pods(draw: st.DrawFn) -> list[PodClaim]:
    claims = []
    for c in range(draw(st.integers(1, 2))):
        device_class = draw(st.sampled_from([GPU_CLASS, MIG_CLASS]))
        constraints = [{"matchAttribute": CLIQUE}] if draw(st.booleans()) else []
        claims.append(
            claim(
                f"c{c}",
                request(device_class=device_class, count=draw(st.integers(1, 3))),
                constraints=constraints,
            )
        )
    return claims


def _of_class(device: PoolDevice, device_class: str) -> bool:
    kind = attribute_value(device, "gpu.nvidia.com/type")
    return kind == ("gpu" if device_class == GPU_CLASS else "mig")


def _counters_hold(node: NodeDevices, held: set[DeviceId]) -> bool:
    used: dict[Any, Decimal] = defaultdict(Decimal)
    for device in node.devices():
        if device.id in held:
            for counter, amount in device.consumption().items():
                used[counter] += amount
    limits = node.counters()
    return all(amount <= limits[counter] for counter, amount in used.items())


def _some_set_fits(node: NodeDevices, pod: list[PodClaim], held: set[DeviceId]) -> bool:
    """Brute force, for a pod of one claim: any set of free devices of the class, of the right size,
    that meets the constraint and the counters."""
    (only,) = pod
    exact = only.spec.devices.requests[0].exactly
    free = [d for d in node.devices() if d.id not in held and _of_class(d, exact.device_class_name)]
    for combo in itertools.combinations(free, exact.wanted):
        if only.spec.devices.constraints and len({attribute_value(d, CLIQUE) for d in combo}) != 1:
            continue
        if _counters_hold(node, held | {d.id for d in combo}):
            return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=nodes(), stream=st.lists(pods(), min_size=1, max_size=6))
def test_allocations_never_share_a_device_nor_exceed_counters(
    node: NodeDevices, stream: list[list[PodClaim]]
) -> None:
    held: set[DeviceId] = set()
    for pod in stream:
        result = allocate_claims(pod, node_name="n1", node=node, classes=CLASSES, in_use=held)
        if isinstance(result, DraUnsatisfied):
            if len(pod) == 1:
                assert not _some_set_fits(node, pod, held), result.describe()
            continue
        for pod_claim, allocation in zip(pod, result, strict=True):
            exact = pod_claim.spec.devices.requests[0].exactly
            ids = [(d.driver, d.pool, d.device) for d in allocation.devices]
            assert len(ids) == exact.wanted
            devices = [d for d in node.devices() if d.id in ids]
            assert all(_of_class(d, exact.device_class_name) for d in devices)
            if pod_claim.spec.devices.constraints:
                assert len({attribute_value(d, CLIQUE) for d in devices}) == 1
            for device_id in ids:
                assert device_id not in held, f"{device_id} allocated twice"
                held.add(device_id)
        assert _counters_hold(node, held)
    assert all(driver == DRIVER for driver, _, _ in held)
