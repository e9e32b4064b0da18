"""A queue's token sees and changes only its own queue's objects."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from .helpers import API, error_of, job, job_path, queue


@pytest.fixture
def fleet(client: TestClient) -> None:
    response = client.post(
        "/v1/apply",
        json=[
            queue("team-a"),
            queue("team-b"),
            job("a-job", "team-a", queue_name="team-a"),
            job("b-job", "team-b", queue_name="team-b"),
            job("b-in-a-namespace", "team-a", queue_name="team-b"),
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "GPUPool",
                "metadata": {"name": "h100"},
                "spec": {"gpuModel": "H100-80GB", "gpusPerNode": 8},
            },
        ],
    )
    assert response.status_code == 200, response.text


@pytest.mark.usefixtures("fleet")
def test_a_queue_token_lists_only_its_queue(team_client: Callable[[str], TestClient]) -> None:
    team_a = team_client("team-a")
    names = [j["metadata"]["name"] for j in team_a.get(f"{API}/trainingjobs").json()["items"]]
    assert names == ["a-job"]
    assert [q["metadata"]["name"] for q in team_a.get(f"{API}/queues").json()["items"]] == ["team-a"]
    assert team_a.get("/v1/whoami").json() == {"admin": False, "queue": "team-a"}


@pytest.mark.usefixtures("fleet")
def test_a_queue_token_cannot_read_another_queues_objects(team_client: Callable[[str], TestClient]) -> None:
    team_a = team_client("team-a")
    for path in (job_path("b-job", "team-b"), job_path("b-in-a-namespace"), f"{API}/queues/team-b"):
        response = team_a.get(path)
        assert response.status_code == 404, path  # as if it did not exist: names do not leak
        error_of(response)
    assert team_a.get(job_path("a-job")).status_code == 200
    assert team_a.get(f"{API}/queues/team-a").status_code == 200
    assert team_a.get(f"{API}/gpupools").status_code == 403
    assert team_a.get(f"{API}/gpupools/h100").status_code == 403


@pytest.mark.usefixtures("fleet")
def test_a_queue_token_cannot_write_another_queues_objects(
    client: TestClient, team_client: Callable[[str], TestClient]
) -> None:
    team_a = team_client("team-a")
    response = team_a.post(job_path(namespace="team-a"), json=job("sneaky", queue_name="team-b"))
    assert response.status_code == 403 and error_of(response)["field"] == "spec.queue"
    # Moving another queue's job into one's own queue is a change of that job: refused.
    response = team_a.put(job_path("b-in-a-namespace"), json=job("b-in-a-namespace", queue_name="team-a"))
    assert response.status_code == 403
    assert team_a.delete(job_path("b-job", "team-b")).status_code == 404
    assert team_a.put(f"{API}/queues/team-a", json=queue("team-a", fairShareWeight=100)).status_code == 403
    apply = team_a.post("/v1/apply", json=[job("mine"), job("theirs", queue_name="team-b")])
    assert apply.status_code == 403
    assert client.get(job_path("mine")).status_code == 404  # nothing of the refused apply was stored
    assert client.get(job_path("b-job", "team-b")).json()["spec"]["queue"] == "team-b"


@pytest.mark.usefixtures("fleet")
def test_a_queue_token_submits_reads_and_deletes_in_its_queue(
    team_client: Callable[[str], TestClient],
) -> None:
    team_a = team_client("team-a")
    assert team_a.post(job_path(), json=job("new")).status_code == 201
    assert team_a.put(job_path("new"), json=job("new", replicas=4)).status_code == 200
    assert team_a.get(job_path("new")).json()["spec"]["replicas"] == 4
    assert team_a.delete(job_path("new")).status_code == 200


@pytest.mark.usefixtures("fleet")
def test_watch_and_changes_filter_other_queues(
    client: TestClient, team_client: Callable[[str], TestClient]
) -> None:
    team_a = team_client("team-a")
    watched = team_a.get(
        f"{API}/trainingjobs", params={"watch": "1", "resourceVersion": "0", "timeoutSeconds": 0.1}
    )
    names = [line for line in watched.text.splitlines() if '"ADDED"' in line]
    assert len(names) == 1 and "a-job" in names[0]
    changes = team_a.get("/v1/changes", params={"resourceVersion": "0"}).json()["items"]
    assert {c["object"]["metadata"]["name"] for c in changes} == {"team-a", "a-job"}
    assert team_a.get("/v1/changes", params={"kind": "GPUPool"}).status_code == 403
