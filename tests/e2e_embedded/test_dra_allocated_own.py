"""A pod's own claim (the one its template entry gives pod `i`) allocated already when the embedded
scheduler places its pod set of several pods (another scheduler allocated it, or it was kept from an
earlier admission): adopted by the pod, never re-allocated, the pod pinned to its node, its devices kept
from the other pods."""

from __future__ import annotations

from gpufleet.api.dra import ResourceClaim
from gpufleet.api.runtime import Node

from .conftest import World
from .test_dra_claims import FLEET, claims, job, pods


def preallocated(world: World, name: str, node: str, devices: list[str]) -> ResourceClaim:
    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}
                    ]
                }
            },
        }
    )
    made = world.store.create(claim)
    results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devices]
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }
    status = made.status.model_validate(
        {"allocation": {"devices": {"results": results}, "nodeSelector": selector}}
    )
    written: ResourceClaim = world.store.update_status(made.model_copy(update={"status": status}))
    return written


def test_dra_a_pods_allocated_claim_is_kept_in_a_pod_set_of_several(world: World) -> None:
    world.apply(FLEET)
    world.runtime.run_for(5)
    nodes = sorted(n.name for n in world.store.list(Node))
    last = nodes[-1]
    # Pod 1's claim holds GPUs 0-3 of the last node already; pod 0's is made at admission. Placed
    # first, pod 0 would take those very GPUs (the allocator goes in device order) were they not kept.
    given = preallocated(world, "job-ft-worker-gpus-1", last, [f"gpu-{i}" for i in range(4)])
    assert given.status.allocation is not None
    world.apply(job("ft", 2, duration=600))
    world.runtime.run_for(60)
    running = {p.spec.resource_claims[0].resource_claim_name: p for p in pods(world, "ft")}
    assert sorted(running) == ["job-ft-worker-gpus-0", "job-ft-worker-gpus-1"]
    kept = claims(world)["job-ft-worker-gpus-1"]
    assert kept.status.allocation is not None
    assert kept.status.allocation.devices == given.status.allocation.devices  # never re-allocated
    pod = running["job-ft-worker-gpus-1"]
    assert pod.spec.node_name == last and sorted(pod.spec.gpus) == [0, 1, 2, 3]
    assert [r.uid for r in kept.status.reserved_for] == [pod.metadata.uid]
    other = claims(world)["job-ft-worker-gpus-0"].status.allocation
    assert other is not None
    mine = {(r.pool, r.device) for r in kept.status.allocation.devices.results}
    assert not mine & {(r.pool, r.device) for r in other.devices.results}
    # adopted: it goes with its pod, as a claim made for it
    world.runtime.run_for(900)
    assert world.get("TrainingJob", "ft", "ml").status.phase == "Succeeded"
    assert claims(world) == {}


def test_dra_a_pods_allocated_claim_pins_it_where_the_other_pods_devices_are_left(world: World) -> None:
    world.apply(FLEET.replace("nodes: 2", "nodes: 1"))
    world.runtime.run_for(5)
    (node,) = [n.name for n in world.store.list(Node)]
    preallocated(world, "job-ft-worker-gpus-1", node, [f"gpu-{i}" for i in range(4)])
    world.apply(job("ft", 2, duration=600))
    world.runtime.run_for(60)
    assert len(pods(world, "ft")) == 2
    made = claims(world)
    first = made["job-ft-worker-gpus-0"].status.allocation
    assert first is not None and {r.device for r in first.devices.results} == {
        f"gpu-{i}" for i in range(4, 8)
    }
