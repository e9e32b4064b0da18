"""The federation tokens of a join (`server.federation_access`): the manager's token in a worker writes
only managed work, a worker's token in the manager only its own Cluster's status; everything else is a
403 naming the role, the verb and the kind (or a 404 for an object it may not see)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.console import add_console
from gpufleet.store import SqliteStore
from gpufleet.store.console import StoreSource

from .helpers import API, job, queue

MANAGED = {"gpufleet.io/managed-by": "manager"}
Role = Callable[[str, str], TestClient]


@pytest.fixture
def role_client(client: TestClient) -> Role:
    """A client of the same app with a federation token minted through the API by the admin."""

    def make(role: str, cluster: str) -> TestClient:
        answer = client.post("/v1/tokens", json={"role": role, "cluster": cluster})
        assert answer.status_code == 201, answer.text
        assert answer.json()["role"] == role and answer.json()["queue"] is None
        other = TestClient(client.app, raise_server_exceptions=False)
        other.headers["Authorization"] = f"Bearer {answer.json()['token']}"
        return other

    return make


def work(name: str) -> dict[str, Any]:
    return job(name, "default", queue_name="team")


def managed(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["annotations"] = dict(MANAGED)
    return obj


def refused(answer: Any, *words: str) -> None:
    assert answer.status_code == 403, answer.text
    message = answer.json()["error"]["message"]
    for word in words:
        assert word in message, message


def test_the_managers_token_writes_only_managed_work(client: TestClient, role_client: Role) -> None:
    assert client.post("/v1/apply", json=[queue("team"), work("own")]).status_code == 200
    manager = role_client("federation-manager", "w1")
    assert manager.get("/v1/whoami").json() == {
        "admin": False,
        "queue": None,
        "role": "federation-manager",
        "cluster": "w1",
    }
    copy = managed(work("copy"))
    assert manager.post("/v1/apply", json=[copy]).status_code == 200, "a managed copy"
    assert manager.post("/v1/apply", json=[managed(queue("granted"))]).status_code == 200
    listed = manager.get(f"{API}/trainingjobs").json()["items"]
    assert sorted(j["metadata"]["name"] for j in listed) == ["copy", "own"], "it sees every job"

    refused(manager.post("/v1/apply", json=[work("mine")]), "federation manager", "create only TrainingJob")
    own = work("own")
    own["metadata"]["annotations"] = dict(MANAGED)  # marking the worker's own job does not make it its
    refused(
        manager.post("/v1/apply", json=[own]), "change or delete TrainingJob objects of the cluster's own"
    )
    refused(manager.delete(f"{API}/namespaces/default/trainingjobs/own"), "change or delete TrainingJob")
    refused(manager.post("/v1/apply", json=[queue("team")]), "change or delete Queue objects of the cluster")
    refused(manager.get(f"{API}/gpupools"), "may not read gpupools")
    refused(manager.get(f"{API}/namespaces/gpufleet-system/secrets"), "may not read secrets")
    refused(manager.put(f"{API}/namespaces/default/trainingjobs/copy/status", json={"status": {}}), "status")
    refused(manager.post("/v1/tokens", json={"queue": "team"}), "may not create tokens")
    assert manager.delete(f"{API}/namespaces/default/trainingjobs/copy").status_code == 200
    assert client.get(f"{API}/namespaces/default/trainingjobs/own").status_code == 200


def test_the_managers_token_marks_complete_only_its_checkpoints(
    client: TestClient, role_client: Role
) -> None:
    def checkpoint(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Checkpoint",
            "metadata": {"name": name},
            "spec": {"job": "llm", "step": 10, "uri": "s3://ckpt/llm/10"},
        }

    assert client.post("/v1/apply", json=[checkpoint("own")]).status_code == 200
    manager = role_client("federation-manager", "w1")
    assert manager.post("/v1/apply", json=[managed(checkpoint("carried"))]).status_code == 200
    done = {"metadata": {}, "status": {"phase": "Complete"}}
    path = f"{API}/namespaces/default/checkpoints"
    assert manager.put(f"{path}/carried/status", json=done).status_code == 200
    assert manager.get(f"{path}/own").status_code == 200, "it reads the worker's own, not to carry it twice"
    refused(
        manager.put(f"{path}/own/status", json=done), "status only of Checkpoint objects the manager made"
    )


def test_a_workers_token_reads_its_cluster_and_writes_only_its_status(
    client: TestClient, role_client: Role
) -> None:
    def cluster(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {
                "connection": {
                    "embedded": {"url": "http://w", "tokenSecretRef": {"name": "s", "key": "token"}}
                }
            },
        }

    assert client.post("/v1/apply", json=[cluster("w1"), cluster("w2"), queue("team")]).status_code == 200
    worker = role_client("federation-worker", "w1")
    own = worker.get(f"{API}/clusters/w1")
    assert own.status_code == 200
    beat = {"metadata": {"resourceVersion": own.json()["metadata"]["resourceVersion"]}, "status": {}}
    assert worker.put(f"{API}/clusters/w1/status", json=beat).status_code == 200
    assert worker.get(f"{API}/clusters/w2").status_code == 404, "another cluster is not there for it"
    assert [c["metadata"]["name"] for c in worker.get(f"{API}/clusters").json()["items"]] == ["w1"]
    refused(
        worker.put(f"{API}/clusters/w2/status", json={"status": {}}), "cluster w1", "status of Cluster w2"
    )
    refused(worker.post("/v1/apply", json=[cluster("w1")]), "change or delete Cluster")
    refused(worker.post("/v1/apply", json=[work("llm")]), "create TrainingJob")
    refused(worker.get(f"{API}/trainingjobs"), "may not read trainingjobs")
    refused(worker.delete(f"{API}/clusters/w1"), "change or delete Cluster")


def test_a_new_join_replaces_the_token_and_leave_revokes_it(
    client: TestClient, tokens: TokenRegistry, tmp_path: Path
) -> None:
    def mint(role: str, cluster: str) -> str:
        answer = client.post("/v1/tokens", json={"role": role, "cluster": cluster})
        assert answer.status_code == 201, answer.text
        token: str = answer.json()["token"]
        return token

    def works(token: str) -> bool:
        return client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"}).status_code == 200

    first_w1, w2 = mint("federation-worker", "w1"), mint("federation-worker", "w2")
    second_w1 = mint("federation-worker", "w1")
    assert (works(first_w1), works(second_w1), works(w2)) == (False, True, True), "one token per cluster"
    manager = mint("federation-manager", "w1")
    assert works(mint("federation-manager", "w9")) and not works(manager), "a worker has one manager"

    stored = json.loads((tmp_path / "tokens.json").read_text())
    assert len(stored["roles"]) == 3, "kept apart from `tokens`, which an older release reads"
    assert all("role" not in entry for entry in stored["tokens"].values())
    assert second_w1 not in (tmp_path / "tokens.json").read_text(), "only the hash is kept"
    again = TokenRegistry(tmp_path)
    assert again.authenticate(f"Bearer {second_w1}").role == "federation-worker", "kept over a restart"
    assert not again.authenticate(f"Bearer {second_w1}").admin

    assert client.delete("/v1/tokens", params={"role": "federation-worker", "cluster": "w1"}).json() == {
        "revoked": 1
    }
    assert not works(second_w1) and works(w2)


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"role": "federation-worker"}, 400, "cluster"),
        ({"role": "federation-worker", "cluster": "w1", "queue": "team"}, 400, "queue"),
        ({"role": "admin", "cluster": "w1"}, 400, "role"),
        ({"role": "federation-worker", "cluster": "Not A Name"}, 422, "cluster"),
    ],
)
def test_a_bad_token_request_names_its_field(
    client: TestClient, body: dict[str, str], status: int, field: str
) -> None:
    answer = client.post("/v1/tokens", json=body)
    assert answer.status_code == status, answer.text
    assert field in json.dumps(answer.json()["error"])


def test_the_console_refuses_a_federation_token(store: SqliteStore, tokens: TokenRegistry) -> None:
    app = create_app(store, tokens)
    add_console(app, StoreSource(store), tokens)
    with TestClient(app, raise_server_exceptions=False) as console:
        for role in ("federation-manager", "federation-worker"):
            headers = {"Authorization": f"Bearer {tokens.create_role(role, 'w1')}"}
            refused(console.get("/v1/console", headers=headers), "may not read the console's view")
        admin = {"Authorization": f"Bearer {tokens.admin_token}"}
        assert console.get("/v1/console", headers=admin).status_code == 200
