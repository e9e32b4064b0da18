"""The builders every manifest module shares: object metadata, the chart's labels, and least-privilege
RBAC whose every rule carries its reason (`Rule`), put on each role as an annotation so
`kubectl describe` shows why each permission is there.

They live apart from `kube.manifests` so the manifests of each part of gpufleet (the scheduler and
agent there, the federation's in `kube.federation_manifests`) can be modules of their own.
"""

from __future__ import annotations

from gpufleet.kube.transport import Json

APP = "gpufleet"
WHY_ANNOTATION = "gpufleet.io/rbac-reasons"

Rule = tuple[str, tuple[str, ...], tuple[str, ...], str]
"""(API group, resources, verbs, why)."""


def labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": APP,
    }


def selector(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": component}


def meta(api_version: str, kind: str, name: str, namespace: str | None, component: str = "") -> Json:
    metadata: Json = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if component:
        metadata["labels"] = labels(component)
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def rules_of(rules: tuple[Rule, ...]) -> list[Json]:
    return [
        {"apiGroups": [group], "resources": list(res), "verbs": list(verbs)} for group, res, verbs, _ in rules
    ]


def reasons(rules: tuple[Rule, ...]) -> str:
    return "; ".join(f"{'/'.join(res)} {','.join(verbs)}: {why}" for _, res, verbs, why in rules)


def role(kind: str, name: str, namespace: str | None, component: str, rules: tuple[Rule, ...]) -> Json:
    obj = meta("rbac.authorization.k8s.io/v1", kind, name, namespace, component)
    obj["metadata"]["annotations"] = {WHY_ANNOTATION: reasons(rules)}
    obj["rules"] = rules_of(rules)
    return obj


def binding(
    kind: str, name: str, namespace: str | None, component: str, account: str, account_ns: str
) -> Json:
    obj = meta("rbac.authorization.k8s.io/v1", kind, name, namespace, component)
    role_kind = "ClusterRole" if kind == "ClusterRoleBinding" else "Role"
    obj["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name}
    obj["subjects"] = [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}]
    return obj


def locked_down() -> Json:
    """A container's securityContext when it needs nothing of the host."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security() -> Json:
    """The pod securityContext of gpufleet's control-plane processes."""
    return {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
