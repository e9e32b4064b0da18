"""Where a shared claim's charge goes when the workload paying for it leaves (`claim_charges`)."""

from __future__ import annotations

from gpufleet.api.dra_claims import ResourceClaimSpec
from gpufleet.fleet.devices import pinned_to
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.fleet.dra_view import DeviceView, SharedClaim
from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.claim_charges import Move, charged, moves
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.placement.dra import PodClaim
from gpufleet.scheduler.workload import ClaimCharge, PodSet, Workload

CHARGE = ClaimCharge("team-a/shared", PodRequest(gpus=2, gpu_models=("H100-80GB",)))
SPEC = ResourceClaimSpec.model_validate({"devices": {"requests": []}})


def user(name: str, admitted_at: float, *, pays: bool = False) -> Workload:
    claims = (PodClaim("team-a/shared", "team-a", SPEC, shared=True),)
    pod_set = PodSet("main", 1, PodRequest(), claims=claims, charges=(CHARGE,) if pays else ())
    return Workload(name, (pod_set,), queue="team-a", admitted_at=admitted_at)


def view(*pods: str) -> DeviceView:
    devices = DeviceView()
    allocation = ClaimAllocation("team-a/shared", (), pinned_to("n1"), (), "n1")
    devices.shared["team-a/shared"] = SharedClaim(allocation, set(pods))
    return devices


def test_the_charge_goes_to_the_user_admitted_first_then_by_name() -> None:
    payer = user("team-a/a", 1.0, pays=True)
    others = {
        "team-a/c": user("team-a/c", 3.0),
        "team-a/b": user("team-a/b", 2.0),
        "team-a/d": user("team-a/d", 2.0),
    }
    users = view("team-a/c/main/0", "team-a/d/main/0", "team-a/b/main/0")
    assert moves(payer, (1,), users, others) == [Move("team-a/b", CHARGE)]


def test_no_move_when_the_claim_is_released_or_only_leaving_pods_use_it() -> None:
    payer = user("team-a/a", 1.0, pays=True)
    others = {"team-a/b": user("team-a/b", 2.0)}
    assert moves(payer, (1,), DeviceView(), others) == []
    assert moves(payer, (1,), view("team-a/a/main/0#leaving"), others) == []
    assert moves(user("team-a/a", 1.0), (1,), view("team-a/b/main/0"), others) == [], "it paid nothing"


def test_the_receiver_pays_once_in_the_claims_model() -> None:
    receiver = user("team-a/b", 2.0)
    workload, assignment = charged(receiver, Assignment(None, (1,), {}), CHARGE)
    assert assignment.usage == {"H100-80GB": 2000} and assignment.model == "H100-80GB"
    assert workload.pod_sets[0].charges == (CHARGE,)
    again = charged(workload, assignment, CHARGE)
    assert again == (workload, assignment), "never charged twice for one claim"
