"""The DRA kinds read Kubernetes' resource.k8s.io/v1 YAML as written, and refuse what they cannot honour,
naming the field."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import yaml

from gpufleet.api.dra import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpufleet.api.training import TrainingJob
from gpufleet.api.validation import translate_error

# As NVIDIA's DRA driver for GPUs publishes a node's GPU and its MIG partitions (abridged).
SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-a-gpu.nvidia.com-x7k2p}
spec:
  driver: gpu.nvidia.com
  nodeName: node-a
  pool: {name: node-a, generation: 3, resourceSliceCount: 1}
  sharedCounters:
    - name: gpu-0-counter-set
      counters: {memorySlice0: {value: "1"}, memory: {value: 80Gi}}
  devices:
    - name: gpu-0
      attributes:
        productName: {string: NVIDIA H100 80GB HBM3}
        architecture: {string: Hopper}
        cudaComputeCapability: {version: 9.0.0}
        driverVersion: {version: 550.54.15}
        index: {int: 0}
        gpu.nvidia.com/cliqueId: {string: "7c0a.1"}
      capacity: {memory: {value: 80Gi}}
      consumesCounters:
        - counterSet: gpu-0-counter-set
          counters: {memorySlice0: {value: "1"}, memory: {value: 80Gi}}
"""

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: eight-gpus, namespace: team-a}
spec:
  devices:
    requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.nvidia.com
          allocationMode: ExactCount
          count: 8
          selectors:
            - cel: {expression: 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")'}
    constraints:
      - requests: [gpus]
        matchAttribute: gpu.nvidia.com/cliqueId
"""


def _load(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def _error(model: type[pydantic.BaseModel], data: dict[str, Any]) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        model.model_validate(data)
    return str(translate_error(caught.value, obj=f"{data['kind']} {data['metadata']['name']}"))


def test_a_published_slice_reads_with_its_typed_attributes_and_counters() -> None:
    s = ResourceSlice.model_validate(_load(SLICE))
    device = s.spec.devices[0]
    assert s.spec.pool.resource_slice_count == 1
    assert device.attributes["index"].value == 0
    assert device.attributes["driverVersion"].version == "550.54.15"
    assert device.consumes_counters[0].counter_set == "gpu-0-counter-set"
    assert s.metadata.namespace is None  # cluster-wide, as in Kubernetes
    # Written back as Kubernetes spells it.
    dumped = s.to_dict()
    assert dumped["spec"]["pool"]["resourceSliceCount"] == 1
    assert dumped["spec"]["devices"][0]["attributes"]["index"] == {"int": 0}


def test_a_claim_and_a_template_read_as_written() -> None:
    claim = ResourceClaim.model_validate(_load(CLAIM))
    request = claim.spec.devices.requests[0]
    assert (request.exactly.device_class_name, request.exactly.wanted) == ("gpu.nvidia.com", 8)
    assert claim.spec.devices.constraints[0].match_attribute == "gpu.nvidia.com/cliqueId"
    template = ResourceClaimTemplate.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "team-a"},
            "spec": {"metadata": {"labels": {"a": "b"}}, "spec": _load(CLAIM)["spec"]},
        }
    )
    assert template.spec.spec == claim.spec


def test_an_attribute_with_two_values_is_refused_naming_it() -> None:
    data = _load(SLICE)
    data["spec"]["devices"][0]["attributes"]["index"] = {"int": 0, "string": "0"}
    message = _error(ResourceSlice, data)
    assert "spec.devices[0].attributes.index" in message
    assert "exactly one of int, bool, string and version" in message


def test_a_slice_must_say_which_nodes_reach_it_once() -> None:
    data = _load(SLICE)
    data["spec"]["allNodes"] = True
    assert "exactly one of nodeName, nodeSelector, allNodes" in _error(ResourceSlice, data)


def test_a_device_listed_twice_in_a_slice_is_refused() -> None:
    data = _load(SLICE)
    data["spec"]["devices"].append(data["spec"]["devices"][0])
    assert "device 'gpu-0' is listed twice" in _error(ResourceSlice, data)


def test_a_constraint_on_an_unknown_request_is_refused() -> None:
    data = _load(CLAIM)
    data["spec"]["devices"]["constraints"][0]["requests"] = ["gpus", "nics"]
    message = _error(ResourceClaim, data)
    assert "spec.devices.constraints[0].requests" in message and "'nics'" in message


def test_all_mode_takes_no_count() -> None:
    data = _load(CLAIM)
    data["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    assert "spec.devices.requests[0].exactly.count" in _error(ResourceClaim, data)


def test_fields_not_modelled_yet_are_refused_not_ignored() -> None:
    """A claim with prioritized alternatives must not be allocated as if it had none."""
    data = _load(CLAIM)
    data["spec"]["devices"]["requests"][0]["firstAvailable"] = []
    assert "firstAvailable" in _error(ResourceClaim, data)


def test_a_device_class_is_cluster_wide() -> None:
    data = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com", "namespace": "x"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
    }
    assert "metadata.namespace" in _error(DeviceClass, data)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"name": "gpus"}, "exactly one of resourceClaimName and resourceClaimTemplateName"),
        ({"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}, "exactly one of"),
    ],
)
def test_a_pod_template_claim_entry_names_one_claim_or_template(entry: dict[str, Any], expected: str) -> None:
    job = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "ft", "namespace": "ml"},
        "spec": {"replicas": 1, "worker": {"template": {"spec": {"resourceClaims": [entry]}}}},
    }
    message = _error(TrainingJob, job)
    assert "spec.worker.template.spec.resourceClaims[0]" in message and expected in message


def test_a_pod_template_names_its_claims_in_order() -> None:
    template = {"spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "four"}]}}
    worker = TrainingJob.model_validate(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "ft"},
            "spec": {"replicas": 1, "worker": {"template": template}},
        }
    ).spec.worker
    assert [(e.name, e.resource_claim_template_name) for e in worker.resource_claims] == [("gpus", "four")]
