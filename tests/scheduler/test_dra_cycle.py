"""DRA through the scheduling cycle: GPUs asked through ResourceClaims count against the queue's quota
and flavor like `nvidia.com/gpu`, an admitted workload holds its devices, and a preemption hands the
victim's devices to the preemptor."""

from __future__ import annotations

from typing import Any

from gpufleet.api.dra_claims import ResourceClaimSpec
from gpufleet.api.dra_devices import DeviceClassSpec, ResourceSliceSpec
from gpufleet.fleet.devices import node_devices
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.placement.dra import PodClaim, claim_demand, with_claims
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

F = "H100-80GB"
DRIVER = "gpu.nvidia.com"
CLASSES = {
    "gpu.nvidia.com": DeviceClassSpec.model_validate(
        {"selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].type == "gpu"'}}]}
    )
}


def published(node: str) -> ResourceSliceSpec:
    devices: list[dict[str, Any]] = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "index": {"int": i},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
            },
        }
        for i in range(8)
    ]
    return ResourceSliceSpec.model_validate(
        {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        }
    )


def dra_cache(nominal_gpus: int) -> ClusterCache:
    fleet = FleetState()
    for name in ("n0", "n1"):
        fleet.add_node(NodeSpec(name, F, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
        fleet.devices.set_node(name, node_devices([published(name)], node_name=name, labels={}))
    fleet.devices.set_classes(CLASSES)
    tree = QuotaTree([QuotaNode("q", quotas={F: FlavorLimits(nominal=nominal_gpus * 1000)})])
    return ClusterCache(
        fleet=fleet, tree=tree, settings={"q": QueueSettings("q")}, history=UsageHistory(3600)
    )


def claimed(cache: ClusterCache, name: str, gpus: int, *, priority: int = 0) -> Workload:
    spec = ResourceClaimSpec.model_validate(
        {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": gpus}}]}}
    )
    claim = PodClaim(key=f"team/{name}-gpus", namespace="team", spec=spec)
    devices = [d for n in cache.fleet.devices.nodes.values() for d in n.devices()]
    demand = claim_demand(
        [claim],
        classes=CLASSES,
        devices=devices,
        model_of=lambda product: F if "H100" in product else product,
    )
    request = with_claims(PodRequest(), demand, where=f"workload {name}")
    return Workload(name, (PodSet("main", 1, request, claims=(claim,)),), queue="q", priority=priority)


def test_dra_claims_count_against_the_queue_quota_of_their_gpu_model() -> None:
    cache = dra_cache(nominal_gpus=8)
    first, second = claimed(cache, "first", 8), claimed(cache, "second", 4)
    assert first.pod_sets[0].request.gpus == 8 and first.pod_sets[0].request.gpu_models == (F,)
    cache.submit(first)
    cache.submit(second)
    result = Scheduler().cycle(cache, now=100.0)
    assert [a.workload for a in result.admitted] == ["first"]
    assert result.pending["second"].reason.type == "QuotaExceeded"
    (claims,) = result.admitted[0].claims  # one pod, its one claim's allocation for the claim's status
    assert claims[0].claim == "team/first-gpus-0"
    assert len(claims[0].to_status().devices.results) == 8
    apply_decisions(cache, result, now=100.0)
    held = {pod for pod in cache.fleet.devices.in_use.values()}
    assert held == {"first/main/0"} and len(cache.fleet.devices.in_use) == 8
    cache.fleet.check_invariants()


def test_dra_preemption_hands_the_victims_devices_to_the_preemptor() -> None:
    cache = dra_cache(nominal_gpus=16)
    for i in range(2):
        cache.submit(claimed(cache, f"low{i}", 8))
    first = Scheduler().cycle(cache, now=100.0)
    apply_decisions(cache, first, now=100.0)
    assert len(cache.fleet.devices.in_use) == 16
    cache.submit(claimed(cache, "high", 8, priority=10))
    now = 200.0
    preempted: list[str] = []
    admitted: list[Any] = []
    for _ in range(3):  # the preemptor is admitted once its victim is gone
        result = Scheduler().cycle(cache, now=now)
        preempted += [p.victim for p in result.preempted]
        admitted += [a for a in result.admitted if a.workload == "high"]
        apply_decisions(cache, result, now=now)
        now += 1
        if admitted:
            break
    assert len(preempted) == 1 and admitted
    devices = admitted[0].allocations[0].devices
    assert len(devices) == 8
    victim_node = {"low0/main/0", "low1/main/0"} - set(cache.fleet.devices.in_use.values())
    assert len(victim_node) == 1
    assert {cache.fleet.devices.in_use[d] for d in devices} == {"high/main/0"}
    cache.fleet.check_invariants()
