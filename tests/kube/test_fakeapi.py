"""The stand-in answers as a real API server does where gpufleet's code could otherwise be fooled."""

from __future__ import annotations

import pytest

from gpufleet.kube.transport import MERGE_PATCH, ApiError

from .fakeapi import FakeApiServer

LOADS = "/apis/gpufleet.io/v1alpha1/namespaces/ns/serviceloads"


def test_a_custom_resource_without_its_crd_is_not_found() -> None:
    api = FakeApiServer(crds=False)
    with pytest.raises(ApiError) as caught:
        api.request("GET", LOADS)
    assert caught.value.status == 404
    assert FakeApiServer().request("GET", LOADS)["items"] == []


def test_fields_the_crd_does_not_declare_are_pruned() -> None:
    api = FakeApiServer()
    spec = {"requestsPerSecond": 1, "p99LatencyMs": 2, "readyReplicas": 0, "time": "2026-11-29T12:00:00Z"}
    body = {"metadata": {"name": "s"}, "spec": {**spec, "typo": 1}, "extra": True}
    created = api.request("POST", LOADS, body=body)
    assert created["spec"] == spec and "extra" not in created
    status = {
        "status": {"season": {"3": 1.5}, "unknown": 1, "pendingReason": {"type": "X", "details": {"a": 1}}}
    }
    written = api.request("PATCH", f"{LOADS}/s/status", body=status, content_type=MERGE_PATCH)
    assert written["status"] == {"season": {"3": 1.5}, "pendingReason": {"type": "X", "details": {"a": 1}}}


def test_an_eviction_writes_its_own_disruption_condition_and_a_bound_pod_waits_for_its_kubelet() -> None:
    api = FakeApiServer()
    pods = "/api/v1/namespaces/ns/pods"
    api.request("POST", pods, body={"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": []}})
    api.request("POST", f"{pods}/p/eviction", body={"deleteOptions": {"gracePeriodSeconds": 5}})
    pod = api.request("GET", f"{pods}/p")
    (target,) = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert target["reason"] == "EvictionByEvictionAPI" and pod["metadata"]["deletionTimestamp"]
    patch = {"status": {"conditions": [{**target, "reason": "Mine"}]}}
    api.request("PATCH", f"{pods}/p/status", body=patch, content_type=MERGE_PATCH)
    assert api.request("GET", f"{pods}/p")["status"]["conditions"][0]["reason"] == "Mine"


def test_a_custom_resource_its_schema_refuses_is_invalid() -> None:
    api = FakeApiServer()
    jobs = "/apis/gpufleet.io/v1alpha1/namespaces/ns/trainingjobs"
    with pytest.raises(ApiError) as caught:
        api.request("POST", jobs, body={"metadata": {"name": "j"}, "spec": {"replicas": 0, "worker": {}}})
    assert caught.value.status == 422 and "spec.replicas" in caught.value.message


def test_a_watch_with_a_label_selector_sees_objects_enter_and_leave_the_selection() -> None:
    api = FakeApiServer()
    pods = "/api/v1/namespaces/ns/pods"
    start = api.request("GET", pods)["metadata"]["resourceVersion"]
    api.request("POST", pods, body={"metadata": {"name": "p"}, "spec": {"containers": []}})
    for labels in ({"gpufleet.io/job": "j"}, {"gpufleet.io/job": "j", "x": "1"}, {"gpufleet.io/job": None}):
        api.request("PATCH", f"{pods}/p", body={"metadata": {"labels": labels}}, content_type=MERGE_PATCH)
    query = {"resourceVersion": start, "labelSelector": "gpufleet.io/job", "timeoutSeconds": 0}
    seen = [line["type"] for line in api.watch(pods, query=query, timeout=0)]
    assert seen == ["ADDED", "MODIFIED", "DELETED"]
