"""A pod's claims count against quotas and flavors as the same GPUs asked as extended resources would:
the count from the requests, the model (the flavor) from the devices that could serve them."""

from __future__ import annotations

import pytest
from dra_builders import CLASSES, MIG_CLASS, claim, gpu, node_of, request, slice_spec

from gpufleet.api.errors import ValidationError
from gpufleet.fleet.devices import PoolDevice
from gpufleet.fleet.request import GpuKind, PodRequest
from gpufleet.scheduler.placement.dra import ClaimDemand, claim_demand, with_claims


def _mig(name: str, profile: str, product: str = "H100") -> dict[str, object]:
    device = gpu(name, kind="mig", product=product)
    device["attributes"]["profile"] = {"string": profile}  # type: ignore[index]
    return device


# Two nodes: one of H100s with MIG partitions, one of A100s.
DEVICES: list[PoolDevice] = (
    node_of(
        slice_spec(
            "n1",
            [
                gpu("gpu-0", product="NVIDIA H100 80GB HBM3"),
                _mig("mig-0", "3g.40gb"),
                _mig("mig-1", "1g.10gb"),
            ],
        ),
        name="n1",
    ).devices()
    + node_of(
        slice_spec("n2", [gpu(f"gpu-{i}", product="NVIDIA A100-SXM4-40GB") for i in range(4)]), name="n2"
    ).devices()
)


def _model(product: str) -> str:
    return {"NVIDIA H100 80GB HBM3": "H100-80GB", "NVIDIA A100-SXM4-40GB": "A100-40GB", "H100": "H100-80GB"}[
        product
    ]


def _demand(*claims: object) -> ClaimDemand:
    return claim_demand(list(claims), classes=CLASSES, devices=DEVICES, model_of=_model)  # type: ignore[arg-type]


def test_whole_gpus_count_and_any_model_that_could_serve_them_is_their_flavor() -> None:
    assert _demand(claim("c", request(count=2))) == ClaimDemand(gpus=2, gpu_models=("A100-40GB", "H100-80GB"))


def test_a_selector_on_the_product_narrows_the_flavor() -> None:
    only_h100 = 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")'
    assert _demand(claim("c", request(count=1, selectors=[only_h100]))).gpu_models == ("H100-80GB",)


def test_requests_of_several_claims_add_up() -> None:
    assert _demand(claim("a", request(count=2)), claim("b", request(count=3))).gpus == 5


def test_all_mode_counts_what_the_largest_pool_has() -> None:
    assert _demand(claim("c", request(mode="All"))).gpus == 4


def test_a_mig_partition_counts_by_its_profile() -> None:
    three_g = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    demand = _demand(claim("c", request("mig", device_class=MIG_CLASS, selectors=[three_g])))
    assert demand == ClaimDemand(mig="3g.40gb", gpu_models=("H100-80GB",))


def test_what_the_core_cannot_count_is_refused_naming_the_claim() -> None:
    with pytest.raises(ValidationError, match="several profiles"):
        _demand(claim("c", request("mig", device_class=MIG_CLASS)))
    with pytest.raises(ValidationError, match="DeviceClass nope does not exist"):
        _demand(claim("c", request(device_class="nope")))
    with pytest.raises(ValidationError, match="no one GPU model"):
        _demand(
            claim(
                "c",
                request("a", selectors=['device.attributes["gpu.nvidia.com"].productName.contains("H100")']),
                request("b", selectors=['device.attributes["gpu.nvidia.com"].productName.contains("A100")']),
            )
        )


def test_claims_give_the_pod_its_gpus_and_keep_the_rest_of_its_request() -> None:
    base = PodRequest(cpu_milli=8000, memory_mib=65536)
    merged = with_claims(base, ClaimDemand(gpus=8, gpu_models=("H100-80GB",)), where="Pod team-a/w-0")
    assert (merged.gpus, merged.gpu_models, merged.cpu_milli, merged.kind) == (
        8,
        ("H100-80GB",),
        8000,
        GpuKind.WHOLE,
    )
    mig = with_claims(base, ClaimDemand(mig="3g.40gb"), where="Pod team-a/w-0")
    assert mig.kind == GpuKind.MIG and mig.mig == "3g.40gb"
    # a pod with no GPU claims is left as it is
    assert with_claims(base, ClaimDemand(), where="Pod team-a/w-0") is base


def test_gpus_asked_both_ways_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"Pod team-a/w-0: field spec\.resourceClaims"):
        with_claims(PodRequest(gpus=1), ClaimDemand(gpus=1), where="Pod team-a/w-0")


def test_a_node_selectors_model_must_be_one_the_claims_can_have() -> None:
    on_h100 = PodRequest(gpu_models=("H100-80GB",))
    both = ClaimDemand(gpus=1, gpu_models=("A100-40GB", "H100-80GB"))
    assert with_claims(on_h100, both, where="Pod x").gpu_models == ("H100-80GB",)
    with pytest.raises(ValidationError, match="GPU model"):
        with_claims(on_h100, ClaimDemand(gpus=1, gpu_models=("A100-40GB",)), where="Pod x")
