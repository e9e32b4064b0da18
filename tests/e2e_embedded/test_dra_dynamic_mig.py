"""Dynamic MIG in the embedded world: a twin node of a `dra` pool with MIG GPUs has no fixed layout; its
MIG instances are the partitions its claims were allocated, on the very GPU and slices the fleet
records, and a GPU whose last instance is gone is handed out whole again."""

from __future__ import annotations

from gpufleet.api.dra import ResourceClaim
from gpufleet.api.runtime import Pod

from .conftest import World

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: mig}
spec: {gpuModel: A100-40GB, gpusPerNode: 2, nodes: 1, dra: true, sharing: {mig: {"*": [7g.40gb]}}}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec:
  quotas: {A100-40GB: {nominal: 4}, 3g.20gb: {nominal: 4}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].type == "gpu"'}}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: mig.nvidia.com}
spec:
  selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].type == "mig"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: half, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: mig
          exactly:
            deviceClassName: mig.nvidia.com
            selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].profile == "3g.20gb"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: whole, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly: {deviceClassName: gpu.nvidia.com}
"""


def job(name: str, template: str, replicas: int, duration: int) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: ml}}
spec:
  queue: team
  replicas: {replicas}
  durationSeconds: {duration}
  worker:
    template:
      spec:
        resourceClaims: [{{name: dev, resourceClaimTemplateName: {template}}}]
"""


def running(world: World, job_name: str) -> list[Pod]:
    return [
        p
        for p in world.store.list(Pod, namespace="ml")
        if p.spec.owner.name == job_name and p.status.phase == "Running"
    ]


def device_of(world: World, pod: Pod) -> str:
    (entry,) = pod.spec.resource_claims
    claim = world.store.get(ResourceClaim, entry.resource_claim_name, namespace="ml")
    assert claim.status.allocation is not None
    (result,) = claim.status.allocation.devices.results
    return result.device


def test_dra_dynamic_mig_instances_follow_claims_and_a_freed_gpu_is_whole_again(world: World) -> None:
    world.apply(FLEET)
    world.apply(job("parts", "half", 2, 600))
    world.runtime.run_for(60)
    world.apply(job("big", "whole", 1, 3600))
    world.runtime.run_for(60)
    parts = running(world, "parts")
    assert len(parts) == 2
    for pod in parts:
        # the fleet's instance is the claim's device: gpu-<parent>-mig-<GI profile>-<start>-<slices>
        _, parent, _, _, start, _ = device_of(world, pod).split("-")
        assert pod.spec.mig is not None and (pod.spec.mig.gpu, pod.spec.mig.start) == (
            int(parent),
            int(start),
        )
    partitioned = {p.spec.mig.gpu for p in parts if p.spec.mig is not None}
    assert len(partitioned) == 1, "two 3g.20gb fit one A100-40GB: the allocator packs them on one GPU"
    # the other GPU is whole, and the whole-GPU claim gets it (a fixed MIG layout would refuse it)
    (big,) = running(world, "big")
    assert big.spec.gpus == [1 - partitioned.pop()] and device_of(world, big) == f"gpu-{big.spec.gpus[0]}"

    # a second whole GPU waits for the partitions to go, then gets the GPU they left
    world.apply(job("later", "whole", 1, 3600))
    world.runtime.run_for(120)
    assert running(world, "later") == []
    world.runtime.run_for(600)
    assert running(world, "parts") == []
    (later,) = running(world, "later")
    assert later.spec.gpus != big.spec.gpus and device_of(world, later) == f"gpu-{later.spec.gpus[0]}"
