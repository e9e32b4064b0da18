"""A real Pod's resourceClaims: which claims it uses, and its request with their GPUs, beside the
extended-resource path."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.api.dra_claims import ResourceClaimSpec
from gpufleet.api.dra_devices import DeviceClassSpec, ResourceSliceSpec
from gpufleet.api.errors import ValidationError
from gpufleet.fleet.devices import node_devices
from gpufleet.kube.claims import ClaimRef, claim_refs, pod_request_with_claims
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.pods import pod_request
from gpufleet.scheduler.placement.dra import PodClaim

from .fixtures import pod

CLASSES = {
    "gpu.nvidia.com": DeviceClassSpec.model_validate(
        {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}
    )
}
DEVICES = node_devices(
    [
        ResourceSliceSpec.model_validate(
            {
                "driver": "gpu.nvidia.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {
                            "type": {"string": "gpu"},
                            "productName": {"string": "NVIDIA H100 80GB HBM3"},
                        },
                    }
                    for i in range(8)
                ],
            }
        )
    ],
    node_name="n1",
    labels={},
).devices()


def _with_claims(
    obj: dict[str, Any], entries: list[dict[str, str]], made: dict[str, str] | None = None
) -> None:
    obj["spec"]["resourceClaims"] = entries
    if made:
        obj.setdefault("status", {})["resourceClaimStatuses"] = [
            {"name": k, "resourceClaimName": v} for k, v in made.items()
        ]


def test_claim_refs_follow_the_template_to_the_claim_made_for_the_pod() -> None:
    obj = pod("w-0", gpus=None)
    _with_claims(
        obj,
        [
            {"name": "gpus", "resourceClaimTemplateName": "eight-h100"},
            {"name": "shared", "resourceClaimName": "nic"},
        ],
        made={"gpus": "w-0-gpus-x7k2p"},
    )
    assert claim_refs(obj) == [
        ClaimRef("gpus", "w-0-gpus-x7k2p", "eight-h100"),
        ClaimRef("shared", "nic", None),
    ]
    # before the resource-claim controller made it, the claim is not known yet
    del obj["status"]["resourceClaimStatuses"]
    assert claim_refs(obj)[0].claim is None


def test_an_entry_naming_both_a_claim_and_a_template_is_refused() -> None:
    obj = pod("w-0", gpus=None)
    _with_claims(obj, [{"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}])
    with pytest.raises(ValidationError, match=r"spec\.resourceClaims\[0\]"):
        claim_refs(obj)


def test_gpus_from_claims_are_the_pods_gpus_with_their_model() -> None:
    obj = pod("w-0", gpus=None)
    spec = ResourceClaimSpec.model_validate(
        {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]
            }
        }
    )
    claims = [PodClaim("team-a/w-0-gpus-x7k2p", "team-a", spec)]
    request = pod_request_with_claims(obj, KubeConfig(), claims=claims, classes=CLASSES, devices=DEVICES)
    assert (request.gpus, request.gpu_models) == (8, ("H100-80GB",))
    assert request.cpu_milli == pod_request(obj, KubeConfig()).cpu_milli


def test_the_extended_resource_path_is_unchanged_without_claims() -> None:
    obj = pod("w-0", gpus=4)
    assert pod_request_with_claims(
        obj, KubeConfig(), claims=[], classes=CLASSES, devices=DEVICES
    ) == pod_request(obj, KubeConfig())
