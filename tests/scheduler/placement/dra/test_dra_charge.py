"""Whom a shared ResourceClaim is charged to (`dra.charge`): once, to the first workload reserving it."""

from __future__ import annotations

from dra_builders import CLASSES, claim, request
from test_dra_demand import DEVICES, _model

from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.flavors import candidate_models, usage_of
from gpufleet.scheduler.placement.dra.charge import charged_to, claim_charges, without_held
from gpufleet.scheduler.workload import ClaimCharge, PodSet, Workload

OWNERS = {"team-a/a-0": "team-a/a", "team-a/b-0": "team-a/b"}


def test_the_first_known_reserver_pays_else_the_workload_asking() -> None:
    assert charged_to(["team-a/b-0", "team-a/a-0"], "team-a/a", OWNERS.get) == "team-a/b"
    assert charged_to(["team-a/other-scheduler", "team-a/a-0"], "team-a/b", OWNERS.get) == "team-a/a"
    assert charged_to([], "team-a/b", OWNERS.get) == "team-a/b"


def test_charges_name_each_claim_once_with_its_gpus() -> None:
    shared = claim("shared", request(count=2))
    charges = claim_charges(
        [(shared, []), (shared, [])],
        "team-a/a",
        OWNERS.get,
        classes=CLASSES,
        devices=DEVICES,
        model_of=_model,
    )
    assert charges == (
        ClaimCharge("team-a/shared", PodRequest(gpus=2, gpu_models=("A100-40GB", "H100-80GB"))),
    )
    reserved_by_b = claim_charges(
        [(shared, ["team-a/b-0"])], "team-a/a", OWNERS.get, classes=CLASSES, devices=DEVICES, model_of=_model
    )
    assert reserved_by_b == ()


def _workload() -> Workload:
    charge = ClaimCharge("team-a/shared", PodRequest(gpus=2, gpu_models=("H100-80GB",)))
    pod_set = PodSet("w", 3, PodRequest(cpu_milli=100), charges=(charge,))
    return Workload("team-a/a", (pod_set,), queue="team-a")


def test_a_charge_counts_once_per_pod_set_and_picks_the_flavor() -> None:
    workload = _workload()
    assert usage_of(workload, "H100-80GB", (3,)) == {"H100-80GB": 2000}
    assert usage_of(workload, "H100-80GB", (0,)) == {}
    flavors = candidate_models(
        workload, queue_flavors=["A100-40GB", "H100-80GB"], fleet_models=[], unlimited=False
    )
    assert flavors == ["H100-80GB"]


def test_a_claim_already_held_in_the_fleet_is_not_charged_again() -> None:
    workload = _workload()
    assert without_held(workload, {"team-a/other"}) == workload
    assert usage_of(without_held(workload, {"team-a/shared"}), "H100-80GB", (3,)) == {}
