"""The GPUPool controller: the pool's nodes, their count, and what idle capacity costs.

Nodes. A pool owns Node objects named `{pool}-{i}`, labelled with the pool, the capacity type and
their place in the topology (`block`, `rack`: node i is in rack `{block}-r{i mod racks}`). The count is
`spec.nodes`, or with `autoscaling` whatever demand asks between minNodes and maxNodes. Lost nodes are
deleted and, the count being level-triggered, replaced; a spot node under an interruption notice no
longer counts, so its replacement is made before the old one goes.

Autoscaling. Scale up when workloads wait with a `NoFit` reason and their pods fit a fresh node of this
pool (the cheapest such pool with room wins): enough nodes for every such gang, less those still
provisioning. Scale down a node that has held no pod for `scaleDownDelaySeconds`, never below minNodes,
and not while work waits for this pool. Idle time is kept in memory: after a restart a node's idle
clock starts again, which can only delay a scale-down.

Cost. `status.idleGpuHours` integrates ready-but-unallocated GPUs over time; `idleCost` prices them.
"""

from __future__ import annotations

import math

from gpufleet.api.meta import Condition, ObjectMeta, PendingReason, set_condition
from gpufleet.api.pool import GPUPool, GPUPoolStatus
from gpufleet.api.runtime import (
    BLOCK_LABEL,
    CAPACITY_TYPE_LABEL,
    POOL_LABEL,
    RACK_LABEL,
    Node,
    NodeSpec,
    Pod,
)
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import events
from gpufleet.controllers.manager import Key, Reconciler
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.store.protocol import Store, WatchEvent

STATUS_PERIOD = 60.0


class PoolController(Reconciler):
    name = "gpupool"
    kinds: tuple[str, ...] = ("GPUPool", "Node", "Pod", "Workload")
    primary = "GPUPool"

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.idle_since: dict[str, float] = {}
        self.observed: dict[str, tuple[float, float]] = {}
        """pool -> (time, idle GPUs then): the start of the current piece of the idle integral."""
        self.node_pool: dict[str, str] = {}

    def keys_for(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        if isinstance(obj, GPUPool):
            return [("", obj.name)]
        if isinstance(obj, Node):
            if obj.spec.pool:
                self.node_pool[obj.name] = obj.spec.pool
                return [("", obj.spec.pool)]
            return []
        if isinstance(obj, Pod):
            pool = self.node_pool.get(obj.spec.node_name)
            return [("", pool)] if pool else []
        if isinstance(obj, WorkloadObject) and obj.status.phase == "Pending":
            return [("", p.name) for p in self.store.list(GPUPool) if p.spec.autoscaling is not None]
        return []

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, key: Key, now: float) -> float | None:
        name = key[1]
        pools = {p.name: p for p in self.store.list(GPUPool)}
        pool = pools.get(name)
        nodes = [n for n in self.store.list(Node, label_selector={POOL_LABEL: name})]
        if pool is None:
            for node in nodes:
                self.store.delete(Node, node.name)
            return None
        for node in nodes:
            self.node_pool[node.name] = name
        pods = [p for p in self.store.list(Pod) if not p.terminated]
        busy = {p.spec.node_name for p in pods}
        for node in [n for n in nodes if n.status.phase == "Lost"]:
            self.store.delete(Node, node.name)
            events.record(self.store, pool, reason="NodeRemoved", message=f"{node.name} was lost", now=now)
        nodes = [n for n in nodes if n.status.phase != "Lost"]
        counted = [n for n in nodes if n.status.interruption_time is None]
        wake = self._scale(pool, pools, counted, busy, now)
        self._write_status(pool, nodes, pods, now)
        return min(STATUS_PERIOD, wake) if wake is not None else STATUS_PERIOD

    def _scale(
        self, pool: GPUPool, pools: dict[str, GPUPool], nodes: list[Node], busy: set[str], now: float
    ) -> float | None:
        spec = pool.spec
        scaling = spec.autoscaling
        if scaling is None:
            self._create(pool, spec.nodes - len(nodes), nodes, now)
            return None
        need = self._nodes_wanted(pool, pools, nodes)
        provisioning = sum(1 for n in nodes if n.status.phase == "Provisioning")
        grow = min(max(0, need - provisioning), scaling.max_nodes - len(nodes))
        if len(nodes) < scaling.min_nodes:
            grow = max(grow, scaling.min_nodes - len(nodes))
        if grow > 0:
            self._create(pool, grow, nodes, now, reason=f"{need} nodes wanted by waiting workloads")
            return None
        wake: float | None = None
        removable = len(nodes) - scaling.min_nodes
        for node in sorted(nodes, key=lambda n: n.name, reverse=True):
            if node.name in busy or node.status.phase != "Ready" or need > 0:
                self.idle_since.pop(node.name, None)
                continue
            since = self.idle_since.setdefault(node.name, now)
            due = since + scaling.scale_down_delay_seconds
            if due <= now and removable > 0:
                self.store.delete(Node, node.name)
                self.idle_since.pop(node.name, None)
                removable -= 1
                events.record(
                    self.store, pool, reason="ScaledDown", message=f"removed idle node {node.name}", now=now
                )
            elif removable > 0:
                wake = due - now if wake is None else min(wake, due - now)
        return wake

    def _nodes_wanted(self, pool: GPUPool, pools: dict[str, GPUPool], nodes: list[Node]) -> int:
        """Fresh nodes of this pool that workloads waiting for room (NoFit) would fill."""
        total = 0
        for workload in self.store.list(WorkloadObject):
            status = workload.status
            if status.phase != "Pending" or not workload.spec.active:
                continue
            if not _waits_for_nodes(status.pending_reason):
                continue
            chosen = _cheapest_pool(workload, pools)
            if chosen != pool.name:
                continue
            total += _nodes_for(workload, pool)
        return total

    def _create(self, pool: GPUPool, count: int, nodes: list[Node], now: float, reason: str = "") -> None:
        if count <= 0:
            return
        taken = {n.name for n in self.store.list(Node)}
        spec = pool.spec
        made: list[str] = []
        index = 0
        while len(made) < count:
            name = f"{pool.name}-{index}"
            if name not in taken:
                self.store.create(_node(pool, name, index))
                made.append(name)
            index += 1
        del spec
        events.record(
            self.store,
            pool,
            reason="ScaledUp",
            message=f"added {', '.join(made)}" + (f" ({reason})" if reason else ""),
            now=now,
        )

    # --------------------------------------------------------------------- status
    def _write_status(self, pool: GPUPool, nodes: list[Node], pods: list[Pod], now: float) -> None:
        spec = pool.spec
        ready = [n for n in nodes if n.status.phase == "Ready"]
        names = {n.name for n in ready}
        allocated = 0
        for pod in pods:
            if pod.spec.node_name in names:
                allocated += len(pod.spec.gpus) * pod.spec.gpu_milli + (1000 if pod.spec.mig else 0)
        gpus = len(ready) * spec.gpus_per_node
        idle_now = max(0.0, gpus - allocated / 1000)
        status = pool.status.model_copy(deep=True)
        since, idle_then = self.observed.get(pool.name, (now, idle_now))
        status.idle_gpu_hours = round(pool.status.idle_gpu_hours + idle_then * (now - since) / 3600, 4)
        status.idle_cost = round(status.idle_gpu_hours * spec.price_per_gpu_hour, 4)
        status.nodes = len(nodes)
        status.ready_nodes = len(ready)
        status.gpus = gpus
        status.allocated_gpu_milli = allocated
        status.conditions = set_condition(
            status.conditions,
            Condition(
                type="Ready",
                status="True" if ready or not nodes else "False",
                reason="NodesReady" if ready else "Provisioning",
                message=f"{len(ready)}/{len(nodes)} nodes ready",
            ),
            now=to_datetime(now),
        )
        if _comparable(status) == _comparable(pool.status):
            self.observed.setdefault(pool.name, (now, idle_now))
            return
        self.store.update_status(pool.model_copy(update={"status": status}))
        self.observed[pool.name] = (now, idle_now)


def _comparable(status: GPUPoolStatus) -> dict[str, object]:
    data = status.to_dict()
    data.pop("idleGpuHours", None)
    data.pop("idleCost", None)
    data["hours"] = round(status.idle_gpu_hours, 2)
    return data


def _waits_for_nodes(reason: PendingReason | None) -> bool:
    """Whether more nodes would help: no room (NoFit), or a fleet with no GPU model at all yet (the
    core then finds no flavor for a workload that names none: scaling from zero)."""
    if reason is None:
        return False
    if reason.type == "NoFit":
        return True
    return reason.type == "QuotaExceeded" and reason.details.get("flavors") == []


def _node(pool: GPUPool, name: str, index: int) -> Node:
    spec = pool.spec
    labels = {POOL_LABEL: pool.name, CAPACITY_TYPE_LABEL: spec.capacity_type}
    racks = spec.topology.racks
    block = spec.topology.block
    if block:
        labels[BLOCK_LABEL] = block
        labels[RACK_LABEL] = f"{block}-r{index % racks}"
    elif racks > 1:
        labels[RACK_LABEL] = f"{pool.name}-r{index % racks}"
    resources = spec.node_resources
    from gpufleet.api.quantity import cpu_milli, memory_mib

    return Node(
        metadata=ObjectMeta(name=name, labels=labels),
        spec=NodeSpec(
            pool=pool.name,
            gpu_model=spec.gpu_model,
            gpus=spec.gpus_per_node,
            nvlink_domains=spec.nvlink_domains,
            cpu_milli=cpu_milli(resources.cpu) if resources.cpu is not None else 0,
            memory_mib=memory_mib(resources.memory) if resources.memory is not None else 0,
            sharing=spec.sharing,
            capacity_type=spec.capacity_type,
            price_per_gpu_hour=spec.price_per_gpu_hour,
        ),
    )


def _pods_per_node(workload: WorkloadObject, pool: GPUPool) -> int:
    """How many of the workload's pods one fresh node of the pool holds (0: none fits)."""
    spec = pool.spec
    fits = math.inf
    for pod_set in workload.spec.pod_sets:
        request = pod_set.request
        if request.gpu_models and spec.gpu_model not in request.gpu_models:
            return 0
        mode = spec.sharing.mode
        if request.gpus:
            if mode != "exclusive":
                return 0
            fits = min(fits, spec.gpus_per_node // request.gpus)
        elif request.gpu_milli:
            replicas = spec.sharing.time_slicing or spec.sharing.mps
            per_gpu = replicas.replicas if replicas else 1000 // request.gpu_milli
            fits = min(fits, spec.gpus_per_node * per_gpu)
        elif request.mig:
            layout = spec.sharing.mig or {}
            count = sum(
                (layout.get(str(g), layout.get("*")) or []).count(request.mig)
                for g in range(spec.gpus_per_node)
            )
            fits = min(fits, count)
        resources = spec.node_resources
        from gpufleet.api.quantity import cpu_milli, memory_mib

        if request.cpu_milli and resources.cpu is not None:
            fits = min(fits, cpu_milli(resources.cpu) // request.cpu_milli)
        if request.memory_mib and resources.memory is not None:
            fits = min(fits, memory_mib(resources.memory) // request.memory_mib)
    return 0 if fits == math.inf else int(fits)


def _nodes_for(workload: WorkloadObject, pool: GPUPool) -> int:
    per_node = _pods_per_node(workload, pool)
    if per_node <= 0:
        return 0
    pods = sum(ps.count for ps in workload.spec.pod_sets)
    return math.ceil(pods / per_node)


def _cheapest_pool(workload: WorkloadObject, pools: dict[str, GPUPool]) -> str | None:
    """The autoscaled pool a waiting workload would grow: the cheapest whose fresh node holds its pods."""
    options = []
    for pool in pools.values():
        scaling = pool.spec.autoscaling
        if scaling is None or _pods_per_node(workload, pool) <= 0:
            continue
        options.append((pool.spec.price_per_gpu_hour, pool.spec.capacity_type != "spot", pool.name))
    return min(options)[2] if options else None
