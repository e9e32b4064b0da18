"""A GPUPool's sharing configuration as the GPU stack reads it: one ConfigMap per pool.

NVIDIA's GPU Operator applies time-slicing and MPS through the device plugin's config (a ConfigMap of
named configs; the node label `nvidia.com/device-plugin.config` picks one) and MIG through mig-parted's
config (the label `nvidia.com/mig.config` picks one). For each pool that shares its GPUs the operator
keeps the ConfigMap `gpufleet-sharing-<pool>` in its own namespace, holding the named config its
nodes' labels pick:

- time-slicing / MPS: under the device-plugin label's value (`time-slicing-N`, `mps-N`), a config in the
  device plugin's format (`version: v1`, `sharing.timeSlicing|mps.resources`), which gpufleet's node
  agent reads too (`gpufleet.agent.config`);
- MIG: under the mig.config label's value (`all-PROFILE`, `gpufleet-POOL`), a mig-parted config
  (`version: v1`, `mig-configs`) with the pool's layout. The agent checks the node against it; NVIDIA's
  MIG manager does not read it: it reads the one ConfigMap its ClusterPolicy names (key `config.yaml`),
  whose stock entries cover `all-PROFILE`, so a `gpufleet-POOL` entry has to be merged into that one
  (README, Kubernetes: MIG pools and NVIDIA's MIG manager).

The pool's nodes are labelled `gpufleet.io/sharing-config=<ConfigMap name>`, so a node's config is
found from its labels alone. The ConfigMap is owned by the pool (a real cluster's garbage collector
removes it with the pool); the operator also removes it itself when the pool stops sharing or is gone,
since a bare API server collects nothing. What is left to remove is found again from the ConfigMaps
themselves (`sharing_pools`) when the operator starts, so a pool deleted while no operator ran, or
while its nodes were being relabelled when the operator stopped, does not leave its ConfigMap behind.

A node's labels never name an entry the ConfigMap lacks, as far as the operator can help it: when the
pool's sharing changes, the ConfigMap is first written with the new entries while it keeps those some
node's labels still pick (`in_use`), then the nodes are relabelled, and only then are the entries no
node picks dropped (and the ConfigMap deleted once no node picks any). A node agent that reads its
Node's labels between those writes finds what they name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import yaml

from gpufleet.api.labels import POOL_LABEL
from gpufleet.api.numerals import plain_digits
from gpufleet.kube.config import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    SHARING_CONFIG_LABEL,
)
from gpufleet.kube.resources import ResourceType
from gpufleet.kube.transport import ApiError, Json, Transport

CONFIG_MAP = ResourceType("ConfigMap", "", "v1", "configmaps", True)
GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
CONFIG_MAP_PREFIX = "gpufleet-sharing-"


def config_map_name(pool: str) -> str:
    return f"{CONFIG_MAP_PREFIX}{pool}"


def sharing_pools(config_maps: Iterable[Json]) -> set[str]:
    """The pools whose sharing ConfigMap is among `config_maps`: those named `gpufleet-sharing-<pool>`
    and labelled as gpufleet's (a ConfigMap someone else named so is left alone)."""
    pools: set[str] = set()
    for config_map in config_maps:
        meta = config_map.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = str(meta.get("name") or "")
        if all(labels.get(k) == v for k, v in MANAGED_BY.items()) and name.startswith(CONFIG_MAP_PREFIX):
            pools.add(name[len(CONFIG_MAP_PREFIX) :])
    return pools


def named_configs(pool: Json, labels: dict[str, str]) -> dict[str, str]:
    """The named configs (name -> YAML) a pool's nodes pick with `labels`; empty for exclusive GPUs."""
    sharing = (pool.get("spec") or {}).get("sharing") or {}
    configs: dict[str, str] = {}
    for section in ("timeSlicing", "mps"):
        if sharing.get(section) and DEVICE_PLUGIN_CONFIG_LABEL in labels:
            replicas = int(sharing[section]["replicas"])
            document = {
                "version": "v1",
                "sharing": {section: {"resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}},
            }
            configs[labels[DEVICE_PLUGIN_CONFIG_LABEL]] = _dump(document)
    if sharing.get("mig") and MIG_CONFIG_LABEL in labels:
        name = labels[MIG_CONFIG_LABEL]
        gpus = int((pool.get("spec") or {}).get("gpusPerNode") or 0)
        entries = mig_parted_entries(sharing["mig"], gpus)
        configs[name] = _dump({"version": "v1", "mig-configs": {name: entries}})
    return configs


def mig_parted_entries(layout: dict[str, list[str]], gpus: int) -> list[Json]:
    """mig-parted's entries for a pool layout: a GPU index -> the profiles of its instances, and `*`
    for every GPU not listed (as the scheduler reads the layout), so no GPU is in two entries."""
    listed = sorted(int(k) for k in layout if plain_digits(k))
    entries = []
    if "*" in layout:
        rest = [gpu for gpu in range(gpus) if gpu not in listed]
        if not listed or rest:
            entries.append(_entry("all" if not listed else rest, layout["*"]))
    entries += [_entry([gpu], layout[str(gpu)]) for gpu in listed]
    return entries


def _entry(devices: Any, profiles: list[str]) -> Json:
    counts: dict[str, int] = {}
    for profile in profiles:
        counts[profile] = counts.get(profile, 0) + 1
    return {"devices": devices, "mig-enabled": True, "mig-devices": counts}


def desired_config_map(pool: Json, labels: dict[str, str], namespace: str) -> Json | None:
    """The ConfigMap the pool should have, or None when its GPUs are not shared."""
    configs = named_configs(pool, labels)
    if not configs:
        return None
    meta = pool["metadata"]
    owner = {
        "apiVersion": pool.get("apiVersion", "gpufleet.io/v1alpha1"),
        "kind": "GPUPool",
        "name": meta["name"],
        "uid": meta.get("uid"),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(meta["name"]),
            "namespace": namespace,
            "labels": {POOL_LABEL: meta["name"], **MANAGED_BY},
            "ownerReferences": [owner] if owner["uid"] else [],
        },
        "data": configs,
    }


def picked_keys(nodes: Iterable[Json], name: str) -> set[str]:
    """The entries of the ConfigMap `name` that the nodes' labels pick (the device-plugin and
    mig.config labels of nodes whose `gpufleet.io/sharing-config` names it)."""
    keys: set[str] = set()
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(SHARING_CONFIG_LABEL) == name:
            keys |= {labels[k] for k in (DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL) if labels.get(k)}
    return keys


def sync_config_map(
    api: Transport,
    pool_name: str,
    wanted: Json | None,
    namespace: str,
    *,
    in_use: Callable[[], set[str]] = set,
) -> set[str]:
    """Creates, replaces or deletes the pool's ConfigMap so it holds `wanted`'s entries (None: none at
    all), keeping the entries it has that `in_use()` says some node's labels still pick: those go, and
    the ConfigMap with the last of them, at a later call once the nodes are relabelled. `in_use` is
    asked only when there is something to drop. Returns the entries kept beyond `wanted`."""
    path = CONFIG_MAP.item(config_map_name(pool_name), namespace)
    try:
        current: Json | None = api.request("GET", path)
    except ApiError as exc:
        if exc.status != 404:
            raise
        current = None
    if current is None:
        if wanted is not None:
            try:
                api.request("POST", CONFIG_MAP.collection(namespace), body=wanted)
            except ApiError as exc:
                if exc.status != 409:  # made meanwhile: the next round compares it
                    raise
        return set()
    have: dict[str, str] = current.get("data") or {}
    wanted_data: dict[str, str] = wanted["data"] if wanted is not None else {}
    extra = set(have) - set(wanted_data)
    kept = {k: have[k] for k in sorted(extra & in_use())} if extra else {}
    if wanted is None and not kept:
        _delete(api, path)
        return set()
    meta = current["metadata"]
    labels = wanted["metadata"]["labels"] if wanted is not None else meta.get("labels") or {}
    data = {**kept, **wanted_data}
    same = have == data and all((meta.get("labels") or {}).get(k) == v for k, v in labels.items())
    if not same:
        base = wanted if wanted is not None else current
        body = {
            **base,
            "metadata": {**base["metadata"], "resourceVersion": meta["resourceVersion"]},
            "data": data,
        }
        api.request("PUT", path, body=body)  # a 409 (changed meanwhile) is retried by the operator
    return set(kept)


def _delete(api: Transport, path: str) -> None:
    try:
        api.request("DELETE", path)
    except ApiError as exc:
        if exc.status != 404:
            raise


def _dump(document: Json) -> str:
    return yaml.safe_dump(document, sort_keys=False)
