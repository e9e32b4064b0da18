"""The agent's access to its pool's sharing ConfigMap: least privilege, in the manifests and the chart."""

from __future__ import annotations

import pytest

from gpufleet.kube.manifests import render_all, values_from

from .test_manifests import by_key, helm


def verbs(role: dict) -> set[tuple[str, str]]:
    return {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}


def test_the_agent_reads_configmaps_and_writes_events_only_in_gpufleets_namespace() -> None:
    objects = by_key(render_all(values_from({"namespace": "gpu"})))
    role = objects[("Role", "gpufleet-agent-sharing-config")]
    assert role["metadata"]["namespace"] == "gpu"
    assert verbs(role) == {
        ("configmaps", "get"),
        ("configmaps", "list"),
        ("configmaps", "watch"),
        ("events", "create"),
    }
    assert "sharing-config label names" in role["metadata"]["annotations"]["gpufleet.io/rbac-reasons"]
    binding = objects[("RoleBinding", "gpufleet-agent-sharing-config")]
    assert binding["roleRef"]["name"] == "gpufleet-agent-sharing-config"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpufleet-agent", "namespace": "gpu"}]
    # Cluster-wide, the agent still only reads and labels Nodes (its own: it names it).
    assert verbs(objects[("ClusterRole", "gpufleet-agent")]) == {("nodes", "get"), ("nodes", "patch")}
    args = objects[("DaemonSet", "gpufleet-agent")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--sharing-config" in args and "--sharing-namespace=gpu" in args


@pytest.mark.parametrize("follow", [True, False])
def test_the_chart_renders_the_same_agent_objects(follow: bool) -> None:
    values = values_from({"agent": {"sharingConfig": follow}})
    rendered = by_key(render_all(values))
    assert helm(values.as_dict()) == rendered
    args = rendered[("DaemonSet", "gpufleet-agent")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (("Role", "gpufleet-agent-sharing-config") in rendered) is follow
    assert ("--no-sharing-config" in args) is not follow
