"""The GPUPool controller: the pool's nodes, their count, and what idle capacity costs.

Nodes. A pool owns Node objects named `{pool}-{i}`, labelled with the pool, the capacity type and
their place in the topology: `block`, and `rack` (`{block}-r{j}`, or `{pool}-r{j}` without a block).
A new node goes to the rack with the fewest nodes of the pool, unless it is made for a gang that
requires one rack. Lost nodes are deleted and, the count being level-triggered, replaced; a spot node
under an interruption notice no longer counts, so its replacement is made before the old one goes.

Count. Without `autoscaling` the pool converges to `spec.nodes`: missing nodes are made, surplus ones
removed, idle ones first. With it, the count follows demand between minNodes and maxNodes:

- Up: the scheduling controller marks each workload that waits for nodes (not for quota) with the
  pools whose fresh nodes could serve it, cheapest first (`status.nodeDemand`). Each such workload,
  in priority order, goes to the first autoscaled pool of its list with room; there it first claims
  the pool's spare nodes (provisioning, or ready and empty), then new ones are made, all in one rack
  for a gang that requires a rack (or not at all if that rack cannot hold it within maxNodes). Claimed
  spare nodes make the plan self-limiting: a workload that still waits while its nodes stand idle gets
  no more. An admitted elastic workload that runs short (e.g. after a spot node was taken back from
  under it) is marked the same way and asks for nodes for its missing pods only.
- Down: a ready node that held no pod for `scaleDownDelaySeconds` and is claimed by no waiting
  workload is removed, never below minNodes. When each node became idle is kept in
  `status.idleSince`, so a restart of the controller does not restart the timers.

Cost. `status.idleGpuHours` integrates ready-but-unallocated GPUs over time and `idleCost` prices them
(`api.accounting.idle_account`, the rule the Kubernetes operator keeps them by too);
the integral runs on from `idleCountedTime` with `idleGpus`, both in the status, so it survives a
restart too. The status is held until the instant has settled (`controllers.heldstatus`) and written
once: the integral gains nothing over an instant, so the one write holds what the last would have.
With `write_period` (the job simulator's, where nothing reads a pool's status) a held status is
written at most that often: it stays exact meanwhile, each reconcile integrating on from the held
one, and only the store's copy lags.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.accounting import idle_account
from gpufleet.api.labels import CAPACITY_TYPE_LABEL, POOL_LABEL
from gpufleet.api.meta import Condition, ConditionStatus, ObjectMeta, holds_condition, set_condition
from gpufleet.api.numerals import plain_digits
from gpufleet.api.pool import GPUPool, GPUPoolStatus
from gpufleet.api.quantity import cpu_milli, memory_mib
from gpufleet.api.runtime import (
    BLOCK_LABEL,
    RACK_LABEL,
    Node,
    NodeSpec,
    Pod,
    WorkloadPodSet,
)
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import capacity, events
from gpufleet.controllers.eventview import ViewedReconciler
from gpufleet.controllers.heldstatus import HeldStatuses
from gpufleet.controllers.manager import Key
from gpufleet.controllers.poolview import PoolView
from gpufleet.controllers.timeutil import to_datetime, to_seconds
from gpufleet.observability import metrics
from gpufleet.store.protocol import Store, WatchEvent

STATUS_PERIOD = 60.0
ONE_RACK_LEVELS = (RACK_LABEL,)
"""Required topology levels a pool with several racks must satisfy inside one rack."""


@dataclass(slots=True)
class Plan:
    """What waiting workloads want of one pool: racks of the nodes to make, spare nodes they claim."""

    create: list[str | None] = field(default_factory=list)
    claimed: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)


class PoolController(ViewedReconciler[PoolView]):
    name = "gpupool"
    kinds: tuple[str, ...] = ("GPUPool", "Node", "Pod", "Workload")
    primary = "GPUPool"

    def __init__(
        self, store: Store, *, status_period: float = STATUS_PERIOD, write_period: float = 0.0
    ) -> None:
        super().__init__(store)
        self.status_period = status_period
        """Seconds between two looks at a pool that nothing changed (its idle GPU-hours accrue)."""
        self.write_period = write_period
        """Least seconds between two writes of a pool's status (0: once per instant it changed)."""
        self.written_at: dict[Key, float] = {}
        self.view = PoolView(store)
        """Pools, nodes, live pods and node demands, kept from events instead of listed each time."""
        self.node_pool = self.view.node_pool
        """node -> pool, so that a pod event finds its pool without a read."""
        self.held: HeldStatuses[GPUPool, GPUPoolStatus] = HeldStatuses()
        """Statuses computed at this instant, written when it has settled."""

    def keys_for(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        if isinstance(obj, GPUPool):
            key = ("", obj.name)
            return [] if event.type == "MODIFIED" and self.held.echo(key, obj) else [key]
        if isinstance(obj, Node):
            if obj.spec.pool:
                self.node_pool[obj.name] = obj.spec.pool
                return [("", obj.spec.pool)]
            return []
        if isinstance(obj, Pod):
            pool = self.node_pool.get(obj.spec.node_name)
            return [("", pool)] if pool and self.view.changes_counts(event) else []
        if isinstance(obj, WorkloadObject) and obj.status.node_demand is not None:
            return [("", name) for name in obj.status.node_demand.pools]
        return []

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, key: Key, now: float) -> float | None:
        name = key[1]
        view = self.view
        self.catch_up(now)
        pools = view.pools
        stored = pools.get(name)
        if stored is None:
            self.held.statuses.pop(key, None)
            for node in view.nodes_of(name):
                self._delete_node(node.name)
            metrics.forget_pool(name)
            return None
        pool = self.held.effective(key, stored)
        metrics.record_pool(name, pool.spec.price_per_gpu_hour)
        group = view.group(name)
        steady = len(group.members) - len(group.interrupted) == pool.spec.nodes
        if pool.spec.autoscaling is None and steady and not group.lost:
            # At its size with nothing lost (most reconciles: a pod came or went), nothing is made
            # or removed; the status comes from the view's counts without a walk over the nodes.
            self._write_status(pool, len(group.members), len(group.ready), group.ready_milli, {}, now)
            return self.status_period
        nodes = view.nodes_of(name)
        busy = view.busy()
        for node in [n for n in nodes if n.status.phase == "Lost"]:
            self._delete_node(node.name)
            events.record(self.store, pool, reason="NodeRemoved", message=f"{node.name} was lost", now=now)
        nodes = [n for n in nodes if n.status.phase != "Lost"]
        counted = [n for n in nodes if n.status.interruption_time is None]
        if pool.spec.autoscaling is None:
            removed = self._converge(pool, counted, busy, now)
            idle_since: dict[str, float] = {}
            wake = None
        else:
            plan = self._plan(pool, pools, counted, busy, _room(pools, view.nodes.values(), busy))
            removed, idle_since, wake = self._autoscale(pool, counted, busy, plan, now)
        nodes = [n for n in nodes if n.name not in removed]
        ready = {n.name for n in nodes if n.status.phase == "Ready"}
        self._write_status(pool, len(nodes), len(ready), view.allocated_milli(ready), idle_since, now)
        return min(self.status_period, wake) if wake is not None else self.status_period

    def flush(self, now: float) -> None:
        """Writes the held statuses that are due (the manager calls it once the instant has settled)."""
        due = [
            key
            for key in self.held.statuses
            if now - self.written_at.get(key, float("-inf")) >= self.write_period
        ]
        if not due:
            return
        self.catch_up(now)
        conflicted = self.held.flush(
            self.store,
            lambda key: self.view.pools.get(key[1]),
            unchanged=lambda status, pool: _comparable(status) == _comparable(pool.status),
            keys=due,
        )
        for key in due:
            self.written_at[key] = now
        for key in conflicted:
            self.enqueue(key, now)

    # ------------------------------------------------------------------ static
    def _converge(self, pool: GPUPool, nodes: list[Node], busy: set[str], now: float) -> set[str]:
        """A pool without autoscaling holds `spec.nodes` nodes; surplus goes idle nodes first."""
        missing = pool.spec.nodes - len(nodes)
        if missing > 0:
            racks = self._balanced_racks(pool, nodes, missing)
            self._create(pool, racks, now, reason=f"spec.nodes is {pool.spec.nodes}")
            return set()
        surplus = _removal_order(nodes, busy)[:-missing] if missing < 0 else []
        for node in surplus:
            self._remove(pool, node, now, why=f"spec.nodes is {pool.spec.nodes}", busy=node.name in busy)
        return {n.name for n in surplus}

    # --------------------------------------------------------------- autoscale
    def _autoscale(
        self, pool: GPUPool, nodes: list[Node], busy: set[str], plan: Plan, now: float
    ) -> tuple[set[str], dict[str, float], float | None]:
        """Grows by the plan, else shrinks idle nodes past their delay. Returns the removed nodes, the
        idle timers to keep, and when the next timer is due."""
        scaling = pool.spec.autoscaling
        assert scaling is not None
        create = list(plan.create)
        if len(nodes) + len(create) < scaling.min_nodes:
            create += self._balanced_racks(pool, nodes, scaling.min_nodes - len(nodes) - len(create))
        if create:
            self._create(
                pool, create, now, reason="; ".join(plan.reasons) or f"minNodes is {scaling.min_nodes}"
            )
        removed: set[str] = set()
        over = len(nodes) - scaling.max_nodes
        for node in _removal_order(nodes, busy)[:over] if over > 0 else []:
            self._remove(pool, node, now, why=f"maxNodes is {scaling.max_nodes}", busy=node.name in busy)
            removed.add(node.name)
        stored = {name: t.timestamp() for name, t in pool.status.idle_since.items()}
        idle_since: dict[str, float] = {}
        wake: float | None = None
        removable = len(nodes) - len(removed) - scaling.min_nodes
        for node in sorted(nodes, key=lambda n: n.name, reverse=True):
            idle = node.name not in busy and node.status.phase == "Ready" and node.name not in removed
            if not idle:
                continue
            since = stored.get(node.name, now)
            due = since + scaling.scale_down_delay_seconds
            if node.name in plan.claimed or create:
                idle_since[node.name] = since  # kept for a waiting workload; its idle time still counts
                continue
            if due <= now and removable > 0:
                self._remove(pool, node, now, why=f"idle since {to_datetime(since).isoformat()}", busy=False)
                removed.add(node.name)
                removable -= 1
                continue
            idle_since[node.name] = since
            if removable > 0:
                wake = due - now if wake is None else min(wake, due - now)
        return removed, idle_since, wake

    def _plan(
        self,
        pool: GPUPool,
        pools: dict[str, GPUPool],
        nodes: list[Node],
        busy: set[str],
        room: dict[str, int],
    ) -> Plan:
        """The nodes waiting workloads want of this pool (see the module docstring)."""
        scaling = pool.spec.autoscaling
        assert scaling is not None
        plan = Plan()
        racks = _racks(pool)
        size = {rack: 0 for rack in racks}
        spare: dict[str | None, list[str]] = {rack: [] for rack in racks}
        for node in sorted(nodes, key=lambda n: n.name):
            rack = _rack_of(node, racks)
            size[rack] += 1
            if node.name not in busy and node.status.phase in ("Provisioning", "Ready"):
                spare[rack].append(node.name)
        budget = scaling.max_nodes - len(nodes)
        for workload in self._waiting_for(pool, pools, room):
            need = capacity.nodes_for(_wanted_pod_sets(workload), pool.spec)
            if need <= 0:
                continue
            one_rack = workload.spec.topology.required in ONE_RACK_LEVELS and len(racks) > 1
            choices = racks if one_rack else [None]
            best = max(choices, key=lambda r: _rack_score(r, spare, size, racks)) if one_rack else None
            taken = _claim(spare, need, only=best if one_rack else None, order=racks)
            more = need - len(taken)
            if more > budget and one_rack:
                continue  # a rack gang cannot use part of what it needs
            more = min(more, budget)
            plan.claimed.update(taken)
            for _ in range(more):
                rack = best if one_rack else min(racks, key=lambda r: (size[r], racks.index(r)))
                plan.create.append(rack)
                size[rack] += 1
            budget -= more
            if more:
                plan.reasons.append(f"{workload.namespace}/{workload.name} waits for {need} nodes")
        return plan

    def _waiting_for(
        self, pool: GPUPool, pools: dict[str, GPUPool], room: dict[str, int]
    ) -> list[WorkloadObject]:
        """Workloads waiting for nodes whose first autoscaled pool with room is this one: pending ones,
        and admitted elastic ones that run short (for their missing pods only)."""
        out = []
        for workload in self.view.demanding.values():
            demand = workload.status.node_demand
            if workload.status.phase not in ("Pending", "Admitted") or not workload.spec.active:
                continue
            if demand is None:
                continue
            if _chosen_pool(workload, demand.pools, pools, room) == pool.name:
                out.append(workload)
        out.sort(
            key=lambda w: (
                -w.spec.priority,
                to_seconds(w.metadata.creation_timestamp) or 0.0,
                w.namespace or "",
                w.name,
            )
        )
        return out

    # ------------------------------------------------------------------ nodes
    def _balanced_racks(self, pool: GPUPool, nodes: list[Node], count: int) -> list[str | None]:
        racks = _racks(pool)
        size = {rack: 0 for rack in racks}
        for node in nodes:
            size[_rack_of(node, racks)] += 1
        out: list[str | None] = []
        for _ in range(count):
            rack = min(racks, key=lambda r: (size[r], racks.index(r)))
            out.append(rack)
            size[rack] += 1
        return out

    def _create(self, pool: GPUPool, racks: list[str | None], now: float, *, reason: str) -> None:
        if not racks:
            return
        taken = set(self.view.nodes)
        made: list[str] = []
        index = 0
        for rack in racks:
            while f"{pool.name}-{index}" in taken:
                index += 1
            name = f"{pool.name}-{index}"
            taken.add(name)
            self.view.created(self.store.create(_new_node(pool, name, rack)))
            made.append(name)
        events.record(
            self.store, pool, reason="ScaledUp", message=f"added {', '.join(made)} ({reason})", now=now
        )

    def _delete_node(self, name: str) -> None:
        self.store.delete(Node, name)
        self.view.deleted(name)

    def _remove(self, pool: GPUPool, node: Node, now: float, *, why: str, busy: bool) -> None:
        self._delete_node(node.name)
        events.record(
            self.store,
            pool,
            reason="ScaledDown",
            message=f"removed {'busy' if busy else 'idle'} node {node.name} ({why})",
            now=now,
            type="Warning" if busy else "Normal",
        )

    # --------------------------------------------------------------------- status
    def _write_status(
        self,
        pool: GPUPool,
        nodes: int,
        ready: int,
        allocated: int,
        idle_since: dict[str, float],
        now: float,
    ) -> None:
        """`nodes` and `ready`: how many nodes the pool has and how many are Ready; `allocated`: the
        GPU milli held on the Ready ones."""
        spec = pool.spec
        gpus = ready * spec.gpus_per_node
        old = pool.status
        idle = idle_account(
            hours=old.idle_gpu_hours,
            idle_gpus=old.idle_gpus,
            counted_at=to_seconds(old.idle_counted_time),
            now=now,
            ready_gpus=gpus,
            allocated_milli=allocated,
            price_per_gpu_hour=spec.price_per_gpu_hour,
        )
        at = to_datetime(now)
        ready_status: ConditionStatus = "True" if ready or not nodes else "False"
        reason, message = ("NodesReady" if ready else "Provisioning"), f"{ready}/{nodes} nodes ready"
        conditions = old.conditions
        if not holds_condition(conditions, "Ready", ready_status, reason, message):
            ready_condition = Condition(type="Ready", status=ready_status, reason=reason, message=message)
            conditions = set_condition(conditions, ready_condition, now=at)
        # Every field that changes is replaced whole, none is changed in place.
        update = {
            "idle_gpu_hours": idle.idle_gpu_hours,
            "idle_cost": idle.idle_cost,
            "idle_gpus": idle.idle_gpus,
            "idle_counted_time": at,
            "idle_since": {name: to_datetime(t) for name, t in sorted(idle_since.items())},
            "nodes": nodes,
            "ready_nodes": ready,
            "gpus": gpus,
            "allocated_gpu_milli": allocated,
            "conditions": conditions,
        }
        if _unchanged(old, update):
            return
        status = old.model_copy(update=update)
        self.held.hold(("", pool.name), status)


_MOVING = ("idle_gpu_hours", "idle_cost", "idle_counted_time")
"""Status fields that move with time alone."""


def _unchanged(old: GPUPoolStatus, update: dict[str, Any]) -> bool:
    """`_comparable` of `old` with `update` applied equals `old`'s, decided without building the copy
    (a reconcile that finds the pool as its held status says: a third of them in a simulation)."""
    if round(update["idle_gpu_hours"], 2) != round(old.idle_gpu_hours, 2):
        return False
    return all(getattr(old, name) == value for name, value in update.items() if name not in _MOVING)


def _comparable(status: GPUPoolStatus) -> list[object]:
    """The status without what moves with time alone (hours are compared to a hundredth); field
    values, not their JSON form, since this runs on every reconcile."""
    values = [getattr(status, name) for name in GPUPoolStatus.model_fields if name not in _MOVING]
    return [*values, round(status.idle_gpu_hours, 2)]


# ------------------------------------------------------------------ topology helpers
def _racks(pool: GPUPool) -> list[str | None]:
    """The pool's rack names ([None]: one rack, unlabelled)."""
    return pool.spec.topology.rack_names(pool.name)


def _rack_of(node: Node, racks: list[str | None]) -> str | None:
    rack = node.metadata.labels.get(RACK_LABEL)
    return rack if rack in racks else racks[0]


def _rack_score(
    rack: str | None, spare: dict[str | None, list[str]], size: dict[str | None, int], racks: list[str | None]
) -> tuple[int, int, int]:
    """A rack gang goes where most spare nodes wait, then to the emptiest rack, then the first."""
    return (len(spare[rack]), -size[rack], -racks.index(rack))


def _claim(
    spare: dict[str | None, list[str]], need: int, *, only: str | None, order: list[str | None]
) -> list[str]:
    """Takes up to `need` spare nodes, from one rack (`only`) or from the racks with most spare first."""
    racks = [only] if only is not None else sorted(order, key=lambda r: -len(spare[r]))
    taken: list[str] = []
    for rack in racks:
        while spare[rack] and len(taken) < need:
            taken.append(spare[rack].pop(0))
    return taken


def _room(pools: dict[str, GPUPool], nodes: Iterable[Node], busy: set[str]) -> dict[str, int]:
    """Nodes each autoscaled pool could still give waiting work: spare nodes plus those it may add."""
    room = {name: p.spec.autoscaling.max_nodes for name, p in pools.items() if p.spec.autoscaling is not None}
    for node in nodes:
        pool = node.spec.pool
        if pool not in room or node.status.phase == "Lost" or node.status.interruption_time is not None:
            continue
        room[pool] -= 1
        if node.name not in busy and node.status.phase in ("Provisioning", "Ready"):
            room[pool] += 1
    return room


def _chosen_pool(
    workload: WorkloadObject, names: list[str], pools: dict[str, GPUPool], room: dict[str, int]
) -> str | None:
    """The first autoscaled pool of the demand (cheapest first) with room for the whole workload."""
    for name in names:
        pool = pools.get(name)
        if pool is None or name not in room:
            continue
        need = capacity.nodes_for(_wanted_pod_sets(workload), pool.spec)
        if 0 < need <= room[name]:
            return name
    return None


def _wanted_pod_sets(workload: WorkloadObject) -> list[WorkloadPodSet]:
    """The pods a workload still needs nodes for: all of a pending one, the missing ones of an
    admitted elastic workload that runs short."""
    admission = workload.status.admission
    if workload.status.phase != "Admitted" or admission is None:
        return list(workload.spec.pod_sets)
    wanted = []
    for pod_set, running in zip(workload.spec.pod_sets, admission.counts, strict=False):
        if pod_set.count > running:
            wanted.append(pod_set.model_copy(update={"count": pod_set.count - running}))
    return wanted


def _removal_order(nodes: list[Node], busy: set[str]) -> list[Node]:
    """Which nodes go first: idle ones, then the newest (highest index)."""
    return sorted(nodes, key=lambda n: (n.name in busy, -_index(n.name)))


def _index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if plain_digits(tail) else -1


def _new_node(pool: GPUPool, name: str, rack: str | None) -> Node:
    spec = pool.spec
    labels = {POOL_LABEL: pool.name, CAPACITY_TYPE_LABEL: spec.capacity_type}
    if spec.topology.block:
        labels[BLOCK_LABEL] = spec.topology.block
    if rack is not None:
        labels[RACK_LABEL] = rack
    resources = spec.node_resources
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
            driver_version=spec.driver_version,
            dra=spec.dra,
        ),
    )
