"""`GET /metrics` of `gpufleet up`: the control plane's metrics, to the admin token only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.meta import Condition, ObjectMeta
from gpufleet.api.runtime import Node, NodeSpec, NodeStatus
from gpufleet.observability import metrics
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.metrics import add_metrics_route
from gpufleet.server.nodestate import NodeStateCollector
from gpufleet.store import SqliteStore


@pytest.fixture
def app_client(store: SqliteStore, tokens: TokenRegistry) -> Iterator[TestClient]:
    app = create_app(store, tokens)
    add_metrics_route(app, tokens)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_the_admin_token_reads_the_control_planes_metrics(
    app_client: TestClient, tokens: TokenRegistry
) -> None:
    metrics.ADMISSIONS.labels("route-test", "H100-80GB").inc()
    answer = app_client.get("/metrics", headers={"Authorization": f"Bearer {tokens.admin_token}"})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert 'gpufleet_admissions_total{flavor="H100-80GB",queue="route-test"}' in answer.text
    assert "# TYPE gpufleet_scheduling_cycle_duration_seconds histogram" in answer.text


def test_no_token_or_a_queues_token_reads_nothing(app_client: TestClient, tokens: TokenRegistry) -> None:
    assert app_client.get("/metrics").status_code == 401
    answer = app_client.get("/metrics", headers={"Authorization": f"Bearer {tokens.create('team-a')}"})
    assert answer.status_code == 403
    assert answer.json()["error"]["status"] == 403


def test_gpufleet_ups_nodes_have_kube_state_metrics_node_series(
    store: SqliteStore, tokens: TokenRegistry
) -> None:
    """The node alert reads kube-state-metrics' series; the embedded world exports them for its nodes."""
    lost = Condition(type="Ready", status="False", reason="NodeLost")
    store.create(
        Node(metadata=ObjectMeta(name="n1"), spec=NodeSpec(gpus=8, cpu_milli=96000, memory_mib=1024))
    )
    node = store.create(Node(metadata=ObjectMeta(name="n2"), spec=NodeSpec(gpus=4)))
    store.update_status(node.model_copy(update={"status": NodeStatus(phase="Lost", conditions=[lost])}))
    app = create_app(store, tokens)
    add_metrics_route(app, tokens, [NodeStateCollector(store)])
    with TestClient(app) as client:
        text = client.get("/metrics", headers={"Authorization": f"Bearer {tokens.admin_token}"}).text
    assert 'kube_node_status_capacity{node="n1",resource="nvidia_com_gpu",unit="integer"} 8.0' in text
    assert 'kube_node_status_capacity{node="n1",resource="cpu",unit="core"} 96.0' in text
    assert 'kube_node_status_capacity{node="n1",resource="memory",unit="byte"} 1.073741824e+09' in text
    assert 'kube_node_status_condition{condition="Ready",node="n2",status="false"} 1.0' in text
    assert 'kube_node_status_condition{condition="Ready",node="n2",status="true"} 0.0' in text
    # A node with no condition yet (provisioning) has none; the control plane's series are there too.
    assert 'node="n1",status=' not in text
    assert "# TYPE gpufleet_scheduling_cycle_duration_seconds histogram" in text
    store.delete(Node, "n2")
    with TestClient(app) as client:
        text = client.get("/metrics", headers={"Authorization": f"Bearer {tokens.admin_token}"}).text
    assert 'node="n2"' not in text
