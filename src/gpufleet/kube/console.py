"""The web console's source in the Kubernetes world: the cluster read through the API server, in the
form the embedded world's console reads (`gpufleet.store.console`), so one builder serves both.

- Queues, TrainingJobs and InferenceServices are gpufleet's custom resources, read into their models
  as `KubeStore` reads them (their status is the scheduler's and the operator's: quota use,
  `pendingReason`, restarts).
- Nodes with GPUs become map nodes by the rule the scheduler reads them with (`kube.nodes.node_spec`:
  GPU count and model, sharing, unhealthy GPUs from the agent's annotation or the device plugin's
  allocatable, the `rack` topology level); their pool is the operator's `gpufleet.io/pool` label or the
  first GPUPool whose nodeSelector they match, and its price is theirs. Nodes without GPUs are left
  off the map.
- Bound, unfinished pods that ask for GPUs hold the GPUs gpufleet's binder noted on them
  (`gpufleet.io/gpus`); a pod another scheduler bound holds as many of the node's lowest free GPUs
  (the device plugin says which to the kubelet only). A pod's holder is the gpufleet object that owns
  it, else its gang, else the pod; its queue is its `gpufleet.io/queue` label
  (else the scheduler's default queue).
- A GPUPool's GPUs are its nodes' on the map, its allocated GPUs those their pods hold; its idle
  GPU-hours and their cost are what the operator keeps in its status (`kube.poolidle`).
- Loose work: our pods that no gpufleet object owns, while they wait, with the reason the scheduler
  wrote into their `PodScheduled` condition (`Type: message`), in describe's words.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from gpufleet.api import accounting
from gpufleet.api.errors import GpuFleetError, ValidationError
from gpufleet.api.kinds import kind_info
from gpufleet.api.labels import POOL_LABEL
from gpufleet.api.resource import GROUP, Resource
from gpufleet.api.runtime import RACK_LABEL
from gpufleet.fleet.node import SharingMode
from gpufleet.kube import pods as kube_pods
from gpufleet.kube.actions import parse_allocation_annotation
from gpufleet.kube.config import GANG_LABEL, QUEUE_LABEL, KubeConfig
from gpufleet.kube.fleet import pool_of, unhealthy_reason
from gpufleet.kube.informer import Informers, key_of
from gpufleet.kube.nodes import GPU_RESOURCE, node_spec, ready
from gpufleet.kube.resources import resource_for
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import Json, Transport
from gpufleet.store.console import Fleet

log = logging.getLogger(__name__)
_SHARING = {SharingMode.TIME_SLICING: "timeSlicing", SharingMode.MPS: "mps"}


WATCHED = ("Queue", "TrainingJob", "InferenceService", "GPUPool", "Node", "Pod")
"""What the console reads: gpufleet's kinds, then Nodes and Pods."""


class KubeConsoleSource:
    """What the console shows, read from one API server: from informers' caches once `watch` has
    started them (what `gpufleet kube console` does: the page asks every 1.5 s, and a list of every
    pod that often would weigh on the API server of a large cluster), else listed at each call."""

    def __init__(self, api: Transport, config: KubeConfig | None = None) -> None:
        self._api = api
        self._config = config or KubeConfig()
        self._informers: Informers | None = None

    def watch(self, stop: threading.Event, *, timeout: float = 60.0) -> bool:
        """Starts an informer per kind read; whether they all listed within `timeout` seconds."""
        informers = Informers(self._api)
        for kind in WATCHED:
            informers.informer(resource_for(kind))
        informers.start(stop)
        self._informers = informers
        return informers.wait_for_sync(timeout)

    def _items(self, kind: str) -> list[Json]:
        resource = resource_for(kind)
        if self._informers is not None:
            return self._informers.informer(resource).items()
        return list(self._api.request("GET", resource.collection()).get("items") or [])

    def resources(self, kind: str) -> Sequence[Resource]:
        info = kind_info(kind)
        if info is None:
            return []
        # The models KubeStore reads them into (metadata the API adds and the models lack left out).
        read = []
        for raw in self._items(kind):
            try:
                read.append(from_json(info, raw))
            except GpuFleetError as exc:
                # One object written with kubectl that its model refuses does not blank the page.
                log.warning("console: %s %s left out: %s", kind, key_of(raw), exc)
        return read

    def fleet(self) -> Fleet:
        pools = [p.to_dict() for p in self.resources("GPUPool")]
        nodes = [made for raw in self._items("Node") if (made := console_node(raw, pools, self._config))]
        raw_pods = self._items("Pod")
        pods = holding_pods(raw_pods, nodes, self._config)
        return Fleet(
            nodes=nodes,
            pods=pods,
            pools=[_with_use(pool, nodes, pods) for pool in pools],
            loose_work=[row for raw in raw_pods if (row := waiting_pod(raw, self._config)) is not None],
        )


def console_node(raw: Json, pools: Sequence[Json], config: KubeConfig) -> Json | None:
    """A Node with GPUs in the console's form; None for a node without GPUs."""
    meta = raw["metadata"]
    labels = meta.get("labels") or {}
    try:
        spec = node_spec(raw, config)
    except ValidationError:
        return None  # the scheduler leaves such a node out too (and logs why)
    if spec.gpus <= 0:
        return None
    pool = next((p for p in pools if p["metadata"]["name"] == labels.get(POOL_LABEL)), None)
    pool = pool or pool_of(raw, pools)
    pool_spec = (pool or {}).get("spec") or {}
    sharing: Json = {}
    if spec.sharing is SharingMode.MIG:
        sharing = {"mig": {str(gpu): list(layout) for gpu, layout in spec.mig_layouts.items()}}
    elif spec.sharing in _SHARING:
        sharing = {_SHARING[spec.sharing]: {"replicas": spec.replicas}}
    problem = unhealthy_reason(raw) or "unhealthy"
    rack = spec.labels.get(RACK_LABEL)
    return {
        "kind": "Node",
        "metadata": {"name": meta["name"], "labels": {RACK_LABEL: rack} if rack else {}},
        "spec": {
            "gpus": spec.gpus,
            "gpuModel": spec.gpu_model,
            "pool": None if pool is None else pool["metadata"]["name"],
            "pricePerGPUHour": float(pool_spec.get("pricePerGPUHour") or 0),
            "sharing": sharing,
            "unschedulable": bool((raw.get("spec") or {}).get("unschedulable")),
        },
        "status": {
            "phase": "Ready" if ready(raw) else "NotReady",
            "unhealthyGpus": [{"index": i, "message": problem} for i in spec.unhealthy_gpus],
        },
    }


def holding_pods(raw_pods: Sequence[Json], nodes: Sequence[Json], config: KubeConfig) -> list[Json]:
    """The pods that hold GPUs of the map's nodes, in the console's form."""
    on_map = {n["metadata"]["name"]: int(n["spec"]["gpus"]) for n in nodes}
    taken: dict[str, set[int]] = {name: set() for name in on_map}
    made: list[Json] = []
    unnoted: list[tuple[Json, int]] = []
    for raw in raw_pods:
        node = str((raw.get("spec") or {}).get("nodeName") or "")
        if node not in on_map or not kube_pods.holds_resources(raw):
            continue
        pod = _pod(raw, config)
        held = _noted(raw)
        if held:
            pod["spec"].update(held)
            taken[node].update(held.get("gpus") or [])
        else:
            whole = kube_pods.effective_requests(raw).get(GPU_RESOURCE, 0)
            if whole <= 0:
                continue
            unnoted.append((pod, whole))
        made.append(pod)
    for pod, whole in unnoted:
        node = pod["spec"]["nodeName"]
        free = [g for g in range(on_map[node]) if g not in taken[node]][:whole]
        pod["spec"]["gpus"] = free
        taken[node].update(free)
    return made


def _noted(raw: Json) -> Json:
    """What the binder noted the pod holds (`gpus` and `gpuMilli`, or a `mig` instance); {} for none,
    or for a note that is not one (then the pod counts as unnoted, as the scheduler's cache does)."""
    noted = parse_allocation_annotation(raw) or {}
    try:
        if noted.get("mig"):
            return {"mig": {"gpu": int(noted["mig"]["gpu"]), "profile": str(noted["mig"]["profile"])}}
        if noted.get("gpus"):
            return {"gpus": [int(g) for g in noted["gpus"]], "gpuMilli": int(noted.get("milli") or 1000)}
    except (KeyError, TypeError, ValueError):
        pass
    return {}


def _pod(raw: Json, config: KubeConfig) -> Json:
    meta, spec = raw["metadata"], raw.get("spec") or {}
    labels = meta.get("labels") or {}
    owner = _gpufleet_owner(raw)
    holder = owner["name"] if owner else labels.get(GANG_LABEL) or meta["name"]
    return {
        "kind": "Pod",
        "metadata": {"name": meta["name"], "namespace": meta.get("namespace") or ""},
        "spec": {
            "nodeName": spec["nodeName"],
            "workload": holder,
            "owner": owner or {},
            "queue": labels.get(QUEUE_LABEL, config.default_queue),
        },
        "status": {"phase": (raw.get("status") or {}).get("phase") or "Pending"},
    }


def _gpufleet_owner(raw: Json) -> Json | None:
    for ref in raw["metadata"].get("ownerReferences") or []:
        if str(ref.get("apiVersion", "")).startswith(f"{GROUP}/"):
            return {"kind": ref.get("kind"), "name": ref.get("name")}
    return None


def waiting_pod(raw: Json, config: KubeConfig) -> Json | None:
    """A pod of ours that no gpufleet object owns, as a work row's object while it waits; else None."""
    if not kube_pods.is_ours(raw, config) or kube_pods.is_bound(raw) or kube_pods.is_finished(raw):
        return None
    if _gpufleet_owner(raw) is not None or raw["metadata"].get("deletionTimestamp"):
        return None
    meta = raw["metadata"]
    status: Json = {"phase": "Pending"}
    for condition in (raw.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            kind, _, message = str(condition.get("message") or "").partition(": ")
            status["pendingReason"] = {"type": kind or str(condition.get("reason")), "message": message}
    return {
        "kind": "Pod",
        "metadata": {"name": meta["name"], "namespace": meta.get("namespace") or ""},
        "spec": {"queue": (meta.get("labels") or {}).get(QUEUE_LABEL, config.default_queue)},
        "status": status,
    }


def _with_use(pool: Json, nodes: Sequence[Json], pods: Sequence[Json]) -> Json:
    """The pool with its nodes' GPUs and those their pods hold now (as the map counts them, whether or
    not the operator has written its status yet)."""
    members = [n for n in nodes if n["spec"]["pool"] == pool["metadata"]["name"]]
    mine = {n["metadata"]["name"] for n in members}
    milli = sum(held_milli(pod["spec"]) for pod in pods if pod["spec"]["nodeName"] in mine)
    gpus = sum(int(n["spec"]["gpus"]) for n in members)
    status = dict(pool.get("status") or {}, gpus=gpus, allocatedGpuMilli=milli)
    if not status.get("idleCountedTime"):
        # The idle GPU-hours are the operator's (`kube.poolidle`); none counted yet: none shown.
        status.update(idleGpuHours=None, idleCost=None)
    return dict(pool, status=status)


def held_milli(spec: Json) -> int:
    """The milli-GPUs a console pod (`holding_pods`) holds, by `api.accounting.held_milli`."""
    mig = spec.get("mig")
    gpus, milli = len(spec.get("gpus") or []), int(spec.get("gpuMilli") or 1000)
    return accounting.held_milli(gpus=gpus, gpu_milli=milli, mig_profile=mig["profile"] if mig else None)
