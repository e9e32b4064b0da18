"""A cluster's TrainingJobs on the console (`gpufleet kube console`): why one waits, in the words
`describe` prints, and what one costs, by the rule `gpufleet history` counts it with."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.reasons import pending_lines
from gpufleet.kube.console import KubeConsoleSource
from gpufleet.kube.console_events import KubeEvents
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.console.standalone import console_app

from . import test_operator
from .fakeapi import FakeApiServer
from .test_operator import NOW, job_status, make_job, pods, set_phase, sync
from .test_scheduler import run

HOUR = 3600.0
world = test_operator.world  # four nodes of rack r1, queue team-a, the operator and the scheduler


def _client(api: FakeApiServer, tmp_path: Path, now: float) -> TestClient:
    tokens = TokenRegistry(tmp_path)
    app = console_app(
        KubeConsoleSource(api), tokens, KubeEvents(api), now=lambda: datetime.fromtimestamp(now, UTC)
    )
    client = TestClient(app)
    client.headers["Authorization"] = f"Bearer {tokens.admin_token}"
    return client


def _pool(api: FakeApiServer) -> None:
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": {"name": "r1-pool"},
        "spec": {"gpuModel": "H100-80GB", "gpusPerNode": 8, "pricePerGPUHour": 2.0,
                 "nodeSelector": {"gpufleet.io/rack": "r1"}},
    }  # fmt: skip
    api.put("/apis/gpufleet.io/v1alpha1/gpupools", body)


def test_a_waiting_job_shows_the_scheduler_s_reason_as_describe_does(
    api: FakeApiServer, world, tmp_path: Path
) -> None:
    op, sched, _ = world
    make_job(api, replicas=5)  # 40 GPUs in a rack of 32
    sync(op)
    run(sched)
    reason = job_status(api)["pendingReason"]
    work = _client(api, tmp_path, NOW).get("/v1/console").json()["work"]
    (row,) = [w for w in work if w["kind"] == "TrainingJob"]
    assert (row["namespace"], row["name"], row["queue"], row["phase"]) == (
        "team-a",
        "llm",
        "team-a",
        "Pending",
    )
    kind, lines = pending_lines(reason)
    assert row["pending"] == {"type": kind, "lines": lines} and kind == "NoFit"
    assert not [w for w in work if w["kind"] == "Pod"]  # its workers are the job's, not loose work


def test_a_running_job_costs_its_gpu_hours_at_its_nodes_pool_price(
    api: FakeApiServer, world, tmp_path: Path
) -> None:
    op, sched, _ = world
    _pool(api)
    make_job(api)
    sync(op)
    run(sched)
    for name in pods(api):
        set_phase(api, name, "Running", startTime="2030-03-17T17:46:40Z")
    sync(op)
    assert job_status(api)["phase"] == "Running"
    view = _client(api, tmp_path, NOW + HOUR).get("/v1/console").json()
    (job,) = view["cost"]["jobs"]
    assert (job["name"], job["pool"], job["gpus"], job["state"]) == ("llm", "r1-pool", 16.0, "Running")
    assert round(job["gpuHours"], 3) == 16.0 and round(job["cost"], 3) == 32.0
    (pool,) = view["cost"]["pools"]
    assert (pool["gpus"], pool["allocatedGpus"], pool["costPerHour"]) == (32, 16.0, 32.0)
    holders = {
        gpu["holders"][0]
        for pool_ in view["map"]
        for rack in pool_["racks"]
        for node in rack["nodes"]
        for gpu in node["gpus"]
        if gpu["holders"]
    }
    assert holders == {"llm"}


def test_a_job_its_model_refuses_is_left_out_and_the_rest_is_shown(
    api: FakeApiServer, world, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_job(api)
    bad = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "bad", "namespace": "team-a"},
           "spec": {"queue": "team-a", "replicas": 1, "minReplicas": 4, "worker": {"gpus": 8}}}  # fmt: skip
    api.put("/apis/gpufleet.io/v1alpha1/namespaces/team-a/trainingjobs", bad)  # kubectl takes it
    answer = _client(api, tmp_path, NOW).get("/v1/console")
    assert answer.status_code == 200
    assert [w["name"] for w in answer.json()["work"]] == ["llm"]
    assert "TrainingJob team-a/bad left out" in caplog.text and "spec.minReplicas" in caplog.text
