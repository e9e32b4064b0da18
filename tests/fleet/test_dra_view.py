"""The DRA device view's pins: devices of claims allocated elsewhere are kept from the allocator, taken
over by the pod (or shared claim) they were allocated for, and pinned again when it gives them back."""

from __future__ import annotations

from gpufleet.fleet.devices import pinned_to
from gpufleet.fleet.dra_claims import AllocatedDevice, ClaimAllocation
from gpufleet.fleet.dra_view import DeviceView
from gpufleet.fleet.state import Allocation

D0 = ("gpu.nvidia.com", "n1", "gpu-0")
D1 = ("gpu.nvidia.com", "n1", "gpu-1")


def pod(name: str, *devices: tuple[str, str, str], shared: tuple[ClaimAllocation, ...] = ()) -> Allocation:
    return Allocation(name, 0, (), 0, 0, 0, None, tuple(devices), shared)


def test_a_pinned_claims_devices_are_taken_over_by_its_pod_and_pinned_again_when_given_back() -> None:
    view = DeviceView()
    assert view.pin_allocated({"ns/c": [D0, D1]})
    assert view.in_use == {D0: "ns/c", D1: "ns/c"}
    view.take(pod("p", D0, D1))
    assert view.in_use == {D0: "p", D1: "p"} and view.pinned == {}
    assert not view.pin_allocated({"ns/c": [D0, D1]}), "held by its pod: nothing to pin"
    view.give_back(pod("p", D0, D1))  # a rolled-back what-if: the claim is still allocated
    assert view.in_use == {D0: "ns/c", D1: "ns/c"} and view.pinned == {"ns/c": (D0, D1)}
    assert view.pin_allocated({}), "deallocated: the pin goes"
    assert view.in_use == {} and view.pinned == {}


def test_a_pinned_shared_claim_joined_is_held_by_the_claim_and_pinned_again_after_its_last_user() -> None:
    view = DeviceView()
    view.pin_allocated({"ns/s": [D0]})
    claim = ClaimAllocation("ns/s", (AllocatedDevice("r", *D0),), pinned_to("n1"), (), "n1")
    view.take(pod("a", shared=(claim,)))
    view.take(pod("b", shared=(claim,)))
    assert view.in_use == {D0: "ns/s"} and view.pinned == {} and view.shared["ns/s"].users == {"a", "b"}
    view.give_back(pod("a", shared=(claim,)))
    view.give_back(pod("b", shared=(claim,)))
    assert view.in_use == {D0: "ns/s"} and view.pinned == {"ns/s": (D0,)}


def test_a_claim_deallocated_while_its_pod_holds_its_devices_is_not_pinned_again() -> None:
    view = DeviceView()
    view.pin_allocated({"ns/c": [D0]})
    view.take(pod("p", D0))
    view.pin_allocated({})
    view.give_back(pod("p", D0))
    assert view.in_use == {} and view.pinned == {}
