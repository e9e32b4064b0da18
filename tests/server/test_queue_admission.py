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
