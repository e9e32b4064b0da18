"""A queue's token sees and changes only its own queue's objects."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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


def event(name: str, kind: str, about: str, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "involvedKind": kind,
            "involvedName": about,
            "reason": "Tested",
            "message": f"about {about}",
            "time": "2026-01-01T00:00:00Z",
        },
    }


@pytest.fixture
def events(client: TestClient, fleet: None) -> None:
    response = client.post(
        "/v1/apply",
        json=[
            event("ev-a-job", "TrainingJob", "a-job"),
            event("ev-b-job", "TrainingJob", "b-job", "team-b"),
            event("ev-b-in-a", "TrainingJob", "b-in-a-namespace"),
            event("ev-queue-a", "Queue", "team-a", "default"),
            event("ev-queue-b", "Queue", "team-b", "default"),
            event("ev-pool", "GPUPool", "h100", "default"),
            event("ev-gone", "TrainingJob", "deleted-job"),
            event("ev-unknown-kind", "Nonsense", "a-job"),
            # Names a job of team-a, but in the wrong namespace: that is not the object it is about.
            event("ev-a-job-elsewhere", "TrainingJob", "a-job", "team-b"),
        ],
    )
    assert response.status_code == 200, response.text


def event_names(response: Any) -> set[str]:
    assert response.status_code == 200, response.text
    return {item["metadata"]["name"] for item in response.json()["items"]}


@pytest.mark.usefixtures("events")
def test_a_queue_token_reads_the_events_of_its_own_objects_only(
    client: TestClient, team_client: Callable[[str], TestClient]
) -> None:
    team_a, team_b = team_client("team-a"), team_client("team-b")
    assert event_names(team_a.get(f"{API}/events")) == {"ev-a-job", "ev-queue-a"}
    assert event_names(team_b.get(f"{API}/events")) == {"ev-b-job", "ev-b-in-a", "ev-queue-b"}
    assert event_names(team_a.get(f"{API}/namespaces/team-a/events")) == {"ev-a-job"}
    assert event_names(team_b.get(f"{API}/namespaces/team-a/events")) == {"ev-b-in-a"}
    assert len(event_names(client.get(f"{API}/events"))) == 9  # the admin sees every one

    assert team_a.get(f"{API}/namespaces/team-a/events/ev-a-job").status_code == 200
    for name, namespace in (("ev-b-in-a", "team-a"), ("ev-b-job", "team-b"), ("ev-pool", "default")):
        response = team_a.get(f"{API}/namespaces/{namespace}/events/{name}")
        assert response.status_code == 404, name  # as if it did not exist
        error_of(response)
    assert team_b.get(f"{API}/namespaces/team-a/events/ev-a-job").status_code == 404


@pytest.mark.usefixtures("events")
def test_a_queue_token_cannot_write_events(team_client: Callable[[str], TestClient]) -> None:
    team_a = team_client("team-a")
    response = team_a.post(f"{API}/namespaces/team-a/events", json=event("forged", "TrainingJob", "a-job"))
    assert response.status_code == 403
    assert team_a.delete(f"{API}/namespaces/team-a/events/ev-a-job").status_code == 403


@pytest.mark.usefixtures("events")
def test_events_in_changes_and_watches_are_filtered_the_same_way(
    client: TestClient, team_client: Callable[[str], TestClient]
) -> None:
    team_a = team_client("team-a")
    changes = team_a.get("/v1/changes", params={"kind": "Event", "resourceVersion": "0"})
    assert {c["object"]["metadata"]["name"] for c in changes.json()["items"]} == {"ev-a-job", "ev-queue-a"}
    watched = team_a.get(
        f"{API}/events", params={"watch": "1", "resourceVersion": "0", "timeoutSeconds": 0.1}
    )
    added = [json.loads(line) for line in watched.text.splitlines() if '"ADDED"' in line]
    assert {e["object"]["metadata"]["name"] for e in added} == {"ev-a-job", "ev-queue-a"}
    # Once its job is gone, nothing tells whose an Event was: a queue token no longer sees it.
    assert client.delete(job_path("a-job")).status_code == 200
    assert event_names(team_a.get(f"{API}/events")) == {"ev-queue-a"}
