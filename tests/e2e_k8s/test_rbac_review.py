"""The federation's roles as the API server's own authorizer sees them (no test name here says
"federation": the conftest lets such tests run without KUBECONFIG, for test_federation.py).

`gpufleet manifests all`'s RBAC for a manager cluster and a worker cluster is created in the cluster
(its ServiceAccounts in a namespace of the run), and every request the federation's flows make
(recorded per identity by tests/kube/test_federation_rbac.py on in-memory API servers) is put to the
API server as a SubjectAccessReview for the ServiceAccount that makes it: each must be allowed. A few
requests each identity must not make are refused. Every object of both (Deployments included) passes a
server-side dry run. A cluster that has gpufleet's roles already (a real installation) is left alone:
the tests are skipped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from gpufleet.kube.manifests import render_all, values_from
from gpufleet.kube.transport import ApiError, Json, Transport
from kube.test_federation_rbac import SYSTEM, Request, federation_requests

from .conftest import RUN, run_namespace, wait_for

pytestmark = pytest.mark.k8s

NS = f"gpufleet-e2e-rbac-{RUN}"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
APPLY = "application/apply-patch+yaml"
COLLECTIONS = {
    "ServiceAccount": f"/api/v1/namespaces/{NS}/serviceaccounts",
    "Role": f"{RBAC}/namespaces/{NS}/roles",
    "RoleBinding": f"{RBAC}/namespaces/{NS}/rolebindings",
    "ClusterRole": f"{RBAC}/clusterroles",
    "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
}


def _rendered() -> list[Json]:
    """Everything of a manager cluster and of a worker, in the run's namespace."""
    manager = values_from(
        {
            "namespace": NS,
            "installCRDs": False,
            "scheduler": {"enabled": False},
            "agent": {"enabled": False},
            "federation": {
                "manager": {
                    "enabled": True,
                    "kubeconfigSecretNamespace": NS,
                    "workers": ["w1", "w2"],
                    "kubeconfigSecrets": ["w1-kubeconfig", "w2-kubeconfig"],
                }
            },
        }
    )
    worker = values_from(
        {"namespace": NS, "installCRDs": False, "agent": {"enabled": False},
         "federation": {"worker": {"clusterName": "w1"}}}
    )  # fmt: skip
    return [*render_all(manager), *render_all(worker)]


def _objects() -> list[Json]:
    """The manager cluster's and a worker's RBAC, their ServiceAccounts in the run's namespace."""
    return [o for o in _rendered() if o["kind"] in COLLECTIONS]


@pytest.fixture(scope="module")
def installed(api: Transport) -> Iterator[None]:
    with run_namespace(api, NS), contextlib.ExitStack() as made:
        for obj in _objects():
            path = COLLECTIONS[obj["kind"]]
            try:
                api.request("POST", path, body=obj)
            except ApiError as exc:
                if exc.status == 409 and obj["kind"].startswith("Cluster"):
                    pytest.skip(f"the cluster has gpufleet's {obj['kind']} {obj['metadata']['name']} already")
                if exc.status != 409:  # the worker's and the manager's render share the namespace's objects
                    raise
                continue
            made.callback(_forget, api, f"{path}/{obj['metadata']['name']}")
        yield


def _forget(api: Transport, path: str) -> None:
    with contextlib.suppress(ApiError):
        api.request("DELETE", path)


def _in_run(namespace: str | None) -> str | None:
    return NS if namespace == SYSTEM else namespace


def allowed(api: Transport, account: tuple[str, str], req: Request) -> bool:
    """The API server's answer: may this ServiceAccount (moved into the run's namespace) do it?"""
    namespace = _in_run(account[0])
    resource, _, subresource = req.resource.partition("/")
    attributes: Json = {"verb": req.verb, "group": req.group, "resource": resource}
    if subresource:
        attributes["subresource"] = subresource
    if req.namespace:
        attributes["namespace"] = _in_run(req.namespace)
    if req.name:
        attributes["name"] = req.name
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{account[1]}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": attributes,
        },
    }
    answer = api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool((answer.get("status") or {}).get("allowed"))


def test_every_request_of_the_flows_is_allowed_by_the_api_servers_authorizer(
    api: Transport, installed: None
) -> None:
    made = sorted(set(federation_requests()), key=str)
    first_who, first = made[0]
    wait_for("the roles reach the authorizer", lambda: allowed(api, first_who, first), timeout=30)
    refused = [f"{who[1]}: {req}" for who, req in made if not allowed(api, who, req)]
    assert not refused
    assert {who[1] for who, _ in made} == {
        "gpufleet-manager",
        "gpufleet-worker-w1",
        "gpufleet-worker-w2",
        "gpufleet-federation-manager",
        "gpufleet-scheduler",
    }


@pytest.mark.parametrize(
    ("account", "req"),
    [
        ("gpufleet-worker-w1", Request("patch", "gpufleet.io", "clusters/status", None, "w2")),
        ("gpufleet-worker-w1", Request("list", "gpufleet.io", "clusters", None, None)),
        ("gpufleet-manager", Request("list", "", "secrets", SYSTEM, None)),
        ("gpufleet-manager", Request("get", "", "secrets", SYSTEM, "other")),
        ("gpufleet-manager", Request("delete", "gpufleet.io", "trainingjobs", "team", "train")),
        ("gpufleet-federation-manager", Request("patch", "gpufleet.io", "trainingjobs", "team", "train")),
        ("gpufleet-federation-manager", Request("get", "", "secrets", "team", "any")),
    ],
    # No id names the federation: the conftest runs such tests without KUBECONFIG (test_federation.py's).
    ids=[
        "worker-reports-another",
        "worker-lists-clusters",
        "manager-lists-secrets",
        "manager-reads-another-secret",
        "manager-deletes-work",
        "access-patches-copies",
        "access-reads-secrets",
    ],
)
def test_what_an_identity_must_not_do_is_refused(
    api: Transport, installed: None, account: str, req: Request
) -> None:
    ok = Request("patch", "gpufleet.io", "clusters/status", None, "w1")
    wait_for("the roles reach the authorizer", lambda: allowed(api, (SYSTEM, "gpufleet-worker-w1"), ok))
    assert not allowed(api, (SYSTEM, account), req)


def test_every_object_of_a_manager_cluster_and_a_worker_passes_a_server_side_dry_run(
    api: Transport, installed: None
) -> None:
    """`kubectl apply --server-side --dry-run=server`: the API server validates and defaults each object
    (the Deployments with their volumes, the roles with their resourceNames) and stores nothing."""
    checked = []
    for obj in _rendered():
        path = f"{_collection(obj)}/{obj['metadata']['name']}"
        query = {"dryRun": "All", "fieldManager": "gpufleet-e2e", "force": "true"}
        api.request("PATCH", path, query=query, body=obj, content_type=APPLY)
        checked.append(obj["kind"])
    assert {"Namespace", "Deployment", "ClusterRole", "Role", "ServiceAccount", "Service"} <= set(checked)


def _collection(obj: Json) -> str:
    """Where a rendered object lives."""
    group_version, kind = obj["apiVersion"], obj["kind"]
    if kind in COLLECTIONS:
        return COLLECTIONS[kind]
    if kind == "Namespace":
        return "/api/v1/namespaces"
    plural = {"Deployment": "deployments", "Service": "services", "DaemonSet": "daemonsets"}[kind]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    return f"{prefix}/namespaces/{NS}/{plural}"
