"""What the GPUPool controller knows of pools, nodes, live pods and workloads waiting for nodes.

The pool controller used to list every GPUPool, Node, Pod and Workload of the store on each
reconcile: once per settle round in which a pod changed, every stored object parsed from JSON and
validated again, three quarters of a simulated day's CPU time. This view is an informer cache: it is
listed once and then kept up to date from the store's events, which the controller receives anyway.

Before each reconcile the view catches up with the store's event log (`catch_up`), so it sees what
the controllers stepped earlier in the same round wrote (the scheduling controller's admissions: the
autoscaler must not grow a pool for a workload that was just placed) as the lists did. Each event is
applied once, whether it came through the manager (`apply`) or a catch-up: events at or below the
view's cursor are skipped. Pods are kept as what the controller needs of them (node and allocated
GPU milli), and workloads only while they carry a node demand.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from gpufleet.api.accounting import held_milli
from gpufleet.api.pool import GPUPool
from gpufleet.api.runtime import Node, Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers.eventview import EventFedView
from gpufleet.store.protocol import Store, WatchEvent

PodKey = tuple[str, str]
WorkloadKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PodUse:
    """A live (not terminated) pod as the pool controller counts it."""

    node: str
    gpu_milli: int
    since: int = field(default=0, compare=False)
    """The pod's resourceVersion when it began to count so (a later version that left its node and
    milli as they were keeps this one)."""


def pod_use(pod: Pod, *, since: int = 0) -> PodUse:
    """The GPU milli a pod holds on its node (`api.accounting.held_milli`, the Kubernetes world's too)."""
    profile = pod.spec.mig.profile if pod.spec.mig else None
    milli = held_milli(gpus=len(pod.spec.gpus), gpu_milli=pod.spec.gpu_milli, mig_profile=profile)
    return PodUse(pod.spec.node_name, milli, since)


@dataclass(slots=True)
class PoolNodes:
    """One pool's nodes and their counts, kept up to date as nodes and pods change, so that the
    reconcile of a pool at its size reads counts instead of walking every node."""

    members: dict[str, Node] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    interrupted: set[str] = field(default_factory=set)
    """Not lost, under a spot interruption notice (no longer counted toward the pool's size)."""
    ready_milli: int = 0
    """GPU milli held by live pods on the Ready nodes."""
    order: list[str] | None = None
    """Member names in order, until a node comes or goes."""


class PoolView(EventFedView):
    """Pools, nodes, live pods and node-demanding workloads, from one list and then from events."""

    KINDS = ("GPUPool", "Node", "Pod", "Workload")

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.pools: dict[str, GPUPool] = {}
        self.nodes: dict[str, Node] = {}
        self.groups: dict[str, PoolNodes] = {}
        self.node_pool: dict[str, str] = {}
        """node -> pool of every node seen, deleted ones too (a pod's last events may come later)."""
        self.pods: dict[PodKey, PodUse] = {}
        self.demanding: dict[WorkloadKey, WorkloadObject] = {}
        """Workloads whose status carries a node demand; the others never concern the autoscaler."""
        self.node_pods: dict[str, int] = {}
        """Live pods per node name (a node is busy while it holds one)."""
        self.node_milli: dict[str, int] = {}
        """GPU milli held by live pods per node name."""

    # ------------------------------------------------------------------ feeding
    def _load(self) -> None:
        self.pools = {p.name: p for p in self.store.list(GPUPool)}
        self.nodes, self.groups = {}, {}
        self.pods, self.node_pods, self.node_milli = {}, {}, {}
        for pod in self.store.list(Pod):
            self._put_pod(pod)
        for node in self.store.list(Node):
            self._put_node(node)
        self.demanding = {}
        for workload in self.store.list(WorkloadObject):
            self._put_workload(workload, deleted=False)

    def _take(self, obj: object, *, deleted: bool) -> None:
        if isinstance(obj, GPUPool):
            if deleted:
                self.pools.pop(obj.name, None)
            else:
                self.pools[obj.name] = obj
        elif isinstance(obj, Node):
            if deleted:
                self._drop_node(obj.name)
            else:
                self._put_node(obj)
        elif isinstance(obj, Pod):
            key = (obj.namespace or "", obj.name)
            old = self.pods.get(key)
            if not deleted and not obj.terminated and old is not None and pod_use(obj) == old:
                return  # started, say: it holds what it held, and the counts stand
            self._drop_pod(key)
            if not deleted:
                self._put_pod(obj)
        elif isinstance(obj, WorkloadObject):
            self._put_workload(obj, deleted=deleted)

    # ------------------------------------------------------------------ own writes
    def created(self, node: Node) -> None:
        """A node the controller just made (its event is applied again later, to the same effect)."""
        self._put_node(node)

    def deleted(self, name: str) -> None:
        self._drop_node(name)

    # ------------------------------------------------------------------ reads
    def nodes_of(self, pool: str) -> list[Node]:
        """The pool's nodes in name order (the order the store lists them in)."""
        group = self.group(pool)
        if group.order is None:
            group.order = sorted(group.members)
        return [group.members[name] for name in group.order]

    def group(self, pool: str) -> PoolNodes:
        found = self.groups.get(pool)
        if found is None:
            found = self.groups[pool] = PoolNodes()
        return found

    def changes_counts(self, event: WatchEvent) -> bool:
        """Whether a pod's event (already applied) may have changed what the pool's counts hold: not
        a live pod's event that left its node and GPUs as they were (it started running), nor the
        deletion of a terminated pod (its GPUs were let go when it terminated; a deletion changes
        no status). Where the view cannot tell (the pod gone since, or counted anew at a later
        version), it may have."""
        pod = event.object
        assert isinstance(pod, Pod)
        if pod.terminated:
            return event.type != "DELETED"
        if event.type == "DELETED":
            return True
        use = self.pods.get((pod.namespace or "", pod.name))
        return use is None or use.since >= event.resource_version

    def busy(self) -> set[str]:
        """Names of the nodes that hold a live pod."""
        return {name for name, count in self.node_pods.items() if count > 0}

    def allocated_milli(self, names: Set[str]) -> int:
        """GPU milli held on these nodes (a walk over the busy nodes only)."""
        return sum(milli for name, milli in self.node_milli.items() if name in names)

    # ------------------------------------------------------------------ internals
    def _put_node(self, node: Node) -> None:
        old = self.nodes.get(node.name)
        if old is not None:
            self._unindex(old, moved=old.spec.pool != node.spec.pool)
        self.nodes[node.name] = node
        pool = node.spec.pool or ""
        self.node_pool[node.name] = pool
        group = self.group(pool)
        if node.name not in group.members:
            group.order = None
        group.members[node.name] = node
        if node.status.phase == "Lost":
            group.lost.add(node.name)
        elif node.status.interruption_time is not None:
            group.interrupted.add(node.name)
        if node.status.phase == "Ready":
            group.ready.add(node.name)
            group.ready_milli += self.node_milli.get(node.name, 0)

    def _drop_node(self, name: str) -> None:
        old = self.nodes.pop(name, None)
        if old is not None:
            self._unindex(old, moved=True)

    def _unindex(self, node: Node, *, moved: bool) -> None:
        """Takes the node out of its pool's counts (and membership, when it goes or moves)."""
        group = self.group(node.spec.pool or "")
        if node.name in group.ready:
            group.ready.discard(node.name)
            group.ready_milli -= self.node_milli.get(node.name, 0)
        group.lost.discard(node.name)
        group.interrupted.discard(node.name)
        if moved:
            group.members.pop(node.name, None)
            group.order = None

    def _ready_group(self, node: str) -> PoolNodes | None:
        """The pool counts of a Ready node (None if the node is unknown or not Ready)."""
        pool = self.node_pool.get(node)
        group = self.groups.get(pool) if pool is not None else None
        return group if group is not None and node in group.ready else None

    def _put_pod(self, pod: Pod) -> None:
        if pod.terminated:
            return
        use = pod_use(pod, since=int(pod.metadata.resource_version or 0))
        self.pods[(pod.namespace or "", pod.name)] = use
        self.node_pods[use.node] = self.node_pods.get(use.node, 0) + 1
        self.node_milli[use.node] = self.node_milli.get(use.node, 0) + use.gpu_milli
        group = self._ready_group(use.node)
        if group is not None:
            group.ready_milli += use.gpu_milli

    def _drop_pod(self, key: PodKey) -> None:
        use = self.pods.pop(key, None)
        if use is None:
            return
        group = self._ready_group(use.node)
        if group is not None:
            group.ready_milli -= use.gpu_milli
        left = self.node_pods[use.node] - 1
        if left:
            self.node_pods[use.node] = left
            self.node_milli[use.node] -= use.gpu_milli
        else:
            del self.node_pods[use.node]
            del self.node_milli[use.node]

    def _put_workload(self, workload: WorkloadObject, *, deleted: bool) -> None:
        key = (workload.namespace or "", workload.name)
        if deleted or workload.status.node_demand is None:
            self.demanding.pop(key, None)
        else:
            self.demanding[key] = workload
