"""The secondary scheduler: every Pod with `schedulerName: gpufleet`, decided by the scheduling core.

Each pass builds the core's `ClusterCache` from the informers' caches (Nodes, Pods, Queues), runs one
cycle of the same `Scheduler` the embedded world runs, and carries out its decisions through the API
server: bindings for admissions (a gang only when the cycle admitted all of it), evictions for
preemptions, conditions and Events for whatever stays pending. The pass after sees the result
through the informers, so every pass starts from what the API server says, never from what this
process hoped it did.

Capacity already taken is rebuilt from the pods bound to each node: gpufleet's own pods at the GPUs
their `gpufleet.io/gpus` annotation names (written before binding), others (the default scheduler's)
on GPUs chosen here. Pods being deleted hold their resources until they are gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.queue import Queue
from gpufleet.api.resource import kind_info
from gpufleet.controllers.convert import quota_tree
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import Allocation, AllocationError, FleetState, MigSlot
from gpufleet.kube import nodes as kube_nodes
from gpufleet.kube import pods as kube_pods
from gpufleet.kube.actions import Actions, parse_allocation_annotation
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.informer import Informer, Informers, key_of
from gpufleet.kube.resources import NODE, POD, resource_for
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import Json, Transport
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.cycle import CycleResult, Scheduler
from gpufleet.scheduler.explain import Reason
from gpufleet.scheduler.flavors import Assignment, usage_of
from gpufleet.scheduler.placement.gpus import choose_gpus
from gpufleet.scheduler.queueing import UsageHistory
from gpufleet.scheduler.workload import Workload

log = logging.getLogger(__name__)

WAITING_FOR_GANG = "WaitingForGangMembers"
INVALID = "InvalidRequest"


@dataclass(slots=True)
class View:
    """One pass's picture of the cluster, in the core's terms, and how to get back to real pods."""

    cache: ClusterCache
    groups: dict[str, kube_pods.Group]
    reasons: dict[str, Reason] = field(default_factory=dict)
    """Workloads that cannot even be submitted (incomplete gang, invalid request), and why."""


def build_view(
    *,
    nodes: Iterable[Json],
    pods: Iterable[Json],
    queues: Iterable[Queue],
    config: KubeConfig,
    scheduler: SchedulerConfig,
    history: UsageHistory,
    now: float,
) -> View:
    """The cache a cycle runs on: fleet from Nodes, quota tree from Queues, workloads from Pods."""
    fleet = FleetState(config.level_names(), nvlink_level=config.nvlink_level)
    for node in nodes:
        try:
            fleet.add_node(kube_nodes.node_spec(node, config))
        except GpuFleetError as exc:
            log.warning("node %s left out of the fleet: %s", node["metadata"]["name"], exc)
    tree, settings = quota_tree(queues)
    cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=history)
    all_pods = list(pods)
    groups = kube_pods.group_pods(all_pods, config)
    view = View(cache, groups)
    grouped = {key_of(p) for g in groups.values() for p in g.members}
    for pod in all_pods:  # capacity held by pods that are not gpufleet workloads (or are leaving)
        if key_of(pod) not in grouped and kube_pods.holds_resources(pod):
            _hold(fleet, pod, f"pod/{key_of(pod)}", _request_of(pod, config))
    priorities = dict(scheduler.priority_classes) | config.priority_classes
    for key, group in sorted(groups.items()):
        try:
            workload = kube_pods.workload(group, config, priorities)
        except GpuFleetError as exc:
            view.reasons[key] = Reason(INVALID, str(exc))
            continue
        bound = [p for p in group.members if kube_pods.is_bound(p)]
        if bound:
            _admit_bound(cache, workload, group, bound, now)
        elif not group.complete:
            view.reasons[key] = Reason(
                WAITING_FOR_GANG,
                f"{len(group.members)} of {group.size} pods of gang {key} exist",
                {"present": len(group.members), "size": group.size},
            )
        else:
            cache.submit(workload)
    return view


def _request_of(pod: Json, config: KubeConfig) -> PodRequest:
    try:
        return kube_pods.pod_request(pod, config)
    except GpuFleetError:
        requests = kube_pods.effective_requests(pod)
        return PodRequest(cpu_milli=requests.get("cpu", 0), memory_mib=requests.get("memory", 0))


def _hold(fleet: FleetState, pod: Json, name: str, request: PodRequest) -> Allocation | None:
    """Records what a bound pod holds on its node: its annotated GPUs, else GPUs chosen here."""
    node = pod["spec"]["nodeName"]
    if node not in fleet.index:
        return None
    row = fleet.row_of(node)
    noted = parse_allocation_annotation(pod)
    try:
        if noted and "mig" in noted and request.mig:
            slot = noted["mig"]
            alloc = Allocation(
                name,
                row,
                (),
                0,
                request.cpu_milli,
                request.memory_mib,
                MigSlot(int(slot["gpu"]), str(slot["profile"]), int(slot["start"])),
            )
            return fleet.reinstate(alloc)
        if noted and "gpus" in noted and request.total_gpu_milli:
            return fleet.allocate(name, row, request, tuple(int(g) for g in noted["gpus"]))
        choice = choose_gpus(fleet, row, request)
        return fleet.allocate(name, row, request, choice.gpus, mig_gpu=choice.mig_gpu)
    except (AllocationError, GpuFleetError, ValueError, KeyError, TypeError) as exc:
        # Over-committed already (a node that shrank, a stale annotation): keep the CPU and memory.
        log.warning("pod %s: its GPUs on %s cannot be accounted exactly (%s)", key_of(pod), node, exc)
        try:
            fallback = PodRequest(cpu_milli=request.cpu_milli, memory_mib=request.memory_mib)
            return fleet.allocate(name, row, fallback)
        except AllocationError:
            return None


def _admit_bound(
    cache: ClusterCache, workload: Workload, group: kube_pods.Group, bound: list[Json], now: float
) -> None:
    """A workload whose pods are bound is admitted with what they hold."""
    names = group.by_core_name()
    allocations = []
    counts = {ps.name: 0 for ps in workload.pod_sets}
    requests = {ps.name: ps.request for ps in workload.pod_sets}
    bound_keys = {key_of(p) for p in bound}
    model: str | None = None
    for core_name, pod in sorted(names.items()):
        if key_of(pod) not in bound_keys:
            continue
        pod_set = kube_pods.pod_set_of(pod)
        alloc = _hold(cache.fleet, pod, core_name, requests[pod_set])
        if alloc is None:
            continue
        allocations.append(alloc)
        counts[pod_set] += 1
        if requests[pod_set].total_gpu_milli:
            model = cache.fleet.specs[alloc.node].gpu_model or model
    for alloc in allocations:  # cache.admit takes them again
        cache.fleet.release(alloc.pod)
    order = tuple(counts[ps.name] for ps in workload.pod_sets)
    assignment = Assignment(model, order, usage_of(workload, model, order))
    if workload.queue not in cache.tree.nodes:
        log.warning(
            "workload %s runs in unknown queue %s; its quota is not counted", workload.name, workload.queue
        )
        for alloc in allocations:
            cache.fleet.reinstate(alloc)
        return
    started = workload.submitted_at or now
    cache.admit(workload, assignment, allocations, now=started)


@dataclass(slots=True)
class PassStats:
    passes: int = 0
    bound: int = 0
    evicted: int = 0
    pending: int = 0
    errors: int = 0


class KubeScheduler:
    """Runs passes while this replica leads; informers keep its picture current."""

    def __init__(
        self,
        transport: Transport,
        *,
        config: KubeConfig | None = None,
        scheduler: SchedulerConfig | None = None,
        informers: Informers | None = None,
        identity: str = "gpufleet-scheduler",
        clock: Callable[[], float] = time.time,
        period: float = 5.0,
    ) -> None:
        self.config = config or KubeConfig()
        self.scheduler_config = scheduler or SchedulerConfig()
        self.scheduler = Scheduler(self.scheduler_config)
        self.informers = informers or Informers(transport)
        self.nodes: Informer = self.informers.informer(NODE)
        self.pods: Informer = self.informers.informer(POD)
        self.queues: Informer = self.informers.informer(resource_for("Queue"))
        self.actions = Actions(transport, identity=identity, grace_seconds=self.config.eviction_grace_seconds)
        self.history = UsageHistory(self.scheduler_config.fair_sharing.half_life_seconds)
        self.nominated: list[str] = []
        self.clock = clock
        self.period = period
        self.stats = PassStats()
        self._changed = threading.Event()
        for informer in (self.nodes, self.pods, self.queues):
            informer.add_handler(lambda *_: self._changed.set())

    # ------------------------------------------------------------------ the loop
    def run(self, lost: threading.Event) -> None:
        """Schedules until `lost` is set (leadership gone or shutdown); informers must be started."""
        self.informers.wait_for_sync(None)
        while not lost.is_set():
            self._changed.clear()
            try:
                self.schedule_once()
            except Exception:  # a pass that fails is retried from fresh state; the loop must live
                self.stats.errors += 1
                log.exception("scheduling pass failed")
            self._changed.wait(self.period)
            lost.wait(0.2)  # let a burst of informer events settle into one pass

    def schedule_once(self) -> CycleResult:
        """One pass: picture, cycle, actions."""
        now = self.clock()
        view = build_view(
            nodes=self.nodes.items(),
            pods=self.pods.items(),
            queues=self._queues(),
            config=self.config,
            scheduler=self.scheduler_config,
            history=self.history,
            now=now,
        )
        view.cache.nominated = [n for n in self.nominated if n in view.cache.pending]
        result = self.scheduler.cycle(view.cache, now=now)
        self.nominated = list(result.nominated)
        self.stats.passes += 1
        self._preempt(view, result)
        self._bind(view, result)
        self._explain(view, result)
        return result

    # ------------------------------------------------------------------ decisions
    def _preempt(self, view: View, result: CycleResult) -> None:
        for preempt in result.preempted:
            group = view.groups.get(preempt.victim)
            if group is None:
                continue
            members = group.by_core_name()
            chosen = members.values() if preempt.whole else [members[p] for p in preempt.pods if p in members]
            for pod in chosen:
                if kube_pods.is_bound(pod) and self.actions.evict(
                    pod, reason="PreemptedByGpufleet", message=preempt.message
                ):
                    self.stats.evicted += 1

    def _bind(self, view: View, result: CycleResult) -> None:
        fleet = view.cache.fleet
        for admit in result.admitted:
            group = view.groups.get(admit.workload)
            if group is None:
                continue
            members = group.by_core_name()
            for alloc in admit.allocations:
                pod = members.get(alloc.pod)
                if pod is None:
                    continue
                node = fleet.names[alloc.node]
                if self.actions.bind(pod, node, alloc if alloc.gpus or alloc.mig else None):
                    self.stats.bound += 1

    def _explain(self, view: View, result: CycleResult) -> None:
        reasons: dict[str, Reason] = dict(view.reasons)
        reasons.update({name: pending.reason for name, pending in result.pending.items()})
        for name, reason in reasons.items():
            group = view.groups.get(name)
            if group is None:
                continue
            self.stats.pending += 1
            for pod in group.members:
                if not kube_pods.is_bound(pod):
                    self.actions.pending(pod, reason_type=reason.type, message=reason.message)
            self._owner_reason(group, reason)

    def _owner_reason(self, group: kube_pods.Group, reason: Reason) -> None:
        owners = group.members[0]["metadata"].get("ownerReferences") or []
        for owner in owners:
            if str(owner.get("apiVersion", "")).startswith("gpufleet.io/"):
                details = _plain(dict(reason.details))
                status = {
                    "phase": "Pending",
                    "pendingReason": {"type": reason.type, "message": reason.message, "details": details},
                }
                self.actions.owner_status(owner, group.namespace, status)

    def _queues(self) -> list[Queue]:
        info = kind_info("Queue")
        assert info is not None
        out = []
        for raw in self.queues.items():
            try:
                queue = from_json(info, raw)
            except Exception as exc:  # one malformed Queue must not stop scheduling
                log.warning("queue %s ignored: %s", raw["metadata"].get("name"), exc)
                continue
            assert isinstance(queue, Queue)
            out.append(queue)
        return out


def _plain(details: Mapping[str, Any]) -> dict[str, Any]:
    import json

    return dict(json.loads(json.dumps(details, default=str)))
