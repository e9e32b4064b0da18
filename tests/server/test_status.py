"""Status writes through `.../status`: the admin (and through it external controllers) only, validated,
with Kubernetes' optimistic concurrency; queue tokens never."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.store import SqliteStore

from .helpers import API, error_of, job, job_path, queue

MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
def llm(client: TestClient) -> dict[str, Any]:
    created = client.post(job_path(), json=job("llm"))
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def test_put_replaces_the_status_and_ignores_the_spec(client: TestClient, llm: dict[str, Any]) -> None:
    sent = {**llm, "spec": {**llm["spec"], "replicas": 7}, "status": {"phase": "Running", "replicas": 2}}
    response = client.put(job_path("llm") + "/status", json=sent)
    assert response.status_code == 200, response.text
    assert response.json()["status"]["phase"] == "Running" and "spec" not in response.json()
    stored = client.get(job_path("llm")).json()
    assert stored["status"]["phase"] == "Running" and stored["status"]["replicas"] == 2
    assert stored["spec"]["replicas"] == 2 and stored["metadata"]["generation"] == 1
    assert int(stored["metadata"]["resourceVersion"]) > int(llm["metadata"]["resourceVersion"])


def test_patch_merges_into_the_status(client: TestClient, llm: dict[str, Any]) -> None:
    path = job_path("llm") + "/status"
    first = client.patch(path, json={"status": {"phase": "Running", "restarts": 1}}, headers=MERGE)
    assert first.status_code == 200, first.text
    second = client.patch(path, json={"status": {"restarts": 2, "phase": None}}, headers=MERGE)
    assert second.status_code == 200, second.text
    status = client.get(job_path("llm")).json()["status"]
    assert status["restarts"] == 2
    assert status["phase"] == "Pending"  # null removed it: the model's default again


def test_status_writes_are_validated_and_name_the_field(client: TestClient, llm: dict[str, Any]) -> None:
    path = job_path("llm") + "/status"
    for body, field in (
        ({"status": {"phase": "Exploded"}}, "status.phase"),
        ({"status": {"restarts": -1}}, "status.restarts"),
        ({"status": {"noSuchField": 1}}, "status.noSuchField"),
        ({"status": "Running"}, "status"),
        ({"status": {}, "spec": {"replicas": 9}}, "spec"),
        ({"status": {}, "metadata": {"name": "other"}}, "metadata.name"),
        ({"status": {}, "metadata": {"namespace": "team-b"}}, "metadata.namespace"),
        ({"status": {}, "metadata": {"resourceVersion": "x"}}, "resourceVersion"),
    ):
        response = client.patch(path, json=body, headers=MERGE)
        assert response.status_code == 422, (body, response.text)
        assert field in (error_of(response)["field"] or ""), (body, response.json())
    assert (
        client.get(job_path("llm")).json()["metadata"]["resourceVersion"]
        == llm["metadata"]["resourceVersion"]
    )
    wrong_kind = {**queue("q"), "status": {}}
    assert client.put(path, json=wrong_kind).status_code == 422
    json_patch = client.patch(
        path, json=[{"op": "add"}], headers={"Content-Type": "application/json-patch+json"}
    )
    assert json_patch.status_code == 400 and "merge patch" in error_of(json_patch)["message"]


def test_a_stale_resource_version_is_a_conflict(client: TestClient, llm: dict[str, Any]) -> None:
    path = job_path("llm") + "/status"
    version = llm["metadata"]["resourceVersion"]
    assert client.put(job_path("llm"), json=job("llm", replicas=4)).status_code == 200  # moves it on
    stale = client.patch(
        path, json={"metadata": {"resourceVersion": version}, "status": {"phase": "Running"}}, headers=MERGE
    )
    assert stale.status_code == 409 and error_of(stale)["field"] == "metadata.resourceVersion"
    current = client.get(job_path("llm")).json()["metadata"]["resourceVersion"]
    fresh = client.patch(
        path, json={"metadata": {"resourceVersion": current}, "status": {"phase": "Running"}}, headers=MERGE
    )
    assert fresh.status_code == 200


def test_a_patch_without_a_version_applies_to_the_latest_status(
    client: TestClient, store: SqliteStore, llm: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller's write between the read and the write: the patch is merged again, not lost."""
    real = store.update_status
    raced: list[int] = []

    def controller_writes_first(obj):  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(1)
            current = store.get("TrainingJob", "llm", "team-a")
            current.status.restarts = 3  # type: ignore[attr-defined]
            real(current)
        return real(obj)

    monkeypatch.setattr(store, "update_status", controller_writes_first)
    response = client.patch(job_path("llm") + "/status", json={"status": {"phase": "Running"}}, headers=MERGE)
    assert response.status_code == 200, response.text
    status = store.get("TrainingJob", "llm", "team-a").status  # type: ignore[attr-defined]
    assert status.phase == "Running" and status.restarts == 3


def test_status_of_a_missing_object_is_not_found(client: TestClient) -> None:
    response = client.patch(job_path("nope") + "/status", json={"status": {}}, headers=MERGE)
    assert response.status_code == 404


def test_cluster_wide_status(client: TestClient) -> None:
    assert client.post(f"{API}/queues", json=queue("q")).status_code == 201
    response = client.patch(
        f"{API}/queues/q/status", json={"status": {"observedGeneration": 1}}, headers=MERGE
    )
    assert response.status_code == 200, response.text
    assert client.get(f"{API}/queues/q").json()["status"]["observedGeneration"] == 1


def test_queue_tokens_never_write_status(
    client: TestClient, team_client: Callable[[str], TestClient], llm: dict[str, Any]
) -> None:
    team_a = team_client("team-a")  # llm is in queue team-a: its own job, still refused
    path = job_path("llm") + "/status"
    for response in (
        team_a.patch(path, json={"status": {"phase": "Succeeded"}}, headers=MERGE),
        team_a.put(path, json={**llm, "status": {"phase": "Succeeded"}}),
        team_a.patch(job_path("other") + "/status", json={"status": {}}, headers=MERGE),  # no such job
    ):
        assert response.status_code == 403, response.text
        assert error_of(response)["type"] == "ForbiddenError"
    assert client.get(job_path("llm")).json()["status"]["phase"] == "Pending"
    assert team_a.get(path).status_code == 200  # reading it stays allowed
