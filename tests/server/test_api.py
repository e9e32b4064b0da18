"""The HTTP API through FastAPI's test client: paths, verbs, status codes and error bodies."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.server.auth import ADMIN_TOKEN_FILE, TOKENS_FILE, TokenRegistry
from gpufleet.store import SqliteStore

from .helpers import API, error_of, job, job_path, queue


def test_health_needs_no_token_but_the_api_does(client: TestClient) -> None:
    anonymous = TestClient(client.app)
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        response = anonymous.get(f"{API}/queues", headers=headers)
        assert response.status_code == 401
        assert error_of(response)["type"] == "UnauthorizedError"
        assert response.headers["www-authenticate"] == "Bearer"


def test_discovery_names_every_served_kind(client: TestClient) -> None:
    resources = {r["kind"]: r for r in client.get(API).json()["resources"]}
    assert {"GPUPool", "Queue", "TrainingJob", "InferenceService", "Checkpoint", "ModelVersion"} <= set(
        resources
    )
    assert "Scenario" not in resources
    assert resources["TrainingJob"]["name"] == "trainingjobs"
    assert resources["TrainingJob"]["namespaced"] is True
    assert resources["Queue"]["namespaced"] is False
    assert "tj" in resources["TrainingJob"]["shortNames"]
    assert resources["InferenceService"]["shortNames"] == ["gisvc", "isvc"]


def test_every_name_of_a_kind_names_only_that_kind(client: TestClient) -> None:
    """Kind, plural, singular and short names (also with an s, as the CLI reads them) never collide."""
    owners: dict[str, set[str]] = {}
    for resource in client.get(API).json()["resources"]:
        short = resource["shortNames"]
        names = {resource["kind"].lower(), resource["name"], resource["singularName"], *short}
        names |= {name + "s" for name in short}
        for name in names:
            owners.setdefault(name, set()).add(resource["kind"])
    shared = {name: kinds for name, kinds in owners.items() if len(kinds) > 1}
    assert shared == {}


def test_create_get_list_and_status(client: TestClient) -> None:
    created = client.post(job_path(), json=job("llm"))
    assert created.status_code == 201
    body = created.json()
    assert body["metadata"]["resourceVersion"] and body["metadata"]["uid"]
    assert client.get(job_path("llm")).json()["spec"]["replicas"] == 2
    status = client.get(job_path("llm") + "/status").json()
    assert status["status"]["phase"] == "Pending" and "spec" not in status
    listed = client.get(job_path()).json()
    assert listed["kind"] == "TrainingJobList" and [i["metadata"]["name"] for i in listed["items"]] == ["llm"]
    assert int(listed["metadata"]["resourceVersion"]) >= int(body["metadata"]["resourceVersion"])
    assert client.get(job_path(namespace="other")).json()["items"] == []
    assert len(client.get(f"{API}/trainingjobs").json()["items"]) == 1


def test_a_job_without_namespace_takes_the_paths(client: TestClient) -> None:
    data = job("nsless")
    del data["metadata"]["namespace"]
    assert client.post(job_path(namespace="team-z"), json=data).json()["metadata"]["namespace"] == "team-z"


def test_yaml_bodies_are_accepted(client: TestClient) -> None:
    text = "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: q1}\nspec: {fairShareWeight: 3}\n"
    response = client.put(f"{API}/queues/q1", content=text, headers={"Content-Type": "application/yaml"})
    assert response.status_code == 201
    assert response.json()["spec"]["fairShareWeight"] == 3


def test_put_is_an_upsert_and_reports_what_it_did(client: TestClient) -> None:
    first = client.put(f"{API}/queues/q", json=queue("q", fairShareWeight=1))
    assert first.status_code == 201 and first.headers["x-gpufleet-action"] == "created"
    same = client.put(f"{API}/queues/q", json=queue("q", fairShareWeight=1))
    assert same.status_code == 200 and same.headers["x-gpufleet-action"] == "unchanged"
    assert same.json()["metadata"]["resourceVersion"] == first.json()["metadata"]["resourceVersion"]
    changed = client.put(f"{API}/queues/q", json=queue("q", fairShareWeight=2))
    assert changed.headers["x-gpufleet-action"] == "configured"
    assert changed.json()["metadata"]["generation"] == 2


def test_put_with_a_stale_resource_version_conflicts(client: TestClient) -> None:
    created = client.put(f"{API}/queues/q", json=queue("q")).json()
    stale = queue("q", fairShareWeight=5)
    stale["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    assert client.put(f"{API}/queues/q", json=stale).status_code == 200
    again = client.put(f"{API}/queues/q", json=stale)
    assert again.status_code == 409
    assert error_of(again) == {
        "type": "ConflictError",
        "message": again.json()["error"]["message"],
        "object": "Queue q",
        "field": "metadata.resourceVersion",
        "status": 409,
    }


def test_create_twice_conflicts(client: TestClient) -> None:
    assert client.post(job_path(), json=job("a")).status_code == 201
    response = client.post(job_path(), json=job("a"))
    assert response.status_code == 409 and error_of(response)["object"] == "TrainingJob team-a/a"


def test_invalid_fields_are_422_with_the_field_path(client: TestClient) -> None:
    bad = job("bad")
    bad["spec"]["worker"]["gpus"] = -1
    response = client.post(job_path(), json=bad)
    assert response.status_code == 422
    error = error_of(response)
    assert error["field"] == "spec.worker.gpus" and error["object"] == "TrainingJob team-a/bad"
    typo = job("typo")
    typo["spec"]["replicaz"] = 3
    assert error_of(client.post(job_path(), json=typo))["field"] == "spec.replicaz"


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"{not json", "application/json", 400),
        (b"a: [unclosed", "application/yaml", 400),
        (b"\xff\xfe", "application/json", 400),
        (b"[]", "application/json", 422),
        (b'"text"', "application/json", 422),
        (b'{"kind": "Queue"}', "application/json", 422),
        (b"[" * 5000 + b"]" * 5000, "application/json", 400),
        (b"a: &a [*a]", "application/yaml", 400),
        (  # a "billion laughs": aliases that multiply a few lines into 9**9 values
            b"a: &a [1,1,1,1,1,1,1,1,1]\n"
            + b"".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n".encode()
                for i in range(8)
            ),
            "application/yaml",
            400,
        ),
        (
            b'{"apiVersion": "gpufleet.io/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "deep"}, '
            b'"spec": {"replicas": 1, "worker": {"template": {"a": ' + b"[" * 900 + b"]" * 900 + b"}}}}",
            "application/json",
            400,
        ),
        (
            b'{"apiVersion": "gpufleet.io/v1alpha1", "kind": "Nope", "metadata": {"name": "x"}}',
            "application/json",
            422,
        ),
    ],
)
def test_malformed_bodies_are_client_errors(
    client: TestClient, body: bytes, content_type: str, status: int
) -> None:
    response = client.post(job_path(), content=body, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    error_of(response)


@pytest.mark.parametrize(
    ("text", "content_type"),
    [
        (
            '{"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}, '
            '"spec": {"fairShareWeight": Infinity}}',
            "application/json",
        ),
        (
            '{"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}, '
            '"spec": {"fairShareWeight": NaN}}',
            "application/json",
        ),
        (
            "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: q}\n"
            "spec: {fairShareWeight: .inf}\n",
            "application/yaml",
        ),
    ],
)
def test_non_finite_numbers_are_refused(client: TestClient, text: str, content_type: str) -> None:
    response = client.put(f"{API}/queues/q", content=text, headers={"Content-Type": content_type})
    assert response.status_code == 422 and error_of(response)["field"] == "spec.fairShareWeight"
    assert client.get(f"{API}/queues/q").status_code == 404


def test_a_body_of_another_kind_or_name_is_refused(client: TestClient) -> None:
    response = client.post(job_path(), json=queue("q"))
    assert response.status_code == 422 and error_of(response)["field"] == "kind"
    response = client.put(job_path("x"), json=job("y"))
    assert response.status_code == 422 and error_of(response)["field"] == "metadata.name"
    response = client.put(job_path("x", namespace="ns1"), json=job("x", namespace="ns2"))
    assert response.status_code == 422 and error_of(response)["field"] == "metadata.namespace"


def test_not_found_paths_and_methods(client: TestClient) -> None:
    assert error_of(client.get(job_path("missing")))["object"] == "TrainingJob team-a/missing"
    assert client.get(job_path("missing")).status_code == 404
    assert client.delete(job_path("missing")).status_code == 404
    assert client.get(f"{API}/nonsense").status_code == 404
    assert error_of(client.get(f"{API}/nonsense"))["type"] == "NotFoundError"
    response = client.patch(job_path("x"), json={})
    assert response.status_code == 405
    error_of(response)


def test_bad_query_parameters_are_400(client: TestClient) -> None:
    for query in ("timeoutSeconds=abc", "timeoutSeconds=-1", "watch=maybe"):
        response = client.get(f"{API}/queues?{query}")
        assert response.status_code == 400, query
        error_of(response)
    response = client.get(f"{API}/queues?labelSelector=a%20in%20(")
    assert response.status_code == 422
    # "²" is a digit to str.isdigit, not to int: refused as any other text, never a server error.
    response = client.get(f"{API}/queues?watch=true&resourceVersion=%C2%B2")
    assert response.status_code == 422
    assert "not a resourceVersion" in error_of(response)["message"]


def test_delete(client: TestClient) -> None:
    client.post(job_path(), json=job("gone"))
    response = client.delete(job_path("gone"))
    assert response.status_code == 200 and response.json()["status"] == "Success"
    assert client.get(job_path("gone")).status_code == 404


def test_multi_object_apply_is_all_or_nothing(client: TestClient, store: SqliteStore) -> None:
    bad = job("second")
    bad["spec"]["replicas"] = 0
    response = client.post("/v1/apply", json={"items": [queue("team-a"), job("first"), bad]})
    assert response.status_code == 422
    error = error_of(response)
    assert error["field"] == "spec.replicas" and error["object"] == "TrainingJob team-a/second"
    assert store.list("Queue").items == [] and store.list("TrainingJob").items == []

    ok = client.post("/v1/apply", json={"items": [queue("team-a"), job("first"), job("second")]})
    assert ok.status_code == 200
    assert [item["action"] for item in ok.json()["items"]] == ["created", "created", "created"]


def test_multi_document_yaml_apply(client: TestClient) -> None:
    text = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\n---\n"
        "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, namespace: team-a}\n"
        "spec: {queue: team-a, replicas: 1, worker: {gpus: 1}}\n"
    )
    response = client.post("/v1/apply", content=text, headers={"Content-Type": "application/yaml"})
    assert response.status_code == 200
    assert [i["object"]["kind"] for i in response.json()["items"]] == ["Queue", "TrainingJob"]
    broken = text.replace("replicas: 1", "replicas: one")
    response = client.post(
        "/v1/apply",
        content=broken.replace("name: j", "name: k"),
        headers={"Content-Type": "application/yaml"},
    )
    assert response.status_code == 422
    assert (
        error_of(response)["object"] == "TrainingJob team-a/k"
        and error_of(response)["field"] == "spec.replicas"
    )
    assert client.get(job_path("k")).status_code == 404


def test_the_same_object_twice_in_one_apply_is_refused(client: TestClient) -> None:
    response = client.post("/v1/apply", json=[job("twin"), job("twin")])
    assert response.status_code == 422 and "twice" in error_of(response)["message"]


def test_a_failing_apply_writes_nothing(
    client: TestClient, store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.post("/v1/apply", json=[queue("q", fairShareWeight=1), queue("team-a")])
    head = store.resource_version
    real_apply = store._apply_locked
    calls = []

    def failing_apply(info, data):  # type: ignore[no-untyped-def]
        calls.append(data["metadata"]["name"])
        if data["metadata"]["name"] == "boom":  # a failure inside the batch, after two writes
            raise RuntimeError("disk on fire")
        return real_apply(info, data)

    monkeypatch.setattr(store, "_apply_locked", failing_apply)
    response = client.post("/v1/apply", json=[queue("q", fairShareWeight=7), job("new"), job("boom")])
    assert response.status_code == 500 and error_of(response)["type"] == "InternalError"
    assert calls == ["q", "new", "boom"]
    monkeypatch.setattr(store, "_apply_locked", real_apply)
    assert store.get("Queue", "q").spec.fair_share_weight == 1  # type: ignore[attr-defined]
    assert store.list("TrainingJob").items == []
    assert store.resource_version == head and store.events_since(head) == []


def test_watch_streams_events_from_a_resource_version(client: TestClient) -> None:
    start = client.get(job_path()).json()["metadata"]["resourceVersion"]
    client.post(job_path(), json=job("w1"))
    client.put(job_path("w1"), json=job("w1", replicas=3))
    client.delete(job_path("w1"))
    response = client.get(
        job_path(), params={"watch": "true", "resourceVersion": start, "timeoutSeconds": 0.2}
    )
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [line["type"] for line in lines] == ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    assert int(lines[-1]["object"]["metadata"]["resourceVersion"]) >= int(start) + 3


def test_watch_from_a_compacted_version_is_410(client: TestClient, store: SqliteStore) -> None:
    for index in range(5):
        client.put(f"{API}/queues/q{index}", json=queue(f"q{index}"))
    store.compact(keep=1)
    response = client.get(f"{API}/queues", params={"watch": "1", "resourceVersion": "1", "timeoutSeconds": 0})
    assert response.status_code == 410 and error_of(response)["field"] == "resourceVersion"
    response = client.get("/v1/changes", params={"resourceVersion": "1"})
    assert response.status_code == 410


def test_changes_long_poll_and_resume(client: TestClient) -> None:
    client.put(f"{API}/queues/a", json=queue("a"))
    first = client.get("/v1/changes").json()
    assert [c["object"]["metadata"]["name"] for c in first["items"]] == ["a"]
    idle = client.get(
        "/v1/changes", params={"resourceVersion": first["resourceVersion"], "timeoutSeconds": 0.2}
    ).json()
    assert idle["items"] == [] and idle["resourceVersion"] == first["resourceVersion"]
    client.post(job_path(), json=job("j", queue_name="a"))
    later = client.get(
        "/v1/changes", params={"resourceVersion": first["resourceVersion"], "kind": "TrainingJob"}
    ).json()
    assert [c["type"] for c in later["items"]] == ["ADDED"]
    assert client.get("/v1/changes", params={"kind": "Nope"}).status_code == 422
    assert client.get("/v1/changes", params={"resourceVersion": "x"}).status_code == 422


def test_openapi_document_describes_the_kinds(client: TestClient) -> None:
    document = TestClient(client.app).get("/openapi.json").json()
    assert "TrainingJob" in document["components"]["schemas"]
    create = document["paths"]["/apis/gpufleet.io/v1alpha1/namespaces/{namespace}/trainingjobs"]["post"]
    schema = create["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/TrainingJob"}
    queues = document["paths"]["/apis/gpufleet.io/v1alpha1/queues/{name}"]
    assert [p["name"] for p in queues["get"]["parameters"]] == ["name"]  # cluster-wide: no namespace
    assert "HTTPBearer" in document["components"]["securitySchemes"]


def test_tokens_are_private_and_hashed(tmp_path: Path, tokens: TokenRegistry) -> None:
    team = tokens.create("team-a")
    for name in (ADMIN_TOKEN_FILE, TOKENS_FILE):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600
    stored = (tmp_path / TOKENS_FILE).read_text()
    assert team not in stored and tokens.admin_token not in stored
    again = TokenRegistry(tmp_path)  # a restart keeps both tokens
    assert again.admin_token == tokens.admin_token
    assert again.authenticate(f"Bearer {team}").queue == "team-a"
    assert again.authenticate(f"Bearer {tokens.admin_token}").admin


def test_only_the_admin_creates_tokens(client: TestClient, team_client) -> None:  # type: ignore[no-untyped-def]
    assert client.put(f"{API}/queues/team-a", json=queue("team-a")).status_code == 201
    response = client.post("/v1/tokens", json={"queue": "team-a"})
    assert response.status_code == 201 and response.json()["token"].startswith("gft_")
    team = team_client("team-a")
    assert team.post("/v1/tokens", json={"queue": "team-a"}).status_code == 403
    assert client.post("/v1/tokens", json={"queue": "Not A Name"}).status_code == 422
    assert client.post("/v1/tokens", json={}).status_code == 400


def test_store_errors_keep_their_status(client: TestClient, store: SqliteStore) -> None:
    # A cluster-wide object sent with a namespace is the model's error, reported on its field.
    data = queue("q")
    data["metadata"]["namespace"] = "x"
    response = client.put(f"{API}/queues/q", json=data)
    assert response.status_code == 422 and error_of(response)["field"] == "metadata.namespace"
