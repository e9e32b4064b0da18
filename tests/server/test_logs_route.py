"""`GET /v1/logs/{namespace}/{kind}/{name}`: a pod's, or a job's pods', log lines from the world's log
book, after the same read access check as a `get`; nothing to read where no twin runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.store import SqliteStore
from gpufleet.twin.podlogs import PodLogBook

from .helpers import error_of, job, queue


@pytest.fixture
def book() -> PodLogBook:
    logs = PodLogBook()
    logs.write(("team-a", "job-j1-worker-0"), 0.0, "placed on node n1", owner=("TrainingJob", "j1"))
    logs.write(("team-a", "job-j1-worker-1"), 1.0, "placed on node n2", owner=("TrainingJob", "j1"))
    logs.write(("team-a", "job-j1-worker-0"), 2.0, "checkpoint written at step 2")
    return logs


@pytest.fixture
def with_logs(store: SqliteStore, tokens: TokenRegistry, book: PodLogBook) -> Iterator[TestClient]:
    with TestClient(create_app(store, tokens, logs=book), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {tokens.admin_token}"
        assert client.post("/v1/apply", json=[queue("team-a"), queue("team-b"), job("j1")]).status_code == 200
        yield client


def test_a_jobs_log_reads_its_pods_in_order_and_follows_after_a_number(with_logs: TestClient) -> None:
    answer = with_logs.get("/v1/logs/team-a/trainingjobs/j1").json()
    assert [(i["pod"], i["line"][21:]) for i in answer["items"]] == [
        ("job-j1-worker-0", "placed on node n1"),
        ("job-j1-worker-1", "placed on node n2"),
        ("job-j1-worker-0", "checkpoint written at step 2"),
    ]
    assert (
        with_logs.get("/v1/logs/team-a/trainingjobs/j1", params={"after": answer["next"]}).json()["items"]
        == []
    )


def test_logs_are_read_with_the_objects_access_rules(
    with_logs: TestClient, tokens: TokenRegistry, client: TestClient
) -> None:
    other = TestClient(with_logs.app, raise_server_exceptions=False)
    other.headers["Authorization"] = f"Bearer {tokens.create('team-b')}"
    assert other.get("/v1/logs/team-a/trainingjobs/j1").status_code in (403, 404)
    assert with_logs.get("/v1/logs/team-a/trainingjobs/none").status_code == 404
    bad = with_logs.get("/v1/logs/team-a/queues/team-a")
    assert bad.status_code == 422 and error_of(bad)["field"] == "kind"
    client.post("/v1/apply", json=[queue("team-a"), job("j1")])
    assert error_of(client.get("/v1/logs/team-a/trainingjobs/j1"))["status"] == 404  # no twin, no logs
