"""Which pools could serve a waiting workload: model, sharing mode, MIG profile, queue flavors, topology."""

from __future__ import annotations

import pytest

from gpufleet.api import load_objects
from gpufleet.api.pool import GPUPool
from gpufleet.api.runtime import OwnerRef, WorkloadPodSet, WorkloadSpec
from gpufleet.controllers.capacity import nodes_for, serving_pools

POOLS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, pricePerGPUHour: 3.0, nodeResources: {cpu: 64}}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100-spot}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, pricePerGPUHour: 3.0, capacityType: spot}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: a100}
spec: {gpuModel: A100-80GB, gpusPerNode: 8, pricePerGPUHour: 2.0}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: a100-mig}
spec: {gpuModel: A100-80GB, gpusPerNode: 8, pricePerGPUHour: 1.0, sharing: {mig: {"*": [3g.40gb, 3g.40gb]}}}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: l4-sliced}
spec: {gpuModel: L4, gpusPerNode: 4, pricePerGPUHour: 0.5, sharing: {timeSlicing: {replicas: 4}}}
"""


def _pools() -> list[GPUPool]:
    return [obj for obj in load_objects(POOLS) if isinstance(obj, GPUPool)]


def _spec(request: dict[str, object], *, count: int = 1, required: str | None = None) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "owner": OwnerRef(kind="TrainingJob", name="t").model_dump(),
            "podSets": [WorkloadPodSet.model_validate({"count": count, "request": request}).to_dict()],
            "topology": {"required": required} if required else {},
        }
    )


CASES = [
    ("whole GPUs of any model", {"gpus": 8}, 1, None, None, ["a100", "h100", "h100-spot"]),
    ("one model", {"gpus": 8, "gpuModel": "H100-80GB"}, 1, None, None, ["h100", "h100-spot"]),
    ("queue flavors", {"gpus": 2}, 1, None, {"H100-80GB"}, ["h100", "h100-spot"]),
    ("a spot-only queue", {"gpus": 2}, 1, None, {"H100-80GB/spot"}, ["h100-spot"]),
    ("an on-demand-only queue", {"gpus": 2}, 1, None, {"H100-80GB/on-demand", "L4/spot"}, ["h100"]),
    ("a MIG profile", {"mig": "3g.40gb"}, 1, None, None, ["a100-mig"]),
    ("a MIG profile the queue lacks", {"mig": "3g.40gb"}, 1, None, {"A100-80GB"}, []),
    ("a share", {"gpuMilli": 250}, 1, None, None, ["l4-sliced", "a100", "h100", "h100-spot"]),
    ("more CPU than a node has", {"gpus": 1, "cpu": 96}, 1, None, None, ["a100", "h100-spot"]),
    ("one host for two nodes' worth", {"gpus": 8}, 2, "host", None, []),
    ("one host, fits one node", {"gpus": 4}, 2, "host", None, ["a100", "h100", "h100-spot"]),
]


@pytest.mark.parametrize(("name", "request_", "count", "required", "flavors", "want"), CASES)
def test_serving_pools(
    name: str,
    request_: dict[str, object],
    count: int,
    required: str | None,
    flavors: set[str] | None,
    want: list[str],
) -> None:
    got = serving_pools(_spec(request_, count=count, required=required), _pools(), flavors=flavors)
    assert got == want, name


def test_nodes_for_rounds_up_per_pod_set() -> None:
    h100 = next(p for p in _pools() if p.name == "h100").spec
    assert nodes_for(_spec({"gpus": 4}, count=5).pod_sets, h100) == 3
    assert nodes_for(_spec({"gpus": 1, "cpu": 32}, count=5).pod_sets, h100) == 3  # 2 per node by CPU
    assert nodes_for(_spec({"mig": "1g.10gb"}).pod_sets, h100) == 0
