"""`GET /metrics` of `gpufleet up`: the control plane's metrics, to the admin token only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpufleet.observability import metrics
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.metrics import add_metrics_route
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
