"""Queue tokens of the Kubernetes console (`gpufleet kube token create`, `gpufleet kube console`): kept
as digests in a Secret, each token sees its own queue, its work and the Events about them only."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.api.training import TrainingJob
from gpufleet.cli import kube_console
from gpufleet.cli.main import app as cli_app
from gpufleet.kube import console_tokens
from gpufleet.kube.console import KubeConsoleSource
from gpufleet.kube.console_events import KubeEvents
from gpufleet.kube.store import KubeStore
from gpufleet.server.auth import ScopedTokens, TokenRegistry, new_token, token_digest
from gpufleet.server.console.standalone import console_app

from .fakeapi import FakeApiServer
from .test_scheduler import add_queues

NS = "gpufleet-system"
SECRET = f"/api/v1/namespaces/{NS}/secrets/{console_tokens.SECRET_NAME}"


def _job(api: FakeApiServer, name: str, queue: str) -> None:
    job = {
        "metadata": {"name": name, "namespace": queue},
        "spec": {"queue": queue, "replicas": 1, "worker": {"gpus": 1}},
    }
    KubeStore(api).create(TrainingJob.model_validate(job))


def _event(api: FakeApiServer, name: str, kind: str, about: str, namespace: str, reason: str) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": kind, "name": about, "namespace": namespace},
        "reason": reason,
        "message": f"{reason} of {about}",
        "type": "Normal",
        "lastTimestamp": "2026-12-01T10:00:00Z",
    }
    api.put(f"/api/v1/namespaces/{namespace}/events", event)


def _token(api: FakeApiServer, queue: str) -> str:
    token = new_token()
    console_tokens.add_token(api, NS, token_digest(token), queue)
    return token


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    add_queues(api, "team-a", "team-b")
    _job(api, "llm", "team-a")
    _job(api, "secret-project", "team-b")
    _event(api, "e1", "TrainingJob", "llm", "team-a", "Admitted")
    _event(api, "e2", "TrainingJob", "secret-project", "team-b", "Preempted")
    _event(api, "e3", "Node", "gpu-1", "default", "NodeNotReady")
    return api


def _app(api: FakeApiServer, tmp_path: Path) -> tuple[TestClient, TokenRegistry]:
    registry = TokenRegistry(tmp_path)
    tokens = ScopedTokens(registry, lambda: console_tokens.read_secret(api, NS), ttl=0.0)
    return TestClient(console_app(KubeConsoleSource(api), tokens, KubeEvents(api))), registry


def _get(client: TestClient, token: str, path: str, **params: object) -> dict:
    answer = client.get(path, headers={"Authorization": f"Bearer {token}"}, params=params)
    assert answer.status_code == 200, answer.text
    body: dict = answer.json()
    return body


def test_a_queue_token_sees_its_queue_its_work_and_their_events_only(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    client, registry = _app(cluster, tmp_path)
    token = _token(cluster, "team-a")
    view = _get(client, token, "/v1/console")
    assert view["who"] == {"admin": False, "queue": "team-a"}
    assert [q["name"] for q in view["queues"]] == ["team-a"]
    assert [(w["namespace"], w["name"]) for w in view["work"]] == [("team-a", "llm")]
    assert view["map"] is None and view["cost"]["pools"] == []
    changes = _get(client, token, "/v1/changes", kind="Event")["items"]
    assert [c["object"]["spec"]["reason"] for c in changes] == ["Admitted"]
    # The admin token in the printed URL sees everything, as before.
    admin = _get(client, registry.admin_token, "/v1/changes", kind="Event")["items"]
    assert sorted(c["object"]["spec"]["reason"] for c in admin) == ["Admitted", "NodeNotReady", "Preempted"]
    assert {w["name"] for w in _get(client, registry.admin_token, "/v1/console")["work"]} == {
        "llm",
        "secret-project",
    }


def test_an_unknown_or_revoked_token_is_refused(cluster: FakeApiServer, tmp_path: Path) -> None:
    client, _ = _app(cluster, tmp_path)
    token = _token(cluster, "team-b")
    other = _token(cluster, "team-a")  # a second token is one more key of the same Secret
    assert set(console_tokens.read_secret(cluster, NS).values()) == {"team-a", "team-b"}
    assert _get(client, token, "/v1/console")["who"]["queue"] == "team-b"
    assert client.get("/v1/console", headers={"Authorization": "Bearer gft_made-up"}).status_code == 401
    revoke = {"data": {token_digest(token): None}}
    cluster.request("PATCH", SECRET, body=revoke, content_type="application/merge-patch+json")
    assert client.get("/v1/console", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert _get(client, other, "/v1/console")["who"]["queue"] == "team-a"


def test_tokens_from_the_secret_mounted_as_files(tmp_path: Path) -> None:
    token = new_token()
    mounted = tmp_path / "tokens"
    (mounted / "..2026_12_01").mkdir(parents=True)  # the kubelet's own entries are passed over
    (mounted / token_digest(token)).write_text("team-a")
    (mounted / ("f" * 64)).write_text("Not A Queue!")  # a value that is no queue's name
    assert console_tokens.read_dir(mounted) == {token_digest(token): "team-a"}
    assert console_tokens.read_dir(tmp_path / "missing") == {}
    tokens = ScopedTokens(TokenRegistry(tmp_path / "state"), lambda: console_tokens.read_dir(mounted))
    assert tokens.authenticate(f"Bearer {token}").queue == "team-a"


def test_token_create_keeps_only_the_digest_in_the_secret(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_console, "_transport", lambda *_: api)
    result = CliRunner().invoke(cli_app, ["kube", "token", "create", "--queue", "team-a"])
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    data = api.get(SECRET)["data"]
    assert data == {token_digest(token): base64.b64encode(b"team-a").decode()}
    bad = CliRunner().invoke(cli_app, ["kube", "token", "create", "--queue", "Team A"])
    assert bad.exit_code != 0 and "field --queue" in str(bad.exception)
    assert api.get(SECRET)["data"] == data  # nothing kept for it
