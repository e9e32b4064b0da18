"""The Cluster objects' writers on a real store: a worker's report lands in its Cluster's status, the
manager's pass sets conditions and writes only what changed, and a manager view read back from the
store dispatches on what the workers reported."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from gpufleet.api import Cluster, load_objects
from gpufleet.federation.controller import ClusterConditions, report
from gpufleet.federation.dispatch import Dispatched
from gpufleet.federation.manager import manager_view
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.workload import PodSet, Workload
from gpufleet.store.protocol import Store
from gpufleet.store.sqlite import SqliteStore

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def cluster_yaml(name: str, price: float) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {{name: {name}}}
spec:
  connection: {{kubeconfigSecretRef: {{name: {name}, key: kubeconfig}}}}
  pricePerGPUHour: {{H100-80GB: {price}}}
  leaseSeconds: 30
"""


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    manager = SqliteStore.open(tmp_path, synchronous="OFF")
    for name, price in (("w1", 1.0), ("w2", 2.0)):
        manager.apply(load_objects(cluster_yaml(name, price))[0])
    return manager


def worker(hosts: int) -> FleetState:
    state = FleetState()
    for i in range(hosts):
        state.add_node(NodeSpec(f"h{i}", gpu_model="H100-80GB", gpus=8))
    return state


def test_reports_conditions_and_dispatch_through_the_store(store: SqliteStore) -> None:
    conditions = ClusterConditions(store)
    assert sorted(conditions.reconcile(now=NOW)) == ["w1", "w2"], "never reported: LeaseExpired"
    assert store.get(Cluster, "w1").status.conditions[0].type == "Ready"
    report(store, "w1", worker(1), now=NOW)
    report(store, "w2", worker(4), now=NOW)
    assert sorted(conditions.reconcile(now=NOW + timedelta(seconds=1))) == ["w1", "w2"], "now Ready"
    assert conditions.reconcile(now=NOW + timedelta(seconds=2)) == [], "nothing changed, nothing written"
    w1 = store.get(Cluster, "w1")
    assert w1.status.capacity["H100-80GB"].free_gpus == 8
    ready = {c.type: c.status for c in w1.status.conditions}
    assert ready == {"Ready": "True", "LeaseExpired": "False", "Draining": "False"}
    report(store, "w1", worker(1), now=NOW + timedelta(seconds=3))
    assert {c.type for c in store.get(Cluster, "w1").status.conditions} == set(ready), "a report keeps them"

    view = manager_view(store.list(Cluster), [], now=NOW + timedelta(seconds=4))
    gang = Workload("g", (PodSet("worker", 2, PodRequest(gpus=8)),))
    (decision,) = view.dispatch([gang])
    assert isinstance(decision, Dispatched) and decision.cluster == "w2", "w1 is cheaper but too small"

    later = NOW + timedelta(seconds=40)  # w2 went silent, w1 still reports
    report(store, "w1", worker(1), now=later)
    assert conditions.reconcile(now=later) == ["w2"]
    lease = {c.type: c for c in store.get(Cluster, "w2").status.conditions}["LeaseExpired"]
    assert lease.status == "True" and lease.reason == "NoHeartbeat"


class Racing:
    """The store, with a worker's report slipped in before the manager's first status write."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner
        self.raced = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def update_status(self, obj: Cluster) -> Cluster:
        if not self.raced:
            self.raced = True
            report(self.inner, obj.name, worker(2), now=NOW)
        return self.inner.update_status(obj)


def test_a_write_that_loses_the_race_is_redone_on_the_fresh_object(store: SqliteStore) -> None:
    racing = Racing(store)
    changed = ClusterConditions(cast(Store, racing)).reconcile(now=NOW + timedelta(seconds=1))
    assert racing.raced and sorted(changed) == ["w1", "w2"]
    w1 = store.get(Cluster, "w1")
    assert w1.status.capacity["H100-80GB"].free_gpus == 16, "the worker's report is kept"
    assert {c.type: c.status for c in w1.status.conditions}["Ready"] == "True", "and judged fresh"
