"""A worker's summary survives the trip through Cluster.status; the manager sends work only to a Cluster
that is Ready, not draining and within its lease; a queue's spec.clusters restricts the dispatcher."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpufleet.api import Cluster, parse_object
from gpufleet.api.cluster import ClusterAffinity, ClusterDrain
from gpufleet.api.meta import Condition
from gpufleet.federation.convert import capacity_status, choice_of, summary_of
from gpufleet.federation.summary import summarize
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.state import FleetState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def reported(**spec: object) -> Cluster:
    state = FleetState(["rack"])
    for i in range(3):
        state.add_node(NodeSpec(f"h{i}", gpu_model="H100-80GB", gpus=8, labels={"rack": f"r{i % 2}"}))
    state.add_node(
        NodeSpec(
            "m",
            gpu_model="A100-40GB",
            gpus=1,
            sharing=SharingMode.MIG,
            mig_layouts={0: ("3g.20gb", "3g.20gb")},
        )
    )
    cluster = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "w1", "labels": {"tier": "prod"}},
            "spec": {
                "connection": {"kubeconfigSecretRef": {"name": "w1", "key": "kubeconfig"}},
                "region": "eu",
                "pricePerGPUHour": {"H100-80GB": 3.0},
                **spec,
            },
        }
    )
    assert isinstance(cluster, Cluster)
    cluster.status.capacity = capacity_status(summarize(state))
    cluster.status.heartbeat_time = NOW
    return parse_object(cluster.to_dict())  # type: ignore[return-value]  # as read back from a store


def test_the_summary_round_trips_through_the_cluster_status() -> None:
    cluster = reported()
    h100 = cluster.status.capacity["H100-80GB"]
    assert h100.free_domains["rack"] == {"8": 1, "16": 1} and h100.largest_free_domain["rack"] == 16
    summary = summary_of(cluster, now=NOW)
    assert summary.labels == {"tier": "prod", "region": "eu"} and summary.prices == {"H100-80GB": 3.0}
    assert summary.accepting
    state_models = summary.models
    assert state_models["H100-80GB"].free_domains["host"] == {8: 3}
    assert state_models["A100-40GB"].free_mig == {"3g.20gb": 2}


def test_work_goes_only_to_a_ready_cluster_within_its_lease_and_not_draining() -> None:
    cluster = reported(leaseSeconds=30)
    assert summary_of(cluster, now=NOW + timedelta(seconds=30)).accepting
    assert not summary_of(cluster, now=NOW + timedelta(seconds=31)).accepting, "lease expired"
    cluster.spec.drain = ClusterDrain(reason="maintenance")
    assert not summary_of(cluster, now=NOW).accepting
    cluster.spec.drain = None
    cluster.status.conditions = [Condition(type="Ready", status="False", reason="APIServerDown")]
    assert not summary_of(cluster, now=NOW).accepting


def test_a_queue_restriction_becomes_the_dispatchers_choice() -> None:
    summary = summary_of(reported(), now=NOW)
    assert choice_of(ClusterAffinity(selector="region=eu")).allows(summary)
    assert not choice_of(ClusterAffinity(selector="region=us")).allows(summary)
    assert not choice_of(ClusterAffinity(allowed=["w2"])).allows(summary)
    assert choice_of(None).allows(summary)
    assert choice_of(ClusterAffinity(preferred=["w1"])).preferred == frozenset({"w1"})
