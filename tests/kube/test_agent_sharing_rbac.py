"""The agent's access to its pool's sharing ConfigMap: least privilege, in the manifests and the chart."""

from __future__ import annotations

import threading
import time

import pytest

from gpufleet.kube.agent_config import SharingConfigWatcher
from gpufleet.kube.manifests import AGENT_SHARING_RULES, render_all, values_from

from .fakeapi import FakeApiServer
from .test_fleet import MERGE
from .test_manifests import by_key, helm
from .test_scheduler import add_node


def verbs(role: dict) -> set[tuple[str, str]]:
    return {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}


def test_the_agent_reads_configmaps_only_in_gpufleets_namespace_and_writes_node_events_in_default() -> None:
    objects = by_key(render_all(values_from({"namespace": "gpu"})))
    account = [{"kind": "ServiceAccount", "name": "gpufleet-agent", "namespace": "gpu"}]
    role = objects[("Role", "gpufleet-agent-sharing-config")]
    assert role["metadata"]["namespace"] == "gpu"
    # Only what the agent does: it lists its ConfigMap by name and watches it, and never gets one.
    assert verbs(role) == {("configmaps", "list"), ("configmaps", "watch")}
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


def test_the_agents_requests_for_its_config_map_are_what_its_role_grants(api: FakeApiServer) -> None:
    """The watcher through a missing ConfigMap, its creation and an edit: every ConfigMap request is
    a verb AGENT_SHARING_RULES grants (a list by name answers for a missing one too)."""
    labels = {"gpufleet.io/sharing-config": "gpufleet-sharing-a", "nvidia.com/device-plugin.config": "mps-2"}
    add_node(api, "n1", labels=labels)
    told: list[object] = []
    watcher = SharingConfigWatcher(api, "n1", "gpu", told.append, resync=0.5)
    stop = threading.Event()
    watcher.start(stop)
    try:
        collection = "/api/v1/namespaces/gpu/configmaps"
        deadline = time.monotonic() + 5
        while not watcher.polls and time.monotonic() < deadline:  # it has read the ConfigMap missing
            time.sleep(0.02)
        assert watcher.polls and not told
        api.request(
            "POST", collection, body={"metadata": {"name": "gpufleet-sharing-a"}, "data": {"mps-2": "x"}}
        )
        deadline = time.monotonic() + 5
        while not told and time.monotonic() < deadline:
            time.sleep(0.02)
        api.request(
            "PATCH", f"{collection}/gpufleet-sharing-a", body={"data": {"mps-2": "y"}}, content_type=MERGE
        )
        while len(told) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
    assert len(told) == 2
    used = set()
    for method, path in api.requests:
        if "/configmaps" in path and method != "POST" and method != "PATCH":
            item = not path.endswith("/configmaps")
            used.add({"WATCH": "watch", "GET": "get" if item else "list"}[method])
    granted = {
        verb for _, resources, verbs, _ in AGENT_SHARING_RULES if "configmaps" in resources for verb in verbs
    }
    assert used == {"list", "watch"} and used <= granted
