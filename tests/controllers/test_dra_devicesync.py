"""The embedded scheduler's DRA device view follows the stored ResourceSlices and DeviceClasses: a node
whose GPUs are published in slices hands them out through claims only, and stops being one when its
slices go; both kinds of node run side by side."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api import load_objects
from gpufleet.api.dra import DeviceClass, ResourceSlice
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Node, NodeSpec, Pod
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.controllers.training import TrainingJobController
from gpufleet.sharing.dra_slices import node_slices
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: research}}
spec:
  replicas: 1
  worker: {{gpus: 8}}
  durationSeconds: 3600
"""

GPU_CLASS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].type == "gpu"'}}]
"""


def test_dra_published_nodes_are_in_the_device_view_and_take_no_extended_resource_pods(
    tmp_path: Path,
) -> None:
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)
    for name in ("d1", "e1"):
        node = store.create(
            Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model="H100-80GB", gpus=8))
        )
        store.update_status(
            node.model_copy(update={"status": node.status.model_copy(update={"phase": "Ready"})})
        )
    (spec,) = node_slices("d1", gpu_model="H100-80GB", gpus=8, memory_gb=80)
    store.create(ResourceSlice(metadata=ObjectMeta(name="d1-gpu.nvidia.com"), spec=spec))
    for obj in load_objects(GPU_CLASS):
        store.apply(obj)
    scheduling = SchedulingController(store)
    manager = ControllerManager(store, [scheduling, TrainingJobController(store)])
    for name in ("first", "second"):
        for obj in load_objects(JOB.format(name=name)):
            store.apply(obj)
    for _ in range(4):
        manager.step(0.0)
    cache = scheduling.cache
    assert cache is not None
    assert list(cache.fleet.devices.nodes) == ["d1"]
    assert list(cache.fleet.devices.classes) == ["gpu.nvidia.com"]
    assert [p.spec.node_name for p in store.list(Pod, namespace="research").items] == ["e1"]
    # the slice goes (the node no longer publishes its GPUs): its GPUs are extended resources again
    store.delete(ResourceSlice, "d1-gpu.nvidia.com")
    for _ in range(4):
        manager.step(1.0)
    assert cache.fleet.devices.nodes == {}
    assert sorted(p.spec.node_name or "" for p in store.list(Pod, namespace="research").items) == ["d1", "e1"]
    store.delete(DeviceClass, "gpu.nvidia.com")
    manager.step(2.0)
    assert cache.fleet.devices.classes == {}
