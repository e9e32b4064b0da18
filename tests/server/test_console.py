"""The web console's page and data: what each GPU shows on the map, and what each token may see."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from gpufleet.api.reasons import pending_lines
from gpufleet.cli.up import _banner
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.console import add_console
from gpufleet.server.console.view import fleet_map, gpu_cells, job_cost_rows, queue_rows
from gpufleet.store import SqliteStore
from gpufleet.store.console import StoreSource

from .helpers import job, job_path, queue


@pytest.fixture
def console(store: SqliteStore, tokens: TokenRegistry) -> Iterator[TestClient]:
    app = create_app(store, tokens)
    add_console(app, StoreSource(store), tokens)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {tokens.admin_token}"
        yield test_client


def _node(name: str, *, phase: str = "Ready", unhealthy: tuple[int, ...] = (), **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"rack": "r1"}},
        "spec": {"gpus": 4, "pool": "p", **spec},
        "status": {"phase": phase, "unhealthyGpus": [{"index": i, "xid": 79} for i in unhealthy]},
    }


def _pod(node: str, gpus: list[int], *, milli: int = 1000, workload: str = "w") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": f"{workload}-{node}", "namespace": "team-a"},
        "spec": {"nodeName": node, "gpus": gpus, "gpuMilli": milli, "workload": workload},
        "status": {"phase": "Running"},
    }


def test_each_gpu_shows_failed_shared_allocated_or_idle_and_who_holds_it() -> None:
    node = _node("n1", unhealthy=(3,))
    cells = gpu_cells(node, [_pod("n1", [0], workload="big"), _pod("n1", [1], milli=500, workload="small")])
    assert [c["state"] for c in cells] == ["allocated", "shared", "idle", "failed"]
    assert cells[0]["holders"] == ["big"]
    assert cells[3]["problem"] == "XID 79"


def test_a_node_not_ready_has_only_failed_gpus_and_a_mig_node_only_mig_ones() -> None:
    assert {c["state"] for c in gpu_cells(_node("n1", phase="NotReady"), [])} == {"failed"}
    mig = _node("n2", sharing={"mig": {"*": ["3g.40gb"]}})
    assert {c["state"] for c in gpu_cells(mig, [])} == {"mig"}


def test_the_map_groups_nodes_by_pool_and_rack_and_finished_pods_hold_nothing() -> None:
    done = {**_pod("n1", [0]), "status": {"phase": "Succeeded"}}
    pools = [{"kind": "GPUPool", "metadata": {"name": "p"}, "spec": {"gpuModel": "H100-80GB"}}]
    [pool] = fleet_map(pools, [_node("n1")], [done])
    assert pool["name"] == "p" and pool["gpuModel"] == "H100-80GB"
    assert [rack["name"] for rack in pool["racks"]] == ["r1"]
    assert {c["state"] for c in pool["racks"][0]["nodes"][0]["gpus"]} == {"idle"}


def test_a_queues_dominant_share_is_its_fullest_flavor_over_its_weight() -> None:
    q = {
        "metadata": {"name": "a"},
        "spec": {"fairShareWeight": 2, "quotas": {"H100-80GB": {"nominal": 8}, "A100-40GB": {"nominal": 4}}},
        "status": {"usage": {"H100-80GB": 2, "A100-40GB": 4}},
    }
    [row] = queue_rows([q])
    assert row["dominantShare"] == 0.5
    assert [f["used"] for f in row["flavors"]] == [2.0, 4.0]


def test_the_page_and_its_files_are_served_beside_the_api(console: TestClient) -> None:
    page = console.get("/", headers={"Authorization": ""})
    assert page.status_code == 200 and "/console/console.js" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name in ("console.js", "console.css"):
        assert console.get(f"/console/{name}").status_code == 200
    # The API's own paths stay where they were.
    assert console.get("/healthz").status_code == 200
    assert console.get("/docs").status_code == 200
    assert console.get("/v1/whoami").json() == {"admin": True, "queue": None}


def test_the_view_needs_a_token(console: TestClient) -> None:
    assert console.get("/v1/console", headers={"Authorization": ""}).status_code == 401


def test_a_queue_token_sees_its_queue_and_work_only_with_describes_reason(
    console: TestClient, tokens: TokenRegistry
) -> None:
    applied = console.post(
        "/v1/apply",
        json=[queue("team-a"), queue("team-b"), job("a-job"), job("b-job", "team-b", queue_name="team-b")],
    )
    assert applied.status_code == 200, applied.text
    reason = {"type": "QuotaExceeded", "message": "needs 16, has 0", "details": {"requested": 16}}
    patched = console.patch(
        job_path("a-job") + "/status",
        json={"status": {"pendingReason": reason}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200, patched.text

    admin = console.get("/v1/console").json()
    assert {q["name"] for q in admin["queues"]} == {"team-a", "team-b"}
    assert admin["map"] == []

    team = TestClient(console.app, raise_server_exceptions=False)
    team.headers["Authorization"] = f"Bearer {tokens.create('team-a')}"
    seen = team.get("/v1/console").json()
    assert seen["who"] == {"admin": False, "queue": "team-a"}
    assert [q["name"] for q in seen["queues"]] == ["team-a"]
    assert [w["name"] for w in seen["work"]] == ["a-job"]
    assert seen["map"] is None
    assert seen["cost"]["pools"] == []
    kind, lines = pending_lines(reason)
    assert seen["work"][0]["pending"] == {"type": kind, "lines": lines}
    assert lines == ["  needs 16, has 0", "  requested: 16"]


def test_nodes_and_racks_are_in_the_order_people_number_them() -> None:
    nodes = [_node(f"n-{i}") for i in (10, 2, 1)]
    [pool] = fleet_map([], nodes, [])
    assert [n["name"] for n in pool["racks"][0]["nodes"]] == ["n-1", "n-2", "n-10"]


def test_the_banner_of_gpufleet_up_prints_the_consoles_url() -> None:
    out = Console(record=True, width=200)
    _banner(out, "http://127.0.0.1:9000", Path("/s"), Path("/s/admin-token"), True, 1.0, True)
    assert any(
        line.split()[:2] == ["console", "http://127.0.0.1:9000/"] for line in out.export_text().splitlines()
    )


def test_each_job_costs_its_gpu_hours_at_its_nodes_price_as_history_counts_them() -> None:
    started = "2026-01-01T00:00:00Z"
    jobs = [
        {
            "kind": "TrainingJob",
            "metadata": {"name": "big", "namespace": "team-a", "creationTimestamp": started},
            "spec": {"queue": "team-a", "replicas": 2, "worker": {"gpus": 4}},
            "status": {"phase": "Running", "startTime": started, "lostGpuSeconds": 7200},
        },
        {
            "kind": "TrainingJob",
            "metadata": {"name": "waiting", "namespace": "team-a", "creationTimestamp": started},
            "spec": {"queue": "team-a", "replicas": 1, "worker": {"gpus": 8}},
            "status": {"phase": "Pending"},
        },
    ]
    pods = [
        {
            "kind": "Pod",
            "metadata": {"name": f"big-0-{i}", "namespace": "team-a"},
            "spec": {"nodeName": "n1", "gpus": [0, 1, 2, 3], "owner": {"kind": "TrainingJob", "name": "big"}},
            "status": {"phase": "Running"},
        }
        for i in range(2)
    ]
    nodes = [_node("n1", pricePerGPUHour=2.5)]
    rows = job_cost_rows(jobs, pods, nodes, [], datetime(2026, 1, 1, 3, tzinfo=UTC))
    assert [(r["name"], r["gpus"], r["pool"]) for r in rows] == [("big", 8.0, "p"), ("waiting", 8.0, None)]
    assert rows[0]["gpuHours"] == pytest.approx(24.0)  # 8 GPUs for 3 hours
    assert rows[0]["cost"] == pytest.approx(60.0)  # at 2.5 per GPU-hour
    assert rows[0]["lostGpuHours"] == pytest.approx(2.0)
    assert rows[1]["gpuHours"] == rows[1]["cost"] == 0.0


def test_a_queue_token_gets_the_cost_of_its_own_jobs_only(console: TestClient, tokens: TokenRegistry) -> None:
    applied = console.post(
        "/v1/apply",
        json=[queue("team-a"), queue("team-b"), job("a-job"), job("b-job", "team-b", queue_name="team-b")],
    )
    assert applied.status_code == 200, applied.text
    assert {r["name"] for r in console.get("/v1/console").json()["cost"]["jobs"]} == {"a-job", "b-job"}
    team = TestClient(console.app, raise_server_exceptions=False)
    team.headers["Authorization"] = f"Bearer {tokens.create('team-a')}"
    assert [r["name"] for r in team.get("/v1/console").json()["cost"]["jobs"]] == ["a-job"]
