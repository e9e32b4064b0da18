"""What a queue token can send that once reached a 500: each is a 422 naming the object and the field."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

JOBS = "/apis/gpufleet.io/v1alpha1/namespaces/team-a/trainingjobs"


@pytest.fixture
def team(client: TestClient, team_client: Callable[[str], TestClient]) -> TestClient:
    queue = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "team-a"},
        "spec": {"quotas": {"H100-80GB": {"nominal": 8}}},
    }
    assert client.post("/apis/gpufleet.io/v1alpha1/queues", json=queue).status_code == 201
    return team_client("team-a")


@pytest.mark.parametrize(
    ("name", "cpu", "memory", "field", "says"),
    [
        ("\ud800", "1", "1Gi", "metadata.name", "is not a valid name"),
        ("team-a\n", "1", "1Gi", "metadata.name", "is not a valid name"),
        ("big-cpu", "1e5000", "1Gi", "spec.worker.cpu", "larger than the largest quantity allowed"),
        ("slow-cpu", "1e999990", "1Gi", "spec.worker.cpu", "larger than the largest quantity allowed"),
        ("huge-memory", "1", "9e999999Ei", "spec.worker.memory", "larger than the largest quantity allowed"),
    ],
)
def test_a_bad_job_is_refused_with_its_field(
    team: TestClient, name: str, cpu: str, memory: str, field: str, says: str
) -> None:
    job = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"queue": "team-a", "replicas": 1, "worker": {"gpus": 1, "cpu": cpu, "memory": memory}},
    }
    answer = team.post(JOBS, content=json.dumps(job), headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and says in error["message"]
    assert team.get(JOBS).json()["items"] == []  # nothing stored
