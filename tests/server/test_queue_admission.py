"""The API refuses queues that could not be part of the quota tree, and deleting a queue still in use."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.api.queue import Queue
from gpufleet.store import SqliteStore

from .helpers import API, error_of, job, queue


def test_a_queue_with_an_unknown_parent_is_refused(client: TestClient, store: SqliteStore) -> None:
    response = client.post(f"{API}/queues", json=queue("qbad", parent="nonexistent"))
    assert response.status_code == 422
    error = error_of(response)
    assert error["field"] == "spec.parent"
    assert "nonexistent" in error["message"]
    assert store.list(Queue).items == []


def test_put_and_apply_refuse_an_unknown_parent(client: TestClient) -> None:
    assert client.put(f"{API}/queues/qbad", json=queue("qbad", parent="nope")).status_code == 422
    response = client.post("/v1/apply", json=[queue("qbad", parent="nope")])
    assert response.status_code == 422
    assert error_of(response)["field"] == "spec.parent"


def test_one_apply_may_name_a_parent_that_comes_later(client: TestClient, store: SqliteStore) -> None:
    response = client.post("/v1/apply", json=[queue("team-a", parent="org"), queue("org")])
    assert response.status_code == 200, response.json()
    assert {q.name for q in store.list(Queue).items} == {"team-a", "org"}


def test_apply_is_all_or_nothing_when_one_parent_is_missing(client: TestClient, store: SqliteStore) -> None:
    response = client.post("/v1/apply", json=[queue("org"), queue("team-a", parent="orgg")])
    assert response.status_code == 422
    assert store.list(Queue).items == []


def test_a_cycle_of_parents_is_refused(client: TestClient, store: SqliteStore) -> None:
    response = client.post("/v1/apply", json=[queue("a", parent="b"), queue("b", parent="a")])
    assert response.status_code == 422
    assert "cycle" in error_of(response)["message"]
    assert client.post("/v1/apply", json=[queue("a"), queue("b", parent="a")]).status_code == 200
    # Re-parenting the root under its own child would close a loop.
    response = client.put(f"{API}/queues/a", json=queue("a", parent="b"))
    assert response.status_code == 422
    assert store.get(Queue, "a").spec.parent is None


def test_deleting_a_queue_with_children_or_work_is_refused(client: TestClient, store: SqliteStore) -> None:
    applied = client.post("/v1/apply", json=[queue("org"), queue("team-a", parent="org"), job("j1")])
    assert applied.status_code == 200, applied.json()
    response = client.delete(f"{API}/queues/org")
    assert response.status_code == 409
    assert "team-a" in error_of(response)["message"]
    response = client.delete(f"{API}/queues/team-a")
    assert response.status_code == 409
    assert "j1" in error_of(response)["message"]
    assert client.delete(f"{API}/namespaces/team-a/trainingjobs/j1").status_code == 200
    assert client.delete(f"{API}/queues/team-a").status_code == 200
    assert client.delete(f"{API}/queues/org").status_code == 200


def test_a_job_must_name_an_existing_leaf_queue_once_queues_are_set_up(client: TestClient) -> None:
    assert client.post("/v1/apply", json=[queue("org"), queue("team-a", parent="org")]).status_code == 200
    response = client.post("/v1/apply", json=[job("j1", queue_name="team-zzz")])
    assert response.status_code == 422
    error = error_of(response)
    assert error["field"] == "spec.queue" and "unknown queue 'team-zzz'" in error["message"]
    assert "team-a" in error["message"]  # the leaf queues it could name
    response = client.post(f"{API}/namespaces/team-a/trainingjobs", json=job("j2", queue_name="org"))
    assert response.status_code == 422
    assert "child queues" in error_of(response)["message"]
    # A queue written in the same apply counts.
    applied = client.post("/v1/apply", json=[job("j3", queue_name="team-b"), queue("team-b", parent="org")])
    assert applied.status_code == 200, applied.json()


def test_tokens_are_made_only_for_queues_that_exist(client: TestClient) -> None:
    # No queue stored yet: the quota tree is the one queue `default`.
    assert client.post("/v1/tokens", json={"queue": "default"}).status_code == 201
    assert client.post("/v1/tokens", json={"queue": "nope"}).status_code == 404
    client.put(f"{API}/queues/team-a", json=queue("team-a"))
    response = client.post("/v1/tokens", json={"queue": "nope"})
    assert response.status_code == 404
    assert "nope" in error_of(response)["message"]
    assert client.post("/v1/tokens", json={"queue": "team-a"}).status_code == 201
