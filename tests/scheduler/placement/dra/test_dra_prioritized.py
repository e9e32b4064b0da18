"""`firstAvailable` (a prioritized list of alternatives) and `distinctAttribute`, as kube-scheduler's
DynamicResources plugin allocates them: the first alternative that can be allocated with the rest of
the claims, its results named `<request>/<alternative>`; every device with a value of its own."""

from __future__ import annotations

from typing import Any

import pytest
from dra_builders import CLASSES, DRIVER, claim, gpu, node_of, request, slice_spec

from gpufleet.api.dra import ResourceClaim
from gpufleet.api.errors import ValidationError
from gpufleet.scheduler.placement.dra import ClaimAllocation, DraUnsatisfied, PodClaim, allocate_claims
from gpufleet.scheduler.placement.dra.demand import claim_demand

H100 = 'device.attributes["gpu.nvidia.com"].productName == "H100"'
A100 = 'device.attributes["gpu.nvidia.com"].productName == "A100"'
CLIQUE = "gpu.nvidia.com/cliqueId"


def prioritized(name: str, *alternatives: tuple[str, int, str]) -> dict[str, Any]:
    """A request whose alternatives are (name, count, selector), in order of preference."""
    return {
        "name": name,
        "firstAvailable": [
            {
                "name": alt,
                "deviceClassName": "gpu.nvidia.com",
                "count": count,
                "selectors": [{"cel": {"expression": e}}],
            }
            for alt, count, e in alternatives
        ],
    }


def allocate(claims: list[PodClaim], node: object, **kw: Any) -> list[ClaimAllocation] | DraUnsatisfied:
    return allocate_claims(claims, node_name="n1", node=node, classes=CLASSES, **kw)


def results(answer: list[ClaimAllocation] | DraUnsatisfied) -> list[tuple[str, str]]:
    assert not isinstance(answer, DraUnsatisfied), answer.describe()
    return [(d.request, d.device) for a in answer for d in a.devices]


MIXED = node_of(
    slice_spec(
        "n1",
        [gpu(f"gpu-{i}", product="A100") for i in range(4)]
        + [gpu(f"gpu-{i}", product="H100") for i in (4, 5)],
    )
)


def test_the_first_alternative_that_fits_is_taken_and_named_in_the_results() -> None:
    wanted = claim("c", prioritized("gpus", ("h100", 2, H100), ("a100", 2, A100)))
    assert results(allocate([wanted], MIXED)) == [("gpus/h100", "gpu-4"), ("gpus/h100", "gpu-5")]
    # The H100s held by another claim: the next alternative.
    held = [(DRIVER, "n1", "gpu-4")]
    assert results(allocate([wanted], MIXED, in_use=held)) == [("gpus/a100", "gpu-0"), ("gpus/a100", "gpu-1")]


def test_an_alternative_is_given_up_when_the_rest_of_the_claims_cannot_be_met_with_it() -> None:
    # Preferred: 2 H100s; but a second request wants both H100s too. Backtracking gives the first
    # request its second alternative (A100s) so that both are met, as kube-scheduler's allocator does.
    both = claim(
        "c",
        prioritized("first", ("h100", 2, H100), ("a100", 2, A100)),
        request("second", count=2, selectors=[H100]),
    )
    assert results(allocate([both], MIXED)) == [
        ("first/a100", "gpu-0"),
        ("first/a100", "gpu-1"),
        ("second", "gpu-4"),
        ("second", "gpu-5"),
    ]


def test_no_alternative_fits_the_reason_names_the_preferred_one() -> None:
    wanted = claim("c", prioritized("gpus", ("h100", 4, H100), ("a100", 8, A100)))
    reason = allocate([wanted], MIXED)
    assert isinstance(reason, DraUnsatisfied)
    assert reason.request == "gpus/h100" and reason.wanted == 4


def test_a_constraint_naming_the_request_applies_to_whichever_alternative_is_taken() -> None:
    node = node_of(
        slice_spec(
            "n1",
            [gpu(f"gpu-{i}", product="H100", clique="x" if i < 1 else "y") for i in range(2)]
            + [gpu(f"gpu-{i}", product="A100", clique="z") for i in (2, 3)],
        )
    )
    wanted = claim(
        "c",
        prioritized("gpus", ("h100", 2, H100), ("a100", 2, A100)),
        constraints=[{"requests": ["gpus"], "matchAttribute": CLIQUE}],
    )
    # The two H100s are in different cliques: the A100 pair, in one, is taken.
    assert results(allocate([wanted], node)) == [("gpus/a100", "gpu-2"), ("gpus/a100", "gpu-3")]


def test_distinct_attribute_gives_every_device_a_value_of_its_own() -> None:
    node = node_of(slice_spec("n1", [gpu(f"gpu-{i}", clique=c) for i, c in enumerate(["a", "a", "b", "c"])]))
    spread = claim("c", request(count=3), constraints=[{"distinctAttribute": CLIQUE}])
    assert results(allocate([spread], node)) == [("gpus", "gpu-0"), ("gpus", "gpu-2"), ("gpus", "gpu-3")]
    too_many = claim("c", request(count=4), constraints=[{"distinctAttribute": CLIQUE}])
    reason = allocate([too_many], node)
    assert isinstance(reason, DraUnsatisfied) and reason.rejected.get(f"distinctAttribute {CLIQUE}")
    # a device without the attribute cannot be told apart: refused
    bare = node_of(slice_spec("n1", [gpu("gpu-0", clique="a"), gpu("gpu-1")]))
    reason = allocate([claim("c", request(count=2), constraints=[{"distinctAttribute": CLIQUE}])], bare)
    assert isinstance(reason, DraUnsatisfied)


def test_alternatives_must_count_alike_for_quota_and_their_models_are_all_candidates() -> None:
    devices = list(MIXED.devices())
    alike = claim("c", prioritized("gpus", ("h100", 2, H100), ("a100", 2, A100)))
    demand = claim_demand([alike], classes=CLASSES, devices=devices, model_of=lambda p: f"{p}-80GB")
    # the preferred alternative's model first: the quota flavor is tried in that order
    assert demand.gpus == 2 and demand.gpu_models == ("H100-80GB", "A100-80GB")
    unlike = claim("c", prioritized("gpus", ("h100", 2, H100), ("a100", 4, A100)))
    with pytest.raises(ValidationError, match="firstAvailable"):
        claim_demand([unlike], classes=CLASSES, devices=devices, model_of=str)


def test_the_api_takes_first_available_and_refuses_what_kubernetes_refuses() -> None:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": {"devices": {"requests": [prioritized("gpus", ("h100", 1, H100), ("a100", 1, A100))]}},
    }
    parsed = ResourceClaim.model_validate(body)
    assert [n for n, _ in parsed.spec.devices.requests[0].alternatives] == ["gpus/h100", "gpus/a100"]
    both = dict(body["spec"]["devices"]["requests"][0], exactly={"deviceClassName": "gpu.nvidia.com"})
    with pytest.raises(Exception, match="exactly one of exactly and firstAvailable"):
        ResourceClaim.model_validate({**body, "spec": {"devices": {"requests": [both]}}})
    admin = prioritized("gpus", ("h100", 1, H100))
    admin["firstAvailable"][0]["adminAccess"] = True
    with pytest.raises(Exception, match="adminAccess"):
        ResourceClaim.model_validate({**body, "spec": {"devices": {"requests": [admin]}}})
