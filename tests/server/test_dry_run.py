"""`POST /v1/apply?dryRun=true` (`gpufleet apply --dry-run=server`): the same checks as a real apply,
all or none, a report of what would change, and nothing stored (no object, version or event)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.api.queue import Queue
from gpufleet.store import SqliteStore

from .helpers import error_of, job, queue


def test_a_dry_run_reports_what_would_change_and_stores_nothing(
    client: TestClient, store: SqliteStore
) -> None:
    assert client.post("/v1/apply", json=[queue("org")]).status_code == 200
    before = store.list(Queue)
    answer = client.post(
        "/v1/apply", params={"dryRun": "true"}, json=[queue("org"), queue("team-a", parent="org"), job("j1")]
    )
    assert answer.status_code == 200, answer.json()
    actions = [(item["object"]["metadata"]["name"], item["action"]) for item in answer.json()["items"]]
    assert actions == [("org", "unchanged"), ("team-a", "created"), ("j1", "created")]
    after = store.list(Queue)
    assert [q.name for q in after.items] == ["org"] and after.resource_version == before.resource_version
    assert (
        client.post("/v1/apply", json=[queue("team-a", parent="org")]).json()["items"][0]["action"]
        == "created"
    )


def test_a_dry_run_refuses_what_a_real_apply_refuses(client: TestClient, store: SqliteStore) -> None:
    answer = client.post(
        "/v1/apply", params={"dryRun": "true"}, json=[queue("org"), queue("a", parent="orgg")]
    )
    assert answer.status_code == 422 and error_of(answer)["field"] == "spec.parent"
    assert store.list(Queue).items == []
