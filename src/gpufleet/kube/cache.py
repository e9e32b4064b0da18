"""The core's `ClusterCache` kept from informer events, changed only where the cluster changed.

Informer handlers only note what changed (a node name, a pod's workload, a foreign pod); before each
pass `refresh` brings exactly those parts of the cache in line with the informers' copies. The cache
lives as long as the process leads, so fair-share history, parked workloads and assumptions survive
between passes; a change of Queues (the quota tree) rebuilds it whole, keeping the history.

- Nodes: added, removed, or updated in place (cordon, readiness, GPU health) through the shared
  `controllers.nodesync`; a node that changed shape is added again and the pods on it accounted again.
- Workloads (a gang, a Job's gang or a single pod): each time one of its pods changes, the workload is
  taken out of the cache and put back as the pods now say: admitted with what its bound pods hold,
  pending when none is bound and all members exist, or waiting for its members.
- Flavors: a workload accounted from its bound pods is charged to the quota flavor it was admitted
  under (`H100-80GB/spot`, not the node's plain model): the flavor its pods were assumed with or that
  was noted on them at bind time (`gpufleet.io/flavor`), else the one the cycle would give its node (the
  queue's first flavor, in its order, of the node's GPU model whose capacity type, if any, is the node's
  `gpufleet.io/capacity-type`). MIG pods count in their profile either way.
- Assumptions: a pod the scheduler bound (or is binding) counts as bound on its chosen node before the
  informer shows it, with the GPUs chosen (Kueue's assume). An assumption ends when the informer
  shows the pod bound, or the pod is gone, or the bind failed for good.
- A partly bound gang (the scheduler stopped between two bindings, or pods were bound by hand): the
  bound members are admitted as they are, and the unbound ones are submitted as a workload of their
  own, `{gang}#rest`, charged to the same queue and, for a required topology, kept to the domain of
  the bound members; once bound, the gang is whole again.
- Foreign pods (other schedulers', and ours while being deleted) hold their node's resources; those
  on their way out (evicted, or with a deletionTimestamp) are the core's leaving pods, capacity to
  come, and the cache says evictions take time (`ClusterCache.graceful_evictions`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.labels import CAPACITY_TYPE_LABEL
from gpufleet.api.queue import Queue
from gpufleet.controllers import nodesync
from gpufleet.controllers.convert import placeable_quota_tree
from gpufleet.controllers.failures import contained, contained_error
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import Allocation, AllocationError, FleetState, MigSlot
from gpufleet.kube import nodes as kube_nodes
from gpufleet.kube import pods as kube_pods
from gpufleet.kube.actions import parse_allocation_annotation
from gpufleet.kube.claim_writes import ClaimWrite
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.dra import CLAIMS_NOT_READY, INVALID_CLAIMS, ClaimsNotReady, KubeDra, SliceIndex
from gpufleet.kube.informer import key_of
from gpufleet.kube.transport import Json
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.explain import Reason, scheduling_error
from gpufleet.scheduler.flavors import Assignment, model_of, node_flavor, usage_of
from gpufleet.scheduler.placement.gpus import choose_gpus
from gpufleet.scheduler.queueing import UsageHistory
from gpufleet.scheduler.workload import PodSet, Workload

log = logging.getLogger(__name__)

WAITING_FOR_GANG = "WaitingForGangMembers"
INVALID = "InvalidRequest"
REST = "#rest"
"""Suffix of the workload that completes a partly bound gang."""


def foreign_name(pod_key: str) -> str:
    return f"pod/{pod_key}"


@dataclass(frozen=True, slots=True)
class Assumed:
    """A binding decided here and not yet seen by the informer."""

    node: str
    allocation: Allocation
    flavor: str | None = None
    """The quota flavor the pod's GPUs are charged to (what the cycle admitted it under)."""
    claims: tuple[ClaimWrite, ...] = ()
    """DRA: the pod's ResourceClaims with the allocation decided, written before its Binding."""


@dataclass(slots=True)
class Sources:
    """Where refresh reads the cluster: current objects by key (informer caches)."""

    nodes: Mapping[str, Json]
    pods: Mapping[str, Json]
    queues: Iterable[Queue]
    jobs: Mapping[str, Json]
    malformed_queues: Mapping[str, str] = field(default_factory=dict)
    """Queues whose objects the API's validation refuses (name -> why), left out of the tree."""


class KubeCache:
    """Owns the ClusterCache of one leading scheduler; refresh before every pass."""

    def __init__(
        self,
        *,
        config: KubeConfig,
        history: UsageHistory,
        priorities: Mapping[str, int],
        dra: KubeDra | None = None,
    ) -> None:
        self.config = config
        self.dra = dra
        """DRA's informers (None: a cache that sees no DeviceClasses, slices or claims)."""
        self._slices = SliceIndex()
        self.history = history
        self.priorities = dict(priorities)
        self.cache: ClusterCache | None = None
        self.groups: dict[str, kube_pods.Group] = {}
        self.reasons: dict[str, Reason] = {}
        """Workloads that cannot be submitted (incomplete gang, invalid request), and why."""
        self.assumed: dict[str, Assumed] = {}
        self.evicting: set[str] = set()
        """Pods the Eviction API accepted: no longer members of their workload, holding their node's
        resources until they are gone (graceful termination)."""
        self.rebuilds = 0
        self.failures = 0
        """Workloads and nodes a refresh failed on with an error no user caused (`controllers.failures`):
        each is left out until it changes, so one object does not stop every pass."""
        self.invalid_queues: dict[str, str] = {}
        """Queues left out of the quota tree, with why (warned once per change)."""
        self._members: dict[str, set[str]] = {}
        self._workload_of: dict[str, str] = {}
        self._foreign: dict[str, str] = {}
        """Foreign pods holding resources -> their node."""
        self._held_for: set[str] = set()
        """Workloads left out (`leave_out`) whose bound pods hold their resources as foreign pods."""
        self.admitted_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._dirty_nodes: set[str] = set()
        self._dirty_pods: set[str] = set()
        self._dirty_jobs: set[str] = set()
        self._rebuild = True

    # ------------------------------------------------------------------ informer handlers
    def node_changed(self, event: str, old: Json | None, new: Json | None) -> None:
        with self._lock:
            self._dirty_nodes.add(key_of(new or old or {"metadata": {"name": ""}}))

    def pod_changed(self, event: str, old: Json | None, new: Json | None) -> None:
        obj = new or old
        if obj is not None:
            with self._lock:
                self._dirty_pods.add(key_of(obj))

    def job_changed(self, event: str, old: Json | None, new: Json | None) -> None:
        obj = new or old
        if obj is not None:
            with self._lock:
                self._dirty_jobs.add(key_of(obj))

    def queues_changed(self, event: str = "", old: Json | None = None, new: Json | None = None) -> None:
        if event == "MODIFIED" and old is not None and new is not None and old.get("spec") == new.get("spec"):
            return  # a status write (the scheduler's own Valid condition) changes no quota
        with self._lock:
            self._rebuild = True

    # ------------------------------------------------------------------ refresh
    def refresh(self, sources: Sources, *, now: float, new_pods: int | None = None) -> ClusterCache:
        """Applies what changed since the last refresh and returns the cache to schedule on.

        `new_pods` caps the pods taken in that are new and wait for a node; the rest stay noted for the
        next refresh (`behind`), so a pass over a large backlog starts with part of it. Every other
        change, a bound pod first of all, is applied at once: it is capacity held."""
        with self._lock:
            rebuild, self._rebuild = self._rebuild, False
            nodes, self._dirty_nodes = self._dirty_nodes, set()
            pods, self._dirty_pods = self._dirty_pods, set()
            jobs, self._dirty_jobs = self._dirty_jobs, set()
        devices, marked = self.dra.take_marked() if self.dra is not None else (False, set())
        pods |= marked
        if rebuild or self.cache is None:
            self._start(sources)
            nodes = set(sources.nodes) | set(self._fleet.index)
            pods = set(sources.pods)
            devices = True
        if devices and self.dra is not None:
            # Slices or classes changed: every node's pools (and a DRA node's GPU count) are derived
            # again, and the pods naming claims are looked at again (a class may have appeared).
            self._slices = self.dra.slice_index()
            self._fleet.devices.set_classes(self.dra.class_specs())
            nodes |= set(sources.nodes) | set(self._fleet.index)
            pods |= {k for users in self.dra.users.values() for k in users}
        if new_pods is not None:
            later = self._later(pods, sources, new_pods)
            if later:
                pods -= later
                with self._lock:
                    self._dirty_pods |= later
        dirty_groups: set[str] = set()
        for name in sorted(nodes):
            dirty_groups |= self._sync_node_or_leave_out(name, sources.nodes.get(name))
        for key in jobs:  # a Job's size or gang annotation moves its pods between workloads
            namespace = key.partition("/")[0]
            pods |= {
                k for k, p in sources.pods.items() if k.startswith(namespace + "/") and _owned_by(p, key)
            }
        dirty_groups |= self._index_pods(pods, sources)
        # Foreign pods let go of what they held before workloads are accounted again, and take it back
        # after: a victim whose eviction was just accepted leaves its gang, whose GPUs it still holds.
        foreign = sorted(k for k in dirty_groups if k.startswith("pod/"))
        for key in foreign:
            self._release_foreign(key[4:])
        for key in sorted(dirty_groups.difference(foreign)):
            try:
                self._sync_workload(key, sources, now=now)
            except Exception as exc:
                self.leave_out(key, exc, sources)
        for key in foreign:
            self._sync_foreign(key[4:], sources.pods.get(key[4:]))
        # Claims allocated that no pod here holds (another scheduler's pods not bound yet, a previous
        # run's, pods gone and claims not yet deallocated) keep their devices from the allocator; the
        # pod a claim was allocated for takes them over when it is placed. A change of what the nodes
        # offer moves the generation: parked workloads look again.
        if (
            self.dra is not None
            and self.dra.synced
            and self._fleet.devices.pin_allocated(self.dra.allocated())
        ):
            self._fleet.generation += 1
        assert self.cache is not None
        return self.cache

    @property
    def behind(self) -> bool:
        """Whether changes are noted that no refresh has applied yet."""
        with self._lock:
            return bool(self._rebuild or self._dirty_nodes or self._dirty_pods or self._dirty_jobs)

    def _later(self, keys: set[str], sources: Sources, keep: int) -> set[str]:
        """The new pods waiting for a node beyond the first `keep` of them (by key)."""
        fresh = []
        for key in keys:
            pod = sources.pods.get(key)
            if (
                pod is not None
                and key not in self._workload_of
                and key not in self._foreign
                and key not in self.assumed
                and not pod.get("spec", {}).get("nodeName")
            ):
                fresh.append(key)
        if len(fresh) <= keep:
            return set()
        fresh.sort()
        return set(fresh[keep:])

    @property
    def _fleet(self) -> FleetState:
        assert self.cache is not None
        return self.cache.fleet

    def _start(self, sources: Sources) -> None:
        self.rebuilds += 1
        # A Queue that cannot be placed (unknown parent, a loop) is left out, not allowed to stop
        # every pass: kubectl writes Queues without the embedded API's checks.
        tree, settings, broken = placeable_quota_tree(sources.queues)
        broken = {**sources.malformed_queues, **broken}
        for name, problem in sorted(broken.items()):
            if self.invalid_queues.get(name) != problem:
                log.warning("Queue %s is left out of the quota tree: %s", name, problem)
        self.invalid_queues = broken
        fleet = FleetState(self.config.level_names(), nvlink_level=self.config.nvlink_level)
        nominated = self.cache.nominated if self.cache is not None else []
        self.cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=self.history)
        self.cache.nominated = list(nominated)
        # An evicted pod holds its node's resources until it is gone (graceful termination).
        self.cache.graceful_evictions = True
        self.groups, self.reasons = {}, {}
        self._members, self._workload_of, self._foreign = {}, {}, {}
        self._held_for = set()

    # ------------------------------------------------------------------ left out
    def _sync_node_or_leave_out(self, name: str, node: Json | None) -> set[str]:
        """`_sync_node`; a node it fails on with an error no user caused is left out of the fleet (its
        pods' workloads are accounted again) until its next change."""
        try:
            return self._sync_node(name, node)
        except Exception:
            self.failures += 1
            contained("scheduler", "node %s is left out of the fleet until it changes", name)
            fleet = self._fleet
            return self._owners(fleet.remove_node(name)) if name in fleet.index else set()

    def leave_out(self, key: str, exc: Exception, sources: Sources) -> None:
        """A workload the scheduler failed on (refreshing it, deciding on it or carrying out its
        admission) waits out of the queue, its pods saying why, until one of them changes; its bound
        pods keep what they hold, as pods of no workload do, so nothing is placed on their GPUs. The
        error is logged with its traceback and counted."""
        self.failures += 1
        contained_error("scheduler", exc, "workload %s is left out of scheduling until its pods change", key)
        cache = self.cache
        assert cache is not None
        for name in (key, key + REST):
            cache.pending.pop(name, None)
        self.reasons[key] = scheduling_error(exc)
        if key in cache.admitted:
            return  # accounted before it failed: what it holds is held
        self._held_for.add(key)
        for pod_key in sorted(self._members.get(key, ())):
            pod = sources.pods.get(pod_key)
            if pod is not None and self._node_of(pod) and kube_pods.holds_resources(pod):
                self._foreign[pod_key] = str(self._node_of(pod))
                try:
                    self._sync_foreign(pod_key, pod)
                except Exception:
                    contained("scheduler", "pod %s of %s holds resources not accounted", pod_key, key)

    def leave_out_admitted(self, key: str, exc: Exception, sources: Sources, *, now: float) -> None:
        """`leave_out` for a workload accounted as admitted (a victim the scheduler failed to evict): it
        is taken out of the cache and its bound pods hold what they hold as pods of no workload, so no
        cycle chooses it again until its pods change."""
        self._forget(key, now=now)
        self.leave_out(key, exc, sources)

    # ------------------------------------------------------------------ nodes
    def _sync_node(self, name: str, node: Json | None) -> set[str]:
        """Brings one fleet row in line with its Node; returns the workloads whose pods lost their place."""
        fleet = self._fleet
        spec = None
        pools = None
        if node is not None:
            try:
                spec = kube_nodes.node_spec(node, self.config)
            except GpuFleetError as exc:
                log.warning("node %s left out of the fleet: %s", name, exc, extra={"node": name})
        if spec is not None and self.dra is not None:
            pools = self.dra.node_pools(spec, self._slices)
            spec = self.dra.node_spec(spec, pools)
        if name in fleet.index:
            if spec is not None and nodesync.update_in_place(fleet, spec):
                fleet.set_node_devices(name, pools)
                return set()
            displaced = self._owners(fleet.remove_node(name))
            fleet.set_node_devices(name, None)
        else:
            displaced = set()
        if spec is not None:
            fleet.add_node(spec)
            fleet.set_node_devices(name, pools)
            displaced |= self._on_node(name)
        return displaced

    def _on_node(self, name: str) -> set[str]:
        """Workloads with a pod bound (or assumed) to the node: to be accounted again."""
        out = set()
        for pod_key, workload in self._workload_of.items():
            assumed = self.assumed.get(pod_key)
            if assumed is not None and assumed.node == name:
                out.add(workload)
        for group in self.groups.values():
            if any(p.get("spec", {}).get("nodeName") == name for p in group.members):
                out.add(group.key)
        out |= {foreign_name(pod_key) for pod_key, node in self._foreign.items() if node == name}
        return out

    def _owners(self, core_pods: Iterable[str]) -> set[str]:
        out = set()
        for core in core_pods:
            if core.startswith("pod/"):
                out.add(core)
            else:
                out.add(core.rsplit("/", 2)[0].removesuffix(REST))
        return out

    # ------------------------------------------------------------------ pods
    def _index_pods(self, keys: set[str], sources: Sources) -> set[str]:
        """Moves changed pods between workloads; returns the workloads (and foreign pods) to sync."""
        dirty: set[str] = set()
        for pod_key in keys:
            pod = sources.pods.get(pod_key)
            if pod is not None and self._confirmed(pod_key, pod):
                continue
            before = self._workload_of.pop(pod_key, None)
            if before is not None:
                self._members.get(before, set()).discard(pod_key)
                dirty.add(before)
            if self._foreign.pop(pod_key, None) is not None:
                dirty.add(foreign_name(pod_key))
            if pod is None:
                self.assumed.pop(pod_key, None)
                self.evicting.discard(pod_key)
                continue
            if pod.get("spec", {}).get("nodeName"):
                self.assumed.pop(pod_key, None)  # the informer caught up with the binding
            if pod_key in self.evicting:
                if kube_pods.holds_resources(pod):
                    self._foreign[pod_key] = str(pod["spec"]["nodeName"])
                    dirty.add(foreign_name(pod_key))
                continue
            try:
                member = kube_pods.membership(pod, self.config, sources.jobs)
            except GpuFleetError as exc:
                # A malformed gang label: the pod waits alone, and says why (its workload is invalid).
                log.warning("%s", exc)
                member = kube_pods.Membership(key_of(pod), 1, None)
            if member is not None:
                self._workload_of[pod_key] = member.key
                self._members.setdefault(member.key, set()).add(pod_key)
                dirty.add(member.key)
            elif kube_pods.holds_resources(pod):
                self._foreign[pod_key] = str(pod["spec"]["nodeName"])
                dirty.add(foreign_name(pod_key))
        return dirty

    def _confirmed(self, pod_key: str, pod: Json) -> bool:
        """Whether the change is only the informer catching up with a binding made here: the pod is bound
        where it was assumed and asks for what it asked before. The cache already holds it there with the
        GPUs chosen (the ones its annotation now names), so only the assumption ends and the group's copy
        of the pod is replaced; its workload is not taken apart and accounted again (Kueue's assume,
        then forget the assumption once the write is seen)."""
        assumed = self.assumed.get(pod_key)
        if assumed is None or pod.get("spec", {}).get("nodeName") != assumed.node or pod_key in self.evicting:
            return False
        if not kube_pods.holds_resources(pod) or pod["metadata"].get("deletionTimestamp"):
            return False
        group = self.groups.get(self._workload_of.get(pod_key, ""))
        if group is None:
            return False
        for i, member in enumerate(group.members):
            if key_of(member) == pod_key:
                if not kube_pods.same_request(member, pod):
                    return False
                group.members[i] = pod
                del self.assumed[pod_key]
                return True
        return False

    def _sync_workload(self, key: str, sources: Sources, *, now: float) -> None:
        if key.startswith("pod/"):
            self._sync_foreign(key[4:], sources.pods.get(key[4:]))
            return
        if key in self._held_for:  # left out before: its pods' holds end, it is accounted again
            self._held_for.discard(key)
            for pod_key in self._members.get(key, ()):
                if self._foreign.pop(pod_key, None) is not None:
                    self._release_foreign(pod_key)
        self._forget(key, now=now)
        members = [sources.pods[k] for k in sorted(self._members.get(key, ())) if k in sources.pods]
        if not members:
            self._members.pop(key, None)
            self.admitted_at.pop(key, None)
            return
        first = members[0]
        try:
            member = kube_pods.membership(first, self.config, sources.jobs)
        except GpuFleetError as exc:
            member = None
            self.reasons[key] = Reason(INVALID, str(exc))
        if member is None:
            return
        group = kube_pods.Group(
            key, first["metadata"].get("namespace") or "default", member.size, member.min_size
        )
        group.members = members
        self.groups[key] = group
        try:
            workload = kube_pods.workload(group, self.config, self.priorities)
        except GpuFleetError as exc:
            self.reasons[key] = Reason(INVALID, str(exc))
            return
        try:
            if self.dra is not None:
                workload = self.dra.with_claims(
                    workload, self._pod_sets(group), self._fleet, self._workload_of.get
                )
        except GpuFleetError as exc:  # as the embedded world says it
            kind = CLAIMS_NOT_READY if isinstance(exc, ClaimsNotReady) else INVALID_CLAIMS
            self.reasons[key] = Reason(kind, str(exc))
            return
        placed = {key_of(p): p for p in members if self._node_of(p)}
        if placed:
            self._admit_placed(workload, group, placed, now=now)
        elif not group.complete:
            self.reasons[key] = Reason(
                WAITING_FOR_GANG,
                f"{len(members)} of {group.size} pods of gang {key} exist",
                {"present": len(members), "size": group.size},
            )
        else:
            assert self.cache is not None
            self.cache.submit(workload)

    @staticmethod
    def _pod_sets(group: kube_pods.Group) -> dict[str, list[Json]]:
        """Each pod set's pods in the core's order (pod `i` is `{workload}/{podSet}/{i}`)."""
        out: dict[str, list[Json]] = {}
        for _, pod in sorted(group.by_core_name().items(), key=lambda item: int(item[0].rsplit("/", 1)[1])):
            out.setdefault(kube_pods.pod_set_of(pod), []).append(pod)
        return out

    def _forget(self, key: str, *, now: float) -> None:
        """Takes a workload (and its completion) out of the cache, freeing what it held."""
        cache = self.cache
        assert cache is not None
        self.groups.pop(key, None)
        self.reasons.pop(key, None)
        for name in (key, key + REST):
            cache.pending.pop(name, None)
            admitted = cache.admitted.get(name)
            if admitted is not None:
                for core in list(admitted.pods):
                    if core not in cache.fleet.allocations:
                        del admitted.pods[core]  # its node went away
                # Taken out to be accounted again from the API's objects: the charges of shared
                # claims are derived from their `reservedFor` then (`dra.charge`), not handed over.
                cache.finish(name, now=now, hand_over=False)

    def core_pods(self, workload: str) -> dict[str, Json]:
        """The pods behind a core workload's pod names (for `{gang}#rest`: the gang's unbound members)."""
        key = workload.removesuffix(REST)
        group = self.groups.get(key)
        if group is None:
            return {}
        if key == workload:
            return group.by_core_name()
        out: dict[str, Json] = {}
        waiting = sorted(
            (p for p in group.members if self._node_of(p) is None), key=lambda p: p["metadata"]["name"]
        )
        for pod_set in sorted({kube_pods.pod_set_of(p) for p in waiting}):
            same = [p for p in waiting if kube_pods.pod_set_of(p) == pod_set]
            out.update({f"{workload}/{pod_set}/{i}": p for i, p in enumerate(same)})
        return out

    def assume(
        self,
        pod: Json,
        node: str,
        allocation: Allocation,
        flavor: str | None = None,
        claims: tuple[ClaimWrite, ...] = (),
    ) -> None:
        """Counts a pod as bound to `node` until the informer shows it so."""
        self.assumed[key_of(pod)] = Assumed(node, allocation, flavor, claims)

    def mark(self, pod_key: str) -> None:
        """Looks at a pod again at the next refresh (an assumption dropped, a bind that failed)."""
        with self._lock:
            self._dirty_pods.add(pod_key)

    def _node_of(self, pod: Json) -> str | None:
        node = pod.get("spec", {}).get("nodeName")
        if node:
            return str(node)
        assumed = self.assumed.get(key_of(pod))
        return assumed.node if assumed is not None else None

    def _admit_placed(
        self, workload: Workload, group: kube_pods.Group, placed: dict[str, Json], *, now: float
    ) -> None:
        """Admits a workload with what its bound (or assumed) pods hold; completes a partial gang."""
        cache = self.cache
        assert cache is not None
        names = group.by_core_name()
        requests = {ps.name: ps.request for ps in workload.pod_sets}
        charged = {ps.name: bool(ps.charges) for ps in workload.pod_sets}
        counts = {ps.name: 0 for ps in workload.pod_sets}
        allocations: list[Allocation] = []
        model: str | None = None
        derived: str | None = None
        missing: dict[str, int] = {ps.name: 0 for ps in workload.pod_sets}
        for core_name, pod in sorted(names.items()):
            pod_set = kube_pods.pod_set_of(pod)
            if key_of(pod) not in placed:
                missing[pod_set] += 1
                continue
            alloc = self._hold(pod, core_name, requests[pod_set])
            if alloc is None:
                continue
            allocations.append(alloc)
            counts[pod_set] += 1
            # a pod set charged for a shared claim's GPUs takes its flavor too, though its pods ask none
            if (requests[pod_set].total_gpu_milli or charged[pod_set]) and model is None:
                # One flavor for the whole workload, as the cycle assigns it: the first pod's that was
                # noted at bind time, else the one the first pod's node implies.
                flavor, noted = self._admitted_flavor(workload.queue, pod, alloc.node)
                if noted:
                    model = flavor
                elif derived is None:
                    derived = flavor
        for alloc in allocations:  # cache.admit takes them again
            cache.fleet.release(alloc.pod)
        if workload.queue not in cache.tree.nodes:
            log.warning(
                "workload %s runs in unknown queue %s; its quota is not counted",
                workload.name,
                workload.queue,
            )
            for alloc in allocations:
                cache.fleet.reinstate(alloc)
            return
        model = model or derived
        order = tuple(counts[ps.name] for ps in workload.pod_sets)
        assignment = Assignment(model, order, usage_of(workload, model, order))
        admitted = cache.admit(workload, assignment, allocations, now=now)
        started = self.admitted_at.setdefault(workload.name, _started(placed.values()) or now)
        admitted.workload = dataclasses.replace(admitted.workload, admitted_at=started)
        if any(missing.values()):
            self._submit_rest(workload, missing, allocations)

    def _admitted_flavor(self, queue: str, pod: Json, row: int) -> tuple[str | None, bool]:
        """The flavor a bound pod's GPUs were admitted under, and whether it was noted rather than derived.

        Noted: the flavor the scheduler assumed, or wrote on the pod when binding it, while the queue still
        has it for the node's GPU model. Derived, as the cycle assigns flavors: the queue's first flavor
        (in its order) of the node's model that selects the node (a plain model selects every node of the
        model; `MODEL/spot` only nodes labelled `gpufleet.io/capacity-type: spot`); the plain model in an
        unlimited queue (it tries models) or when none of the queue's flavors selects the node.
        """
        cache = self.cache
        assert cache is not None
        spec = cache.fleet.specs[row]
        model = spec.gpu_model
        if not model:
            return None, False
        quota = cache.tree.nodes.get(queue)
        flavors = [] if quota is None or quota.unlimited else list(quota.quotas)
        assumed = self.assumed.get(key_of(pod))
        noted = assumed.flavor if assumed is not None and assumed.flavor else kube_pods.recorded_flavor(pod)
        if (
            noted is not None
            and model_of(noted) == model
            and (noted in flavors if flavors else noted == model)
        ):
            return noted, True
        derived = node_flavor(flavors, model, spec.labels.get(CAPACITY_TYPE_LABEL))
        return (derived if derived is not None else model), False

    def _submit_rest(self, workload: Workload, missing: Mapping[str, int], placed: list[Allocation]) -> None:
        """The unbound members of a partly bound gang, as a workload of their own that must all start."""
        cache = self.cache
        assert cache is not None
        domain = self._domain_of(workload, placed)
        sets = []
        for ps in workload.pod_sets:
            if missing.get(ps.name):
                request = ps.request
                if domain:
                    request = dataclasses.replace(
                        request, node_selector=tuple(sorted({*request.node_selector, domain}))
                    )
                sets.append(PodSet(ps.name, missing[ps.name], request, None))
        rest = dataclasses.replace(
            workload, name=workload.name + REST, pod_sets=tuple(sets), admitted_at=None
        )
        cache.submit(rest)

    def _domain_of(self, workload: Workload, placed: list[Allocation]) -> tuple[str, str] | None:
        """For a required topology level, the (label, value) every member must share."""
        level = workload.topology.required
        if not level or not placed:
            return None
        fleet = self._fleet
        if level in ("host", "nvlink"):
            return ("kubernetes.io/hostname", fleet.names[placed[0].node])
        value = fleet.specs[placed[0].node].labels.get(level)
        return (level, value) if value is not None else None

    def _hold(self, pod: Json, name: str, request: PodRequest) -> Allocation | None:
        """Records what a bound (or assumed) pod holds: its annotated or assumed GPUs, else GPUs chosen."""
        fleet = self._fleet
        node = self._node_of(pod)
        if node is None or node not in fleet.index:
            return None
        row = fleet.row_of(node)
        assumed = self.assumed.get(key_of(pod))
        try:
            if assumed is not None and assumed.node == node and assumed.allocation.node == row:
                return fleet.reinstate(dataclasses.replace(assumed.allocation, pod=name))
            # DRA: the devices its claims' status names (own claims' devices, shared claims joined).
            devices, shared = self.dra.held_by(pod, node) if self.dra is not None else ((), ())
            noted = parse_allocation_annotation(pod)
            if noted and "mig" in noted and request.mig:
                slot = noted["mig"]
                mig = MigSlot(int(slot["gpu"]), str(slot["profile"]), int(slot["start"]))
                return fleet.reinstate(
                    Allocation(name, row, (), 0, request.cpu_milli, request.memory_mib, mig, devices, shared)
                )
            if noted and "gpus" in noted and request.total_gpu_milli:
                gpus = tuple(int(g) for g in noted["gpus"])
                return fleet.allocate(name, row, request, gpus, devices=devices, shared=shared)
            choice = choose_gpus(fleet, row, request)
            return fleet.allocate(
                name, row, request, choice.gpus, mig_gpu=choice.mig_gpu, devices=devices, shared=shared
            )
        except (AllocationError, GpuFleetError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            # Over-committed already (a node that shrank, a stale annotation): keep the CPU and memory.
            log.warning(
                "pod %s: its GPUs on %s cannot be accounted exactly (%s)", key_of(pod), node, exc,
                extra={"node": node},
            )  # fmt: skip
            try:
                fallback = PodRequest(cpu_milli=request.cpu_milli, memory_mib=request.memory_mib)
                return fleet.allocate(name, row, fallback)
            except AllocationError:
                return None

    def _release_foreign(self, pod_key: str) -> None:
        cache = self.cache
        assert cache is not None
        name = foreign_name(pod_key)
        cache.leaving.discard(name)
        if name in cache.fleet.allocations:
            cache.fleet.release(name)

    def _sync_foreign(self, pod_key: str, pod: Json | None) -> None:
        self._release_foreign(pod_key)
        if pod is not None and pod_key in self._foreign:
            try:
                request = kube_pods.pod_request(pod, self.config)
            except GpuFleetError:
                amounts = kube_pods.effective_requests(pod)
                request = PodRequest(cpu_milli=amounts.get("cpu", 0), memory_mib=amounts.get("memory", 0))
            held = self._hold(pod, foreign_name(pod_key), request)
            if held is not None and (pod_key in self.evicting or pod["metadata"].get("deletionTimestamp")):
                # On its way out (evicted, or deleted): capacity to come, for the core (decision 23).
                assert self.cache is not None
                self.cache.leaving.add(held.pod)


def _owned_by(pod: Json, job_key: str) -> bool:
    name = job_key.partition("/")[2]
    return any(
        o.get("kind") == "Job" and o.get("name") == name for o in pod["metadata"].get("ownerReferences") or []
    )


def _started(pods: Iterable[Json]) -> float | None:
    starts = [kube_pods.seconds(p.get("status", {}).get("startTime")) for p in pods]
    known = [s for s in starts if s is not None]
    return min(known) if known else None
