"""The OpenAPI document and its browser: every field described, the real bodies documented, no CDN."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from .helpers import API, job, queue

ERROR_REF = "#/components/schemas/ErrorBody"


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    answer = client.get("/openapi.json")
    assert answer.status_code == 200
    doc: dict[str, Any] = answer.json()
    return doc


def _properties(node: Any, where: str) -> list[tuple[str, Any]]:
    """Every (path, schema) of a property anywhere in the document."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for name, value in (node.get("properties") or {}).items():
            found.append((f"{where}.{name}", value))
        for key, value in node.items():
            found.extend(_properties(value, f"{where}/{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_properties(value, f"{where}[{index}]"))
    return found


def test_every_property_has_a_description(document: dict[str, Any]) -> None:
    properties = _properties(document, "")
    assert len(properties) > 300  # the kinds' fields and the answers' are all in it
    undescribed = [
        where for where, schema in properties if not (isinstance(schema, dict) and schema.get("description"))
    ]
    assert undescribed == []


def test_the_kinds_fields_carry_the_models_descriptions(document: dict[str, Any]) -> None:
    """One text per field: the pydantic model's, which the CRDs carry too."""
    from gpufleet.api import TrainingJobSpec

    spec = document["components"]["schemas"]["TrainingJobSpec"]["properties"]
    assert spec["minReplicas"]["description"] == TrainingJobSpec.model_fields["min_replicas"].description


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_nothing_from_elsewhere(client: TestClient, page: str) -> None:
    html = client.get(page)
    assert html.status_code == 200
    assert not re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html.text), "an external URL"
    assets = re.findall(r'(?:src|href)="([^"]+)"', html.text)
    assert any(asset.endswith(".js") for asset in assets)
    for asset in assets:
        assert asset.startswith("/"), asset
        assert client.get(asset).status_code == 200, asset


def test_no_operation_documents_fastapis_validation_error(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "default" in responses, (path, method)
            for code, response in responses.items():
                if code == "default" or code.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": ERROR_REF}, (path, method, code)


def _validate(document: dict[str, Any], path: str, method: str, status: int, body: Any) -> None:
    """Checks a real answer against what the document says the operation answers with that status."""
    responses = document["paths"][path][method]["responses"]
    response = responses.get(str(status), responses.get("default"))
    assert response is not None, (path, method, status)
    schema = response["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**schema, "components": document["components"]}).validate(body)


def test_answers_are_what_the_document_says(client: TestClient, document: dict[str, Any]) -> None:
    jobs = "/apis/gpufleet.io/v1alpha1/namespaces/{namespace}/trainingjobs"
    queues = "/apis/gpufleet.io/v1alpha1/queues"
    answer = client.post("/v1/apply", json=[queue("team-a", quotas={"H100-80GB": {"nominal": 8}})])
    _validate(document, "/v1/apply", "post", answer.status_code, answer.json())
    created = client.post(f"{API}/namespaces/team-a/trainingjobs", json=job("j1"))
    assert created.status_code == 201
    _validate(document, jobs, "post", 201, created.json())
    schema = document["paths"][jobs]["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/TrainingJob"}  # not {}
    listed = client.get(f"{API}/namespaces/team-a/trainingjobs")
    _validate(document, jobs, "get", 200, listed.json())
    status = client.get(f"{API}/namespaces/team-a/trainingjobs/j1/status")
    _validate(document, jobs + "/{name}/status", "get", 200, status.json())
    replaced = client.put(f"{API}/queues/team-b", json=queue("team-b"))
    assert replaced.status_code == 201
    _validate(document, queues + "/{name}", "put", 201, replaced.json())
    for bad, path, method in (
        (client.post(f"{API}/namespaces/team-a/trainingjobs", json=job("j1")), jobs, "post"),  # 409
        (
            client.post(f"{API}/namespaces/team-a/trainingjobs", json=job("x", replicas=0)),
            jobs,
            "post",
        ),  # 422
        (client.get(f"{API}/queues/nope"), queues + "/{name}", "get"),  # 404
        (client.get(f"{API}/queues", params={"timeoutSeconds": "soon"}), queues, "get"),  # 400
        (client.get(f"{API}/queues", headers={"Authorization": "Bearer nope"}), queues, "get"),  # 401
    ):
        assert bad.status_code >= 400
        _validate(document, path, method, bad.status_code, bad.json())
    deleted = client.post(
        "/v1/delete", json=[{"kind": "TrainingJob", "metadata": {"name": "j1", "namespace": "team-a"}}]
    )
    _validate(document, "/v1/delete", "post", 200, deleted.json())
    gone = client.delete(f"{API}/queues/team-b")
    _validate(document, queues + "/{name}", "delete", 200, gone.json())
    changes = client.get("/v1/changes", params={"resourceVersion": "0"})
    _validate(document, "/v1/changes", "get", 200, changes.json())
    for path in ("/healthz", "/v1/whoami", API):
        _validate(document, path, "get", 200, client.get(path).json())
