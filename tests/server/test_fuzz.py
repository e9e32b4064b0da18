"""Bad input through the API, generated from the OpenAPI document: never a 500, never half-applied.

schemathesis turns the schema the server serves into Hypothesis strategies of requests: valid
bodies and query strings (positive) and ones that break the schema (negative). The server must
answer every one with a success or a client error in the JSON error shape. Then the all-or-nothing
rule of a multi-object apply in which one object is broken.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.store import SqliteStore

from .helpers import job, queue

# One app for the module: the strategies are built from its schema when the module is imported.
_STATE = Path(tempfile.mkdtemp(prefix="gpufleet-fuzz-"))
_STORE = SqliteStore.open(_STATE, synchronous="OFF")
_TOKENS = TokenRegistry(_STATE)
APP = create_app(_STORE, _TOKENS)
HEADERS = {"Authorization": f"Bearer {_TOKENS.admin_token}"}
API = "/apis/gpufleet.io/v1alpha1"

SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
OPERATIONS = [
    ("/v1/apply", "POST"),
    ("/v1/changes", "GET"),
    ("/v1/tokens", "POST"),
    (f"{API}/queues", "GET"),
    (f"{API}/queues", "POST"),
    (f"{API}/queues/{{name}}", "PUT"),
    (f"{API}/queues/{{name}}", "DELETE"),
    (f"{API}/gpupools/{{name}}", "PUT"),
    (f"{API}/namespaces/{{namespace}}/trainingjobs", "POST"),
    (f"{API}/namespaces/{{namespace}}/trainingjobs", "GET"),
    (f"{API}/namespaces/{{namespace}}/trainingjobs/{{name}}", "PUT"),
    (f"{API}/namespaces/{{namespace}}/trainingjobs/{{name}}", "GET"),
    (f"{API}/namespaces/{{namespace}}/trainingjobs/{{name}}/status", "PUT"),
    (f"{API}/namespaces/{{namespace}}/trainingjobs/{{name}}/status", "PATCH"),
    (f"{API}/queues/{{name}}/status", "PATCH"),
    (f"{API}/namespaces/{{namespace}}/inferenceservices/{{name}}", "PUT"),
    (f"{API}/namespaces/{{namespace}}/checkpoints", "POST"),
    (f"{API}/namespaces/{{namespace}}/modelversions/{{name}}", "PUT"),
]


def _requests(mode: GenerationMode) -> st.SearchStrategy[Any]:
    return st.one_of([SCHEMA[path][method].as_strategy(mode) for path, method in OPERATIONS])


def _queue_token() -> dict[str, str]:
    """A queue token, as a tenant holds one: its queue must exist before a token is made for it."""
    from fastapi.testclient import TestClient

    with TestClient(APP) as admin:
        admin.post(f"{API}/queues", json=queue("fuzz-tenant", quotas={"H100-80GB": {"nominal": 8}}),
                   headers=HEADERS)  # fmt: skip
    return {"Authorization": f"Bearer {_TOKENS.create('fuzz-tenant')}"}


TENANT = _queue_token()


def _check(case: Any, headers: dict[str, str] = HEADERS) -> None:
    # Watches and long polls wait as long as they are told to (tested elsewhere); keep them short.
    if isinstance(case.query, dict):
        case.query["timeoutSeconds"] = 0
    # The generated Authorization header (an arbitrary bearer token) is replaced by the admin's or a
    # queue's, so that requests get past authentication to the code that parses and scopes them.
    case.headers = {**(case.headers or {}), **headers}
    response = case.call()
    where = f"{case.method} {case.formatted_path}"
    assert response.status_code < 500, f"{where}: {response.text[:500]}"
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"type", "message", "object", "field", "status"}, where


@given(case=_requests(GenerationMode.POSITIVE))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_requests_that_fit_the_schema_never_cause_a_server_error(case: Any) -> None:
    _check(case)


@given(case=_requests(GenerationMode.NEGATIVE))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_requests_that_break_the_schema_never_cause_a_server_error(case: Any) -> None:
    _check(case)


@given(case=_requests(GenerationMode.POSITIVE) | _requests(GenerationMode.NEGATIVE))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_a_queue_tokens_requests_never_cause_a_server_error(case: Any) -> None:
    """What a tenant can send goes through the queue scoping too: it must refuse, never fail."""
    _check(case, TENANT)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=8,
)
_VALID = [
    queue("fuzz-q", quotas={"H100-80GB": {"nominal": 8}}),
    job("fuzz-job", "fuzz", queue_name="fuzz-q"),
    {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": {"name": "fuzz-pool"},
        "spec": {"gpuModel": "A100-80GB", "gpusPerNode": 8, "sharing": {"mig": {"*": ["3g.40gb"]}}},
    },
    {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "fuzz-svc", "namespace": "fuzz"},
        "spec": {"replicas": {"min": 1, "max": 2}, "replica": {"gpuMilli": 500}},
    },
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside nested dicts and lists."""
    found = [prefix] if prefix else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.extend(_paths(child, (*prefix, key)))
    return found


@given(data=st.data(), index=st.integers(min_value=0, max_value=len(_VALID) - 1), replacement=_JSON)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_valid_objects_with_one_value_replaced(data: st.DataObject, index: int, replacement: Any) -> None:
    """Near-valid objects reach deeper than schema-generated ones: every field of a valid object, once
    replaced by arbitrary JSON, is accepted or refused with a client error, never a 500."""
    import copy

    from fastapi.testclient import TestClient

    obj = copy.deepcopy(_VALID[index])
    path = data.draw(st.sampled_from(_paths(obj)))
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = replacement
    client = TestClient(APP, raise_server_exceptions=False)
    response = client.post("/v1/apply", json=[obj], headers=HEADERS)
    assert response.status_code < 500, response.text
    if response.status_code == 200:
        stored = response.json()["items"][0]["object"]
        meta = stored["metadata"]
        plural = {"Queue": "queues", "TrainingJob": "trainingjobs", "GPUPool": "gpupools"}.get(
            stored["kind"], "inferenceservices"
        )
        where = f"{API}/namespaces/{meta['namespace']}/{plural}" if "namespace" in meta else f"{API}/{plural}"
        assert client.get(f"{where}/{meta['name']}", headers=HEADERS).status_code == 200
    else:
        assert set(response.json()["error"]) == {"type", "message", "object", "field", "status"}


_BREAKAGES = st.sampled_from(
    [
        ("replicas", 0),
        ("replicas", "many"),
        ("worker", {"gpus": 1, "mig": "1g.10gb"}),
        ("minReplicas", 99),
        ("priorityClass", "no-such-class"),
        ("unknownField", True),
        ("durationSeconds", -5),
    ]
)


@given(
    size=st.integers(min_value=2, max_value=6),
    broken_at=st.integers(min_value=0, max_value=5),
    breakage=_BREAKAGES,
    prefix=st.text(alphabet="abcdefghij", min_size=3, max_size=8),
)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_an_apply_with_one_broken_object_stores_nothing(
    size: int, broken_at: int, breakage: tuple[str, Any], prefix: str
) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(APP, raise_server_exceptions=False)
    objects: list[dict[str, Any]] = [queue(f"{prefix}-q")]
    objects += [job(f"{prefix}-{i}", "fuzz", queue_name=f"{prefix}-q") for i in range(size - 1)]
    field, value = breakage
    broken = objects[min(broken_at, size - 1)]
    broken.setdefault("spec", {})[field] = value
    before = _STORE.resource_version
    response = client.post("/v1/apply", json={"items": objects}, headers=HEADERS)
    assert response.status_code == 422, response.text
    assert _STORE.resource_version == before, "a refused apply wrote something"
    names = {o["metadata"]["name"] for o in objects}
    stored = {j.name for j in _STORE.list("TrainingJob", namespace="fuzz").items} | {
        q.name for q in _STORE.list("Queue").items
    }
    assert not names & stored


_STATUS_KEYS = st.sampled_from(
    ["phase", "replicas", "restarts", "lostGpuSeconds", "lastCheckpoint", "conditions", "pendingReason", "x"]
)


@given(key=_STATUS_KEYS, value=_JSON, put=st.booleans())
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
def test_status_writes_of_arbitrary_values_never_cause_a_server_error(
    key: str, value: Any, put: bool
) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(APP, raise_server_exceptions=False)
    path = f"{API}/namespaces/fuzz/trainingjobs/fuzz-status"
    if client.get(path, headers=HEADERS).status_code == 404:
        client.put(f"{API}/queues/fuzz-status-q", json=queue("fuzz-status-q"), headers=HEADERS)
        created = client.post(
            f"{API}/namespaces/fuzz/trainingjobs",
            json=job("fuzz-status", "fuzz", queue_name="fuzz-status-q"),
            headers=HEADERS,
        )
        assert created.status_code == 201, created.text
    body = {"status": {key: value}}
    if put:
        response = client.put(
            path + "/status",
            json={**job("fuzz-status", "fuzz", queue_name="fuzz-status-q"), **body},
            headers=HEADERS,
        )
    else:
        headers = {**HEADERS, "Content-Type": "application/merge-patch+json"}
        response = client.patch(path + "/status", json=body, headers=headers)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"type", "message", "object", "field", "status"}
