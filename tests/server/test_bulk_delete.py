"""Deleting many objects in one request: `POST /v1/delete` and DELETE on a kind's collection, all or none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from gpufleet.api import ObjectMeta, PodRequest, TrainingJob
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import OwnerRef, Workload, WorkloadPodSet, WorkloadSpec
from gpufleet.store import SqliteStore

from .helpers import API, error_of, job, job_path, queue


def ref(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta}


def names(store: SqliteStore) -> set[str]:
    return {q.name for q in store.list(Queue).items}


def _setup(client: TestClient) -> None:
    objects = [queue("org"), queue("team-a", parent="org"), queue("team-b", parent="org"), job("j1")]
    assert client.post("/v1/apply", json=objects).status_code == 200


def test_a_tree_of_queues_is_deleted_in_one_request_in_any_order(
    client: TestClient, store: SqliteStore
) -> None:
    _setup(client)
    head = int(store.resource_version)
    # The parent first: its children go in the same request, so they do not hold it back; so does
    # the job submitted to team-a.
    items = [
        ref("Queue", "org"),
        ref("Queue", "team-a"),
        ref("TrainingJob", "j1", "team-a"),
        ref("Queue", "team-b"),
    ]
    response = client.post("/v1/delete", json={"items": items})
    assert response.status_code == 200, response.json()
    answered = [
        (i["action"], i["object"]["kind"], i["object"]["metadata"]["name"]) for i in response.json()["items"]
    ]
    assert answered == [
        ("deleted", "Queue", "org"),
        ("deleted", "Queue", "team-a"),
        ("deleted", "TrainingJob", "j1"),
        ("deleted", "Queue", "team-b"),
    ]
    assert names(store) == set() and store.list(TrainingJob).items == []
    # One transaction: four consecutive versions.
    assert [e.resource_version for e in store.events_since(head)] == [head + 1, head + 2, head + 3, head + 4]


def test_a_bulk_delete_refused_for_one_queue_deletes_none(client: TestClient, store: SqliteStore) -> None:
    _setup(client)
    head = store.resource_version
    # team-a still has j1 submitted to it, which the request does not delete.
    items = [ref("Queue", "team-b"), ref("Queue", "team-a"), ref("Queue", "org")]
    response = client.post("/v1/delete", json=items)
    assert response.status_code == 409
    error = error_of(response)
    assert error["object"] == "Queue team-a" and "TrainingJob team-a/j1" in error["message"]
    assert names(store) == {"org", "team-a", "team-b"}
    assert store.resource_version == head
    # A parent whose child stays is refused too, naming the child.
    response = client.post("/v1/delete", json=[ref("Queue", "org"), ref("Queue", "team-b")])
    assert response.status_code == 409
    assert error_of(response)["object"] == "Queue org" and "team-a" in error_of(response)["message"]
    assert names(store) == {"org", "team-a", "team-b"}


def test_a_missing_object_fails_the_request_unless_ignored(client: TestClient, store: SqliteStore) -> None:
    _setup(client)
    items = [ref("Queue", "team-b"), ref("Queue", "nope"), ref("Queue", "gone")]
    response = client.post("/v1/delete", json=items)
    assert response.status_code == 404
    error = error_of(response)
    assert error["object"] == "Queue nope" and "1 more" in error["message"]
    assert names(store) == {"org", "team-a", "team-b"}
    response = client.post("/v1/delete", params={"ignoreNotFound": "true"}, json=items)
    assert response.status_code == 200
    assert [i["object"]["metadata"]["name"] for i in response.json()["items"]] == ["team-b"]
    assert names(store) == {"org", "team-a"}


def test_a_stale_resource_version_deletes_none(client: TestClient, store: SqliteStore) -> None:
    _setup(client)
    stale = ref("Queue", "team-b")
    stale["metadata"]["resourceVersion"] = "1"
    response = client.post("/v1/delete", json=[ref("TrainingJob", "j1", "team-a"), stale])
    assert response.status_code == 409
    assert names(store) == {"org", "team-a", "team-b"} and len(store.list(TrainingJob).items) == 1


def test_the_body_may_be_the_yaml_that_was_applied(client: TestClient, store: SqliteStore) -> None:
    text = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: org}\nspec: {}\n---\n"
        "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec: {parent: org}\n"
    )
    headers = {"Content-Type": "application/yaml"}
    assert client.post("/v1/apply", content=text, headers=headers).status_code == 200
    response = client.post("/v1/delete", content=text, headers=headers)
    assert response.status_code == 200, response.json()
    assert names(store) == set()


def test_bad_references_are_refused_naming_the_document(client: TestClient) -> None:
    cases = [
        ([ref("Queue", "a"), {"kind": "Queue"}], "metadata"),
        ([ref("Queue", "a"), {"metadata": {"name": "x"}}], "kind"),
        ([ref("Queue", "a"), {"kind": "Queue", "metadata": {"name": 3}}], "metadata.name"),
        ([{"apiVersion": "v1", "kind": "Queue", "metadata": {"name": "a"}}], "apiVersion"),
    ]
    for items, field in cases:
        response = client.post("/v1/delete", json=items)
        assert response.status_code == 422, (items, response.json())
        assert error_of(response)["field"] == field
    assert client.post("/v1/delete", json=[ref("Scenario", "s")]).status_code == 422
    assert client.post("/v1/delete", json=[ref("Nope", "s")]).status_code == 422


def test_a_workload_goes_with_the_job_that_owns_it(client: TestClient, store: SqliteStore) -> None:
    """The controllers delete a job's Workload after the job: deleting the job with its queue is
    enough, though the Workload is still there when the request is checked."""
    _setup(client)
    spec = WorkloadSpec(
        owner=OwnerRef(kind="TrainingJob", name="j1"),
        queue="team-a",
        pod_sets=[WorkloadPodSet(count=2, request=PodRequest(gpus=8))],
    )
    store.create(Workload(metadata=ObjectMeta(name="j1", namespace="team-a"), spec=spec))
    response = client.post("/v1/delete", json=[ref("Queue", "team-a")])
    assert response.status_code == 409
    response = client.post("/v1/delete", json=[ref("Queue", "team-a"), ref("TrainingJob", "j1", "team-a")])
    assert response.status_code == 200, response.json()
    assert names(store) == {"org", "team-b"}


def test_the_same_object_twice_is_refused(client: TestClient, store: SqliteStore) -> None:
    _setup(client)
    response = client.post("/v1/delete", json=[ref("Queue", "team-b"), ref("Queue", "team-b")])
    assert response.status_code == 422
    assert "twice" in error_of(response)["message"]
    assert names(store) == {"org", "team-a", "team-b"}


def test_objects_held_by_finalizers_are_answered_as_deleting(client: TestClient, store: SqliteStore) -> None:
    held = TrainingJob.model_validate(job("held"))
    held.metadata = ObjectMeta(name="held", namespace="team-a", finalizers=["gpufleet.io/keep"])
    store.create(held)
    response = client.post("/v1/delete", json=[ref("TrainingJob", "held", "team-a")])
    assert response.status_code == 200
    [item] = response.json()["items"]
    assert item["action"] == "deleting" and item["object"]["metadata"]["deletionTimestamp"]


def test_delete_collection_by_label_selector(client: TestClient, store: SqliteStore) -> None:
    objects = [queue("org")] + [
        {
            **queue(f"q{i}", parent="org"),
            "metadata": {"name": f"q{i}", "labels": {"tier": "a" if i < 3 else "b"}},
        }
        for i in range(5)
    ]
    assert client.post("/v1/apply", json=objects).status_code == 200
    response = client.delete(f"{API}/queues", params={"labelSelector": "tier=a"})
    assert response.status_code == 200, response.json()
    assert sorted(i["object"]["metadata"]["name"] for i in response.json()["items"]) == ["q0", "q1", "q2"]
    assert names(store) == {"org", "q3", "q4"}
    # Without a selector: every queue, the root with its children, or none.
    assert client.post("/v1/apply", json=[job("j1", queue_name="q3")]).status_code == 200
    response = client.delete(f"{API}/queues")
    assert response.status_code == 409
    assert names(store) == {"org", "q3", "q4"}


def test_delete_collection_in_a_namespace_and_in_all(client: TestClient, store: SqliteStore) -> None:
    jobs = [job("a1", "team-a"), job("a2", "team-a"), job("b1", "team-b")]
    assert client.post("/v1/apply", json=jobs).status_code == 200
    response = client.delete(job_path(namespace="team-a"))
    assert response.status_code == 200
    assert sorted(j.name for j in store.list(TrainingJob).items) == ["b1"]
    assert client.delete(f"{API}/trainingjobs").status_code == 200
    assert store.list(TrainingJob).items == []


def test_a_queue_token_deletes_only_its_own_work(
    client: TestClient, store: SqliteStore, team_client: Callable[[str], TestClient]
) -> None:
    objects = [queue("team-a"), queue("team-b"), job("a1"), job("b1", queue_name="team-b")]
    assert client.post("/v1/apply", json=objects).status_code == 200
    team = team_client("team-a")
    # Another queue's job reads as missing, and fails the whole request.
    response = team.post(
        "/v1/delete", json=[ref("TrainingJob", "a1", "team-a"), ref("TrainingJob", "b1", "team-a")]
    )
    assert response.status_code == 404
    assert len(store.list(TrainingJob).items) == 2
    assert team.post("/v1/delete", json=[ref("Queue", "team-a")]).status_code == 403
    # Its collection delete sees only its own jobs.
    response = team.delete(f"{API}/trainingjobs")
    assert response.status_code == 200
    assert [j.name for j in store.list(TrainingJob).items] == ["b1"]
