"""The agent's access to its pool's sharing ConfigMap: least privilege, in the manifests and the chart."""

from __future__ import annotations

import pytest

from gpufleet.kube.manifests import render_all, values_from

from .test_manifests import by_key, helm


def verbs(role: dict) -> set[tuple[str, str]]:
    return {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}


def test_the_agent_reads_configmaps_only_in_gpufleets_namespace_and_writes_node_events_in_default() -> None:
    objects = by_key(render_all(values_from({"namespace": "gpu"})))
    account = [{"kind": "ServiceAccount", "name": "gpufleet-agent", "namespace": "gpu"}]
    role = objects[("Role", "gpufleet-agent-sharing-config")]
    assert role["metadata"]["namespace"] == "gpu"
    assert verbs(role) == {("configmaps", "get"), ("configmaps", "list"), ("configmaps", "watch")}
    assert "sharing-config label names" in role["metadata"]["annotations"]["gpufleet.io/rbac-reasons"]
    binding = objects[("RoleBinding", "gpufleet-agent-sharing-config")]
    assert binding["roleRef"]["name"] == "gpufleet-agent-sharing-config" and binding["subjects"] == account
    # Events about a Node are refused by the API server anywhere but in default.
    events = objects[("Role", "gpufleet-agent-node-events")]
    assert events["metadata"]["namespace"] == "default" and verbs(events) == {("events", "create")}
    binding = objects[("RoleBinding", "gpufleet-agent-node-events")]
    assert binding["metadata"]["namespace"] == "default" and binding["subjects"] == account
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
    assert (("RoleBinding", "gpufleet-agent-node-events") in rendered) is follow
    assert ("--no-sharing-config" in args) is not follow
