"""The manager's view from stored objects: three workers report into their Clusters, queues written in
YAML span them, and the dispatcher honours the fleet-wide quota, a queue's region and each cluster's
lease and drain."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from gpufleet.api import Cluster, Queue, load_objects
from gpufleet.federation.dispatch import Dispatched, NotDispatched
from gpufleet.federation.manager import cluster_conditions, manager_view, worker_status
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

NOW = datetime(2026, 3, 1, tzinfo=UTC)

OBJECTS = """
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: org}
spec:
  quotas: {H100-80GB: {nominal: 0}}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: research}
spec:
  parent: org
  quotas: {H100-80GB: {nominal: 40, borrowingLimit: 0}}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: eu-team}
spec:
  parent: org
  quotas: {H100-80GB: {nominal: 16}}
  clusters: {selector: region=eu}
"""


def cluster_yaml(name: str, region: str, price: float) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {{name: {name}}}
spec:
  connection: {{embedded: {{url: "http://127.0.0.1:0", tokenSecretRef: {{name: {name}, key: token}}}}}}
  region: {region}
  pricePerGPUHour: {{H100-80GB: {price}}}
  leaseSeconds: 30
"""


def worker_fleet(racks: int) -> FleetState:
    """A worker with `racks` racks of two 8-GPU H100 hosts."""
    state = FleetState(["rack"])
    for rack in range(racks):
        for host in range(2):
            state.add_node(
                NodeSpec(f"r{rack}h{host}", gpu_model="H100-80GB", gpus=8, labels={"rack": f"r{rack}"})
            )
    return state


def fleet_objects() -> tuple[list[Cluster], list[Queue]]:
    clusters: list[Cluster] = []
    for name, region, price, racks in (
        ("us-1", "us", 2.0, 1),
        ("us-2", "us", 3.0, 2),
        ("eu-1", "eu", 4.0, 1),
    ):
        (cluster,) = load_objects(cluster_yaml(name, region, price))
        assert isinstance(cluster, Cluster)
        cluster.status = worker_status(worker_fleet(racks), now=NOW)
        clusters.append(cluster)
    queues = [q for q in load_objects(OBJECTS) if isinstance(q, Queue)]
    return clusters, queues


def job(name: str, queue: str, hosts: int, *, rack: bool = False) -> Workload:
    topology = TopologyRequest(required="rack" if rack else None)
    return Workload(name, (PodSet("worker", hosts, PodRequest(gpus=8)),), queue=queue, topology=topology)


def placed(decisions: Sequence[object]) -> dict[str, str]:
    return {d.workload: d.cluster for d in decisions if isinstance(d, Dispatched)}


def test_quota_spans_clusters_and_a_queue_keeps_to_its_region() -> None:
    clusters, queues = fleet_objects()
    view = manager_view(clusters, queues, now=NOW + timedelta(seconds=5))
    assert view.broken_queues == {}
    decisions = view.dispatch(
        [
            job("a", "research", 2, rack=True),  # one rack of 16: us-1 is cheapest
            job("b", "research", 2, rack=True),  # us-1 is full: us-2
            job("c", "research", 1),  # 40 GPUs of quota over all clusters: 8 left, us-2
            job("d", "research", 1),  # quota spent, though eu-1 is empty
            job("e", "eu-team", 1),  # only eu clusters
        ]
    )
    assert placed(decisions) == {"a": "us-1", "b": "us-2", "c": "us-2", "e": "eu-1"}
    refused = decisions[3]
    assert isinstance(refused, NotDispatched) and refused.reason == "QuotaExceeded"
    assert view.dispatcher.quota.usage("research", "H100-80GB") == 40_000


def test_a_silent_or_draining_cluster_gets_no_new_work_and_says_so() -> None:
    clusters, queues = fleet_objects()
    later = NOW + timedelta(seconds=31)
    for cluster in clusters:
        if cluster.name == "us-2":
            cluster.status.heartbeat_time = later  # the only worker that reported again
    us1 = next(c for c in clusters if c.name == "us-1")
    conditions = {c.type: c for c in cluster_conditions(us1, now=later)}
    assert conditions["Ready"].status == "False" and conditions["LeaseExpired"].status == "True"
    assert "no heartbeat for 31s, lease 30s" in (conditions["LeaseExpired"].message or "")
    decisions = manager_view(clusters, queues, now=later).dispatch([job("a", "research", 1)])
    assert placed(decisions) == {"a": "us-2"}, "us-1 is cheaper but silent past its lease"
    us2 = next(c for c in clusters if c.name == "us-2")
    (drain,) = load_objects(cluster_yaml("us-2", "us", 3.0) + "  drain: {reason: CHG-7}\n")
    assert isinstance(drain, Cluster)
    us2.spec = drain.spec
    assert {c.type: c.status for c in cluster_conditions(us2, now=later)}["Draining"] == "True"
    refused = manager_view(clusters, queues, now=later).dispatch([job("b", "research", 1)])
    assert placed(refused) == {}, "the only live cluster is draining"


def test_a_cluster_whose_clock_runs_ahead_gets_no_new_work_and_says_why() -> None:
    clusters, queues = fleet_objects()
    us1 = next(c for c in clusters if c.name == "us-1")
    us1.status.heartbeat_time = NOW + timedelta(seconds=60)  # a worker at another --time-scale
    us1.status.conditions = cluster_conditions(us1, now=NOW)
    ready = next(c for c in us1.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "ClockAhead")
    assert "60s ahead" in (ready.message or "") and "--time-scale 1" in (ready.message or "")
    decisions = manager_view(clusters, queues, now=NOW).dispatch([job("a", "research", 1)])
    assert placed(decisions) == {"a": "us-2"}, "us-1 is cheaper, but its lease cannot be trusted"
    us1.status.heartbeat_time = NOW + timedelta(seconds=2)  # a request in flight: fine
    assert {c.type: c.status for c in cluster_conditions(us1, now=NOW)}["Ready"] == "True"
