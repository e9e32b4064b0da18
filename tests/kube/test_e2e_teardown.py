"""The e2e suite leaves nothing behind on a bare API server: what it made in its namespace, its Events
about cluster-scoped objects in `default`, and the namespace itself, which no namespace controller
would ever take out of Terminating there."""

from __future__ import annotations

import warnings

import pytest

from e2e_k8s.conftest import remove_namespace, run_namespace
from gpufleet.kube.transport import ApiError

from .fakeapi import FakeApiServer
from .fixtures import pod

RUN = "abc123"
NS = f"gpufleet-e2e-{RUN}"


def event(name: str, involved: dict[str, str], namespace: str = "default") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved,
        "reason": "Test",
        "message": "m",
    }


def what_the_run_makes(api: FakeApiServer) -> None:
    """What a run's tests and the gpufleet components they start leave in its namespace."""
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    api.request("POST", leases, body={"metadata": {"name": f"gpufleet-e2e-{RUN}"}, "spec": {}})
    api.request(
        "POST", f"/api/v1/namespaces/{NS}/configmaps", body={"metadata": {"name": "gpufleet-sharing-p"}}
    )
    api.request("POST", f"/api/v1/namespaces/{NS}/services", body={"metadata": {"name": "tj"}, "spec": {}})
    body = event("tj.1", {"kind": "Pod", "name": "tj-0-0", "namespace": NS}, NS)
    api.request("POST", f"/api/v1/namespaces/{NS}/events", body=body)
    # A bound pod deleted gracefully stays on a bare server (no kubelet finishes it).
    bound = pod("tj-0-0", namespace=NS)
    bound["spec"]["nodeName"] = f"e2e-{RUN}-n1"
    api.put(f"/api/v1/namespaces/{NS}/pods", bound)
    job = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "tj"},
        "spec": {"queue": "q", "replicas": 1, "worker": {"gpus": 1}},
    }
    api.request("POST", f"/apis/gpufleet.io/v1alpha1/namespaces/{NS}/trainingjobs", body=job)
    # Events about the run's Nodes and Queue live in default; someone else's stay.
    events = "/api/v1/namespaces/default/events"
    api.request("POST", events, body=event("n1.1", {"kind": "Node", "name": f"e2e-{RUN}-n1"}))
    api.request("POST", events, body=event("q.1", {"kind": "Queue", "name": f"e2e-{RUN}"}))
    api.request("POST", events, body=event("other.1", {"kind": "Node", "name": "gpu-7"}))


def left_in(api: FakeApiServer, namespace: str) -> list[str]:
    return [
        f"{key}: {name}"
        for key, table in api.objects.items()
        for (ns, name), _ in table.items()
        if ns == namespace or (key == "/v1/namespaces" and name == namespace)
    ]


def test_a_deleted_namespace_stays_terminating_with_its_content_on_a_bare_server(api: FakeApiServer) -> None:
    """The stand-in as a bare API server: what the suite's teardown once was (the namespace deleted,
    nothing else) leaves the namespace Terminating for good, with everything in it."""
    api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    what_the_run_makes(api)
    api.request("DELETE", f"/api/v1/namespaces/{NS}")
    namespace = api.get(f"/api/v1/namespaces/{NS}")
    assert namespace["status"]["phase"] == "Terminating" and namespace["spec"]["finalizers"] == ["kubernetes"]
    assert len(left_in(api, NS)) == 7
    with pytest.raises(ApiError) as refused:
        api.request("POST", f"/api/v1/namespaces/{NS}/configmaps", body={"metadata": {"name": "late"}})
    assert refused.value.status == 403


def test_the_suites_teardown_leaves_nothing_of_the_run(api: FakeApiServer) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning is what the teardown says about leftovers
        with run_namespace(api, NS, run=RUN):
            assert api.get(f"/api/v1/namespaces/{NS}/serviceaccounts/default")
            what_the_run_makes(api)
    assert left_in(api, NS) == []
    remaining = [e["involvedObject"]["name"] for e in api.objects["/v1/events"].values()]
    assert remaining == ["gpu-7"]


def test_a_namespace_with_finalizers_of_its_own_is_reported_not_forced(api: FakeApiServer) -> None:
    body = {"metadata": {"name": NS, "finalizers": ["example.com/hold"]}}
    api.request("POST", "/api/v1/namespaces", body=body)
    left = remove_namespace(api, NS, timeout=1.0)
    assert left == [f"namespace {NS} (Terminating)"]
    assert api.get(f"/api/v1/namespaces/{NS}")["spec"]["finalizers"] == []


@pytest.mark.parametrize("sign", ["root-ca", "lease"])
def test_where_a_controller_manager_runs_the_namespace_is_never_finalized(
    api: FakeApiServer, sign: str
) -> None:
    # The namespace controller's pass over every resource type can take long on a real cluster;
    # finalizing under it would orphan what it has not deleted yet.
    api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    if sign == "root-ca":
        path = f"/api/v1/namespaces/{NS}/configmaps"
        api.request("POST", path, body={"metadata": {"name": "kube-root-ca.crt"}})
    else:
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "kube-system"}})
        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        api.request("POST", leases, body={"metadata": {"name": "kube-controller-manager"}, "spec": {}})
    left = remove_namespace(api, NS, timeout=1.0)
    assert left and left[0] == f"namespace {NS} (Terminating)"
    assert api.get(f"/api/v1/namespaces/{NS}")["spec"].get("finalizers") != []
