"""A property of DRA in the embedded world: whatever users do (submit jobs whose pods take claims from
templates or share a claim, delete jobs, pods and the shared claim, preempt by priority, restart the
control plane), no device is ever allocated to two ResourceClaims, every running pod's claims are
allocated and reserved for it, and no claim keeps its devices reserved for no one."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.api.dra import ResourceClaim
from gpufleet.api.errors import GpuFleetError, NotFoundError
from gpufleet.api.runtime import Pod
from gpufleet.controllers.scheduling import SchedulingController

from .conftest import World, make_world

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: dra}
spec: {gpuModel: H100-80GB, gpusPerNode: 4, nodes: 2, dra: true}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].type == "gpu"'}}]
"""
TEMPLATES = "".join(
    f"""
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: gpus-{n}, namespace: ml}}
spec:
  spec:
    devices:
      requests: [{{name: gpus, exactly: {{deviceClassName: gpu.nvidia.com, count: {n}}}}}]
"""
    for n in (1, 2, 3)
)
SHARED = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared, namespace: ml}
spec:
  devices:
    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}]
"""


def job(name: str, replicas: int, claim: str, priority: str, duration: int) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: ml}}
spec:
  replicas: {replicas}
  priorityClass: {priority}
  durationSeconds: {duration}
  worker:
    template:
      spec:
        resourceClaims: [{{name: gpus, {claim}}}]
"""


submit = st.tuples(
    st.just("submit"),
    st.integers(1, 2),
    st.sampled_from(
        [
            "resourceClaimTemplateName: gpus-1",
            "resourceClaimTemplateName: gpus-2",
            "resourceClaimTemplateName: gpus-3",
            "resourceClaimName: shared",
        ]
    ),
    st.sampled_from(["research", "production-training"]),
    st.sampled_from([120, 600, 3600]),
)
action = st.one_of(
    submit,
    st.tuples(st.just("delete-job"), st.integers(0, 7)),
    st.tuples(st.just("delete-pod"), st.integers(0, 7)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("delete-shared")),
    st.tuples(st.just("apply-shared")),
    st.tuples(st.just("run"), st.sampled_from([5, 60, 400])),
)


def check(world: World) -> None:
    stored = list(world.store.list(ResourceClaim, namespace="ml"))
    devices = Counter(
        (r.pool, r.device)
        for c in stored
        if c.status.allocation is not None
        for r in c.status.allocation.devices.results
    )
    assert all(n == 1 for n in devices.values()), f"a device in two claims: {devices}"
    by_name = {c.name: c for c in stored}
    for claim in stored:
        assert (claim.status.allocation is None) == (claim.status.reserved_for == []), claim.name
    for pod in world.store.list(Pod, namespace="ml"):
        if pod.terminated or pod.metadata.deletion_timestamp is not None:
            continue
        for entry in pod.spec.resource_claims:
            claim = by_name[entry.resource_claim_name]
            assert claim.status.allocation is not None, f"{pod.name}: {claim.name} not allocated"
            assert pod.metadata.uid in {r.uid for r in claim.status.reserved_for}, pod.name
    for controller in world.manager.controllers:
        if isinstance(controller, SchedulingController) and controller.cache is not None:
            fleet = controller.cache.fleet
            fleet.check_invariants()
            # the scheduler's view holds exactly the devices the stored claims hold (after a restart too)
            assert {(pool, device) for _, pool, device in fleet.devices.in_use} == set(devices)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=12))
def test_dra_no_device_is_ever_held_by_two_claims(actions: list[tuple[Any, ...]]) -> None:
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        world = make_world(path)
        world.apply(FLEET + TEMPLATES)
        world.apply(SHARED)
        world.runtime.run_for(30)
        jobs: list[str] = []
        try:
            for step in actions:
                kind = step[0]
                if kind == "submit":
                    _, replicas, claim, priority, duration = step
                    name = f"j{len(jobs)}"
                    jobs.append(name)
                    world.apply(job(name, replicas, claim, priority, duration))
                elif kind == "delete-job" and jobs:
                    with contextlib.suppress(NotFoundError):
                        world.store.delete("TrainingJob", jobs[step[1] % len(jobs)], "ml")
                elif kind == "delete-pod":
                    live = [p for p in world.store.list(Pod, namespace="ml") if not p.terminated]
                    if live:
                        victim = live[step[1] % len(live)]
                        world.store.delete(Pod, victim.name, "ml")
                elif kind == "delete-shared":
                    with contextlib.suppress(NotFoundError):
                        world.store.delete(ResourceClaim, "shared", "ml")
                elif kind == "apply-shared":
                    with contextlib.suppress(GpuFleetError):  # refused while its delete is pending
                        world.apply(SHARED)
                elif kind == "restart":
                    world.store.close()
                    world = make_world(path, clock=world.clock)
                elif kind == "run":
                    world.runtime.run_for(step[1])
                world.runtime.run_for(2)
                check(world)
        finally:
            world.store.close()
