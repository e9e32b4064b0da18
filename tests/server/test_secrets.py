"""Secrets over the embedded API: values go in, and never come out. Reads, lists, watch streams and the
apply answer show `**********`; the store keeps the value for the control plane's own use, also after a
status write, which reads and rewrites the whole object."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.api.secret import Secret
from gpufleet.store import SqliteStore

PATH = "/apis/gpufleet.io/v1alpha1/namespaces/gpufleet-system/secrets"
VALUE = "s3cr3t-worker-token"
SECRET = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "Secret",
    "metadata": {"name": "cluster-w1-token", "namespace": "gpufleet-system"},
    "spec": {"data": {"token": VALUE}},
}


def test_a_secret_value_is_stored_but_never_answered(client: TestClient, store: SqliteStore) -> None:
    applied = client.post("/v1/apply", json={"items": [SECRET]})
    assert applied.status_code == 200, applied.text
    read = client.get(f"{PATH}/cluster-w1-token")
    listed = client.get(PATH)
    watched = client.get(PATH, params={"watch": "true", "resourceVersion": "0", "timeoutSeconds": "0"})
    for answer in (applied, read, listed, watched):
        assert answer.status_code == 200, answer.text
        assert VALUE not in answer.text
        assert "cluster-w1-token" in answer.text
    assert read.json()["spec"]["data"] == {"token": "**********"}
    assert store.get(Secret, "cluster-w1-token", "gpufleet-system").value("token") == VALUE

    status: dict[str, dict[str, list[str]]] = {"metadata": {}, "status": {"conditions": []}}
    assert client.put(f"{PATH}/cluster-w1-token/status", json=status).status_code == 200
    assert store.get(Secret, "cluster-w1-token", "gpufleet-system").value("token") == VALUE


def test_a_queue_token_cannot_read_secrets(client: TestClient, team_client: object) -> None:
    assert client.post("/v1/apply", json={"items": [SECRET]}).status_code == 200
    team = team_client("team-a")  # type: ignore[operator]
    assert team.get(PATH).status_code == 403
    assert team.get(f"{PATH}/cluster-w1-token").status_code in (403, 404)
