"""Applies the node agent's GPU labels to its Node object (the agent itself may not use the client)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes import config as _config

config: Any = _config  # the client's loaders are unannotated
LabelPatch = Callable[[Mapping[str, str], Mapping[str, str]], Mapping[str, str | None]]


def _core_api() -> Any:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CoreV1Api()


def node_labeler(patch_for: LabelPatch) -> Callable[[str, Mapping[str, str]], None]:
    """A function that merge-patches a Node's labels with `patch_for(labels, current labels)`.

    The patch rules (which labels are new, which stale ones to remove) stay with the agent, in
    `gpufleet.agent.labels.node_label_patch`; this module only reads and patches the Node.
    """
    api: Any = None

    def apply(node_name: str, labels: Mapping[str, str]) -> None:
        nonlocal api
        if api is None:
            api = _core_api()
        current = api.read_node(node_name).metadata.labels or {}
        patch = dict(patch_for(labels, current))
        if patch:
            api.patch_node(node_name, {"metadata": {"labels": patch}})

    return apply
