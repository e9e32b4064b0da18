"""DRA in the embedded world: the nodes of a `dra` pool publish their GPUs in ResourceSlices, keep them
current as a GPU fails and recovers, and hand their GPUs out through claims only, while a pool of
extended-resource nodes runs beside them."""

from __future__ import annotations

from gpufleet.api.dra import ResourceSlice
from gpufleet.api.runtime import Pod
from gpufleet.twin.twin import GpuFailure, GpuRepair

from .conftest import World

POOLS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: dra}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1, dra: true, driverVersion: 550.54.15}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: ext}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: ft}
spec:
  replicas: 2
  worker: {gpus: 8}
  durationSeconds: 1200
"""


def devices(world: World) -> list[list[str]]:
    return [[d.name for d in s.spec.devices] for s in world.store.list(ResourceSlice).items]


def test_dra_pool_nodes_publish_slices_that_follow_gpu_health(world: World) -> None:
    world.apply(POOLS)
    world.runtime.run_for(120)
    (published,) = world.store.list(ResourceSlice).items
    assert published.spec.node_name == "dra-0" and published.spec.pool.generation == 1
    assert devices(world) == [[f"gpu-{i}" for i in range(8)]]
    assert published.spec.devices[0].attributes["driverVersion"].value == "550.54.15"
    # the extended-resource job of 2 x 8 GPUs does not fit: one node advertises GPUs that way
    assert not [p for p in world.store.list(Pod).items if p.spec.node_name]
    assert world.get("TrainingJob", "ft").status.phase == "Pending"
    world.twin.inject(GpuFailure(node="dra-0", gpu=3))
    world.runtime.run_for(5)
    (after,) = world.store.list(ResourceSlice).items
    assert after.spec.pool.generation == 2
    assert [d.name for d in after.spec.devices] == [f"gpu-{i}" for i in range(8) if i != 3]
    world.twin.inject(GpuRepair(node="dra-0", gpu=3))
    world.runtime.run_for(5)
    (repaired,) = world.store.list(ResourceSlice).items
    assert repaired.spec.pool.generation == 3 and len(repaired.spec.devices) == 8
    world.store.delete("GPUPool", "dra")
    world.runtime.run_for(600)
    assert world.store.list(ResourceSlice).items == []
