"""The operator's Node work: GPUPool membership, spot interruption drains and GPU health.

GPUPool. A Node belongs to the first pool (by name) whose non-empty `spec.nodeSelector` its labels
match. The operator puts on it `gpufleet.io/pool`, `gpufleet.io/capacity-type`, the sharing
configuration (`nvidia.com/device-plugin.config: time-slicing-N | mps-N` for the NVIDIA device plugin,
`nvidia.com/mig.config: all-<profile> | gpufleet-<pool>` for the GPU operator's MIG manager, and
`gpufleet.io/sharing-config` naming the ConfigMap that holds those named configs, which the operator
writes per pool: `kube.sharing`; it holds the entries the labels pick before they pick them and keeps
the old ones until no node picks them, so the sharing ConfigMap is rewritten around the relabelling of
the pool's nodes, not in one go) and, on spot pools, the taint
`gpufleet.io/spot=true:NoSchedule`. What it applied is recorded in the `gpufleet.io/pool-applied`
annotation, so a node that leaves the pool loses exactly that. The pool's status counts its nodes,
ready nodes and GPUs.

Spot drain. A Node annotated `gpufleet.io/interruption-time` is cordoned and its pods evicted through
the Eviction API (disruption budgets apply; a refusal is retried), each with a `SpotInterruption`
Event and `DisruptionTarget` condition, and an Event on the Node.

Health. A Node whose allocatable `nvidia.com/gpu` (or a MIG resource) is below its capacity, that the
agent annotated with unhealthy GPUs, or that has the condition `GPUUnhealthy=True`, is cordoned and
drained the same way (`GPUUnhealthy`). Cordons the operator made carry `gpufleet.io/cordoned-by`;
only those are lifted, once the reason is gone. A node an administrator cordoned stays cordoned.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from gpufleet.api.labels import (
    CAPACITY_TYPE_LABEL,
    CORDONED_BY_ANNOTATION,
    POOL_LABEL,
    SPOT_TAINT,
    LabelSelector,
)
from gpufleet.kube.actions import Actions
from gpufleet.kube.config import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_HEALTH_CONDITION,
    INTERRUPTION_ANNOTATION,
    MIG_CONFIG_LABEL,
    POOL_APPLIED_ANNOTATION,
    SHARING_CONFIG_LABEL,
    UNHEALTHY_GPUS_ANNOTATION,
)
from gpufleet.kube.nodes import GPU_RESOURCE, MIG_PREFIX, ready
from gpufleet.kube.resources import NODE, POD, resource_for
from gpufleet.kube.sharing import (
    CONFIG_MAP,
    MANAGED_BY,
    config_map_name,
    desired_config_map,
    picked_keys,
    sharing_pools,
    sync_config_map,
)
from gpufleet.kube.status import OPERATOR, patch_status
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport
from gpufleet.observability import metrics
from gpufleet.sharing.mig import find_profile

log = logging.getLogger(__name__)

SPOT_REASON, HEALTH_REASON = "spot-interruption", "gpu-health"
RETRY_SECONDS = 5.0


# ----------------------------------------------------------------------------- pools
def pool_of(node: Json, pools: Sequence[Json]) -> Json | None:
    """The pool a node belongs to: the first by name whose non-empty nodeSelector it matches."""
    labels = node["metadata"].get("labels") or {}
    for pool in sorted(pools, key=lambda p: p["metadata"]["name"]):
        selector = (pool.get("spec") or {}).get("nodeSelector") or {}
        if selector and LabelSelector.parse(dict(selector)).matches(labels):
            return pool
    return None


def pool_labels(pool: Json) -> dict[str, str]:
    """The labels a pool puts on its nodes."""
    spec = pool.get("spec") or {}
    labels = {
        POOL_LABEL: pool["metadata"]["name"],
        CAPACITY_TYPE_LABEL: spec.get("capacityType", "on-demand"),
    }
    sharing = spec.get("sharing") or {}
    if sharing.get("timeSlicing"):
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = f"time-slicing-{sharing['timeSlicing']['replicas']}"
    elif sharing.get("mps"):
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = f"mps-{sharing['mps']['replicas']}"
    elif sharing.get("mig"):
        labels[MIG_CONFIG_LABEL] = _mig_config_name(
            pool["metadata"]["name"], spec.get("gpuModel"), sharing["mig"]
        )
    if DEVICE_PLUGIN_CONFIG_LABEL in labels or MIG_CONFIG_LABEL in labels:
        labels[SHARING_CONFIG_LABEL] = config_map_name(pool["metadata"]["name"])
    return labels


def _mig_config_name(pool: str, gpu_model: str | None, layout: dict[str, list[str]]) -> str:
    """NVIDIA's stock `all-P` entry when it makes exactly the pool's layout (every GPU filled with as
    many P instances as fit), else the pool's own entry: a pool with fewer P per GPU under `all-P`
    would get the stock full count from the MIG manager, not its own layout."""
    instances = layout.get("*") or []
    if set(layout) == {"*"} and len(set(instances)) == 1 and gpu_model:
        profile = find_profile(gpu_model, instances[0])
        if profile is not None and len(instances) == profile.max_count:
            return f"all-{profile.name}"
    return f"gpufleet-{pool}"


def pool_taints(pool: Json) -> list[Json]:
    if (pool.get("spec") or {}).get("capacityType") == "spot":
        return [{"key": SPOT_TAINT, "value": "true", "effect": "NoSchedule"}]
    return []


def _applied(node: Json) -> Json:
    raw = (node["metadata"].get("annotations") or {}).get(POOL_APPLIED_ANNOTATION)
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        parsed = {}
    return parsed if isinstance(parsed, dict) else {}


def _gpus(node: Json) -> int:
    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        return int(capacity.get(GPU_RESOURCE, 0))
    except (TypeError, ValueError):
        return 0


# ----------------------------------------------------------------------------- health
def unhealthy_reason(node: Json) -> str | None:
    """Why a node's GPUs are unhealthy, or None when they are not."""
    status = node.get("status") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    for name in sorted(capacity):
        if name != GPU_RESOURCE and not name.startswith(MIG_PREFIX):
            continue
        try:
            have, usable = int(capacity[name]), int(allocatable.get(name, capacity[name]))
        except (TypeError, ValueError):
            continue
        if usable < have:
            return f"{name}: {usable} of {have} allocatable"
    unhealthy = (node["metadata"].get("annotations") or {}).get(UNHEALTHY_GPUS_ANNOTATION)
    if unhealthy:
        return f"unhealthy GPUs {unhealthy} (agent)"
    for condition in status.get("conditions") or []:
        if condition.get("type") == GPU_HEALTH_CONDITION and condition.get("status") == "True":
            return f"{GPU_HEALTH_CONDITION}: {condition.get('message') or condition.get('reason') or 'set'}"
    return None


def _drainable(pod: Json) -> bool:
    """What `kubectl drain` evicts: not DaemonSet pods, mirror pods, finished or terminating pods."""
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class FleetOperator:
    """Applies pools to nodes, drains interrupted and unhealthy nodes, lifts its own cordons."""

    def __init__(
        self, api: Transport, *, grace_seconds: int | None = 30, namespace: str = "gpufleet-system"
    ) -> None:
        self.api = api
        self.namespace = namespace
        """Where the pools' sharing ConfigMaps live (the operator's own namespace)."""
        self.pools = resource_for("GPUPool")
        # Its drains and Events are the operator's, not the scheduler's.
        self.actions = Actions(api, identity=OPERATOR, grace_seconds=grace_seconds, component=OPERATOR)
        self._said: dict[str, str] = {}
        self._unwritten: set[str] = set()
        """Pools whose sharing ConfigMap could not be written yet: their nodes keep their labels."""

    def reconcile_pool(self, pool: Json, nodes: Sequence[Json], pools: Sequence[Json]) -> bool:
        """The pool's status from the nodes that belong to it, and its sharing ConfigMap: False while
        that keeps entries nodes' labels still pick (`sync_sharing` again once they are relabelled)."""
        name = pool["metadata"]["name"]
        metrics.record_pool(name, float((pool.get("spec") or {}).get("pricePerGPUHour") or 0.0))
        members = [n for n in nodes if (pool_of(n, pools) or {}).get("metadata", {}).get("name") == name]
        update = {
            "nodes": len(members),
            "readyNodes": sum(
                1 for n in members if ready(n) and not (n.get("spec") or {}).get("unschedulable")
            ),
            "gpus": sum(_gpus(n) for n in members),
            "observedGeneration": pool["metadata"].get("generation"),
        }
        # The ConfigMap first: a round whose write fails leaves the nodes' labels alone (`_unwritten`).
        settled = self.sync_sharing(name, pool)
        patch_status(self.api, self.pools, pool, update)
        return settled

    def forget_pool(self, name: str) -> bool:
        """A deleted pool's sharing ConfigMap goes too (no garbage collector may be running), once no
        node's labels pick from it: False until then."""
        metrics.forget_pool(name)
        return self.sync_sharing(name, None)

    def sync_sharing(self, name: str, pool: Json | None) -> bool:
        """Writes the pool's sharing ConfigMap (`pool` None: the pool is gone) with the entries its
        nodes' labels will pick and those they still pick; True once it holds only the former."""
        wanted = desired_config_map(pool, pool_labels(pool), self.namespace) if pool is not None else None
        try:
            kept = sync_config_map(self.api, name, wanted, self.namespace, in_use=lambda: self._picked(name))
        except ApiError as exc:
            if exc.retryable or exc.status == 409:
                self._unwritten.add(name)
                raise  # the operator tries the pool again
            # e.g. the namespace is missing or RBAC forbids it: say so, and go on with the nodes
            log.warning("GPUPool %s: sharing ConfigMap in %s not written: %s", name, self.namespace, exc)
            kept = set()
        self._unwritten.discard(name)
        if kept:
            log.info("GPUPool %s: sharing entries %s kept while nodes still pick them", name, sorted(kept))
        return not kept

    def gone_pools(self, known: set[str]) -> list[str]:
        """The pools, none of them in `known`, that have a sharing ConfigMap in the operator's namespace
        but no GPUPool any more, asked of the API server (an informer may not have seen a new pool
        yet). Their ConfigMaps are what an operator that stopped before removing them left behind
        (`forget_pool` removes them)."""
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        found = self.api.request(
            "GET", CONFIG_MAP.collection(self.namespace), query={"labelSelector": selector}
        )
        gone = []
        for name in sorted(sharing_pools(found.get("items") or []) - known):
            try:
                self.api.request("GET", self.pools.item(name))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                gone.append(name)
        return gone

    def _picked(self, pool_name: str) -> set[str]:
        """The entries of the pool's ConfigMap some Node's labels pick, read from the API server (the
        informer's copies may not have the labels this round wrote)."""
        name = config_map_name(pool_name)
        found = self.api.request(
            "GET", NODE.collection(), query={"labelSelector": f"{SHARING_CONFIG_LABEL}={name}"}
        )
        return picked_keys(found.get("items") or [], name)

    def reconcile_node(self, node: Json, pools: Sequence[Json], *, now: float) -> float | None:
        """Pool labels and taints, then cordon and drain (or uncordon); when to look again, if ever."""
        pool = pool_of(node, pools)
        again: float | None = None
        if pool is not None and pool["metadata"]["name"] in self._unwritten:
            # Its labels would pick entries the ConfigMap may not have yet: after it is written.
            again = now + 1.0
        else:
            self._apply_pool(node, pool)
        later = self._health(node, now=now)
        return again if later is None else later if again is None else min(again, later)

    def _health(self, node: Json, *, now: float) -> float | None:
        """Cordon and drain (spot notice, unhealthy GPUs) or uncordon; when to look again, if ever."""
        name = node["metadata"]["name"]
        notice = (node["metadata"].get("annotations") or {}).get(INTERRUPTION_ANNOTATION)
        if notice:
            message = f"spot interruption notice: {notice}"
            return self._drain(node, SPOT_REASON, "SpotInterruption", message, now=now)
        sick = unhealthy_reason(node)
        if sick:
            message = f"node {name} GPUs unhealthy: {sick}"
            return self._drain(node, HEALTH_REASON, "GPUUnhealthy", message, now=now)
        self._uncordon(node)
        return None

    # ------------------------------------------------------------------ pools
    def _apply_pool(self, node: Json, pool: Json | None) -> None:
        meta = node["metadata"]
        before = _applied(node)
        labels = pool_labels(pool) if pool is not None else {}
        taints = pool_taints(pool) if pool is not None else []
        current_labels = meta.get("labels") or {}
        current_taints = (node.get("spec") or {}).get("taints") or []
        ours = {t["key"] for t in taints}
        stale = set(before.get("taints") or []) - ours
        new_taints = [t for t in current_taints if t["key"] not in stale and t["key"] not in ours] + taints
        label_patch: dict[str, str | None] = {k: None for k in before.get("labels") or [] if k not in labels}
        label_patch.update({k: v for k, v in labels.items() if current_labels.get(k) != v})
        record = {"labels": sorted(labels), "taints": sorted(ours)} if pool is not None else None
        if not label_patch and _same(new_taints, current_taints) and (record or {}) == before:
            return
        patch: Json = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "labels": label_patch,
                "annotations": {
                    POOL_APPLIED_ANNOTATION: json.dumps(record, sort_keys=True) if record else None
                },
            }
        }
        if not _same(new_taints, current_taints):
            patch["spec"] = {"taints": new_taints}
        self._patch_node(node, patch)

    # ------------------------------------------------------------- cordon, drain
    def _drain(self, node: Json, why: str, reason: str, message: str, *, now: float) -> float | None:
        """Cordons the node (marked as ours) and evicts its pods; look again while some remain."""
        name = node["metadata"]["name"]
        spec, annotations = node.get("spec") or {}, node["metadata"].get("annotations") or {}
        if not spec.get("unschedulable"):
            patch = {
                "metadata": {"annotations": {CORDONED_BY_ANNOTATION: why}},
                "spec": {"unschedulable": True},
            }
            self._patch_node(node, patch)
        elif annotations.get(CORDONED_BY_ANNOTATION) not in (None, why):
            self._patch_node(node, {"metadata": {"annotations": {CORDONED_BY_ANNOTATION: why}}})
        if self._said.get(name) != message:
            self.actions.event(
                {**node, "apiVersion": "v1", "kind": "Node"},
                reason=reason,
                message=f"cordoned and draining: {message}",
                type="Warning",
            )
            self._said[name] = message
        remaining = False
        for pod in self._pods_on(name):
            if _drainable(pod):
                # Refused by a disruption budget, or granted: either way, look again until it is gone.
                self.actions.evict(pod, reason=reason, message=message, event_reason=reason)
                remaining = True
            elif pod["metadata"].get("deletionTimestamp"):
                remaining = True
        return now + RETRY_SECONDS if remaining else None

    def _uncordon(self, node: Json) -> None:
        meta = node["metadata"]
        name = meta["name"]
        by = (meta.get("annotations") or {}).get(CORDONED_BY_ANNOTATION)
        if by not in (SPOT_REASON, HEALTH_REASON):
            return
        patch = {"metadata": {"annotations": {CORDONED_BY_ANNOTATION: None}}, "spec": {"unschedulable": None}}
        self._patch_node(node, patch)
        self._said.pop(name, None)
        self.actions.event(
            {**node, "apiVersion": "v1", "kind": "Node"},
            reason="Uncordoned",
            message=f"cordoned for {by}; healthy again",
        )

    def _pods_on(self, node: str) -> list[Json]:
        answer = self.api.request("GET", POD.collection(), query={"fieldSelector": f"spec.nodeName={node}"})
        items: list[Json] = answer.get("items") or []
        return items

    def _patch_node(self, node: Json, patch: Json) -> None:
        try:
            self.api.request(
                "PATCH", NODE.item(node["metadata"]["name"]), body=patch, content_type=MERGE_PATCH
            )
        except ApiError as exc:
            if exc.status != 404:
                raise


def _same(a: Sequence[Json], b: Sequence[Json]) -> bool:
    def key(t: Json) -> tuple[str, str, str]:
        return (t.get("key", ""), t.get("value", "") or "", t.get("effect", ""))

    return sorted(map(key, a)) == sorted(map(key, b))
