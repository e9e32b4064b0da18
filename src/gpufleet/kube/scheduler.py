"""The secondary scheduler: every Pod with `schedulerName: gpufleet`, decided by the scheduling core.

The core's cache is kept incrementally from the informers (`kube.cache`), so fair-share history,
parked workloads and in-flight assumptions live as long as this replica leads. Each pass refreshes
what changed, then runs the cycle loop the embedded world runs (`controllers.decisions.run_cycles`)
with this world's carrier:

- admit: the admission is assumed in the cache, then each pod's Binding goes to the binder
  (`kube.binder`), which writes it off this thread with the pod's GPUs and quota flavor as annotations
  (`gpufleet.io/gpus`, `gpufleet.io/flavor`); a gang only when the cycle admitted all of it. The next
  decisions never wait for the API server. A bind refused for good (pod gone, bound elsewhere) drops
  the assumption and the workload is looked at again; a bind that failed for a transient reason is
  retried, on the same node, so a gang is always completed.
- preempt: victims are asked to leave through the Eviction API (PodDisruptionBudgets apply); until
  they are gone they keep holding their node's resources, as does every pod being deleted. That is
  capacity to come (the core's rule, docs/scheduling.md decision 23): their preemptor, and any other
  workload that fits once they are gone, waits for them (`WaitingForPreemption`) instead of looking for
  more victims, and is tried first once they are gone. A preemptor one of whose evictions a budget
  refused sits the rest of the pass out (it would be refused again) and asks again the next pass.
- pending: the last cycle's reasons go to the pods' `PodScheduled` condition, an Event, and the
  owning gpufleet object's `status.pendingReason`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.api import evictions
from gpufleet.api.errors import GpuFleetError
from gpufleet.controllers import lifecycle
from gpufleet.controllers.decisions import Carrier, Outcome, run_cycles
from gpufleet.controllers.failures import contained
from gpufleet.controllers.queuestatus import queue_reason
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.fleet.state import Allocation, FleetState
from gpufleet.kube import claim_writes, disruptions
from gpufleet.kube import pods as kube_pods
from gpufleet.kube import queues as kube_queues
from gpufleet.kube.actions import Actions
from gpufleet.kube.binder import DEFAULT_WORKERS, Binder, BindResult
from gpufleet.kube.cache import INVALID, REST, WAITING_FOR_GANG, KubeCache, Sources
from gpufleet.kube.claim_writes import ClaimWrite
from gpufleet.kube.claims import claim_refs
from gpufleet.kube.config import QUEUE_LABEL, KubeConfig
from gpufleet.kube.dra import KubeDra
from gpufleet.kube.informer import Informer, Informers, key_of
from gpufleet.kube.resources import JOB, resource_for
from gpufleet.kube.runends import RunEnds
from gpufleet.kube.scheduler_informers import scheduler_informers
from gpufleet.kube.transport import ApiError, Json, Transport
from gpufleet.observability import metrics, tracing
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.cycle import CycleResult, Scheduler
from gpufleet.scheduler.explain import WAITING_FOR_PREEMPTION, Admit, Preempt, Reason
from gpufleet.scheduler.flavors import pod_usage
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueingStrategy, QueueSettings, UsageHistory
from gpufleet.scheduler.workload import Workload

log = logging.getLogger(__name__)

__all__ = ["INVALID", "WAITING_FOR_GANG", "KubeScheduler", "PassStats"]

LISTING_INTAKE = 1000
"""New pending pods a pass takes in while the pods are being listed: the first binds need not wait for
the cache to take in the whole backlog listed by then."""
ADMIT_ONLY = PreemptionPolicy(
    within_queue="Never", reclaim_within_cohort="Never", borrow_within_cohort="Never"
)
"""Queue settings' preemption while the pods are being listed: none."""

FIRST_BATCH = 8
"""Admissions of a pass's first cycle (each next cycle doubles it): the first binds go out while the
rest of a large backlog is still being decided. At thousands of nodes each admission scores every
node, so the first cycle is kept to a few: 8, 16, 32... reach a backlog of 10,000 in 11 cycles."""


class _Items(Mapping[str, Json]):
    """An informer's cache as a read-only mapping by key."""

    def __init__(self, informer: Informer) -> None:
        self._informer = informer

    def __getitem__(self, key: str) -> Json:
        found = self._informer.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._informer.keys())

    def __len__(self) -> int:
        return len(self._informer.keys())


@dataclass(frozen=True, slots=True)
class _Retry:
    """A binding to try again: at once after its first failure, then after 0.5 s doubling up to 10 s."""

    core_name: str
    failures: int
    delay: float
    due: float

    @classmethod
    def after(cls, before: _Retry | None, core_name: str) -> _Retry:
        failures = 1 if before is None else before.failures + 1
        delay = 0.0 if failures == 1 else min(10.0, 0.5 * 2 ** (failures - 2))
        return cls(core_name, failures, delay, time.monotonic() + delay)


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
        bind_workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.config = config or KubeConfig()
        self.scheduler_config = scheduler or SchedulerConfig()
        self.scheduler = Scheduler(self.scheduler_config)
        self.informers = informers or Informers(transport)
        self.nodes, self.pods = scheduler_informers(self.informers)  # already listing, if started first
        self.queues: Informer = self.informers.informer(resource_for("Queue"))
        self.jobs: Informer = self.informers.informer(JOB)
        self.actions = Actions(transport, identity=identity, grace_seconds=self.config.eviction_grace_seconds)
        self.history = UsageHistory(self.scheduler_config.fair_sharing.half_life_seconds)
        priorities = dict(self.scheduler_config.priority_classes) | self.config.priority_classes
        self.dra = KubeDra(self.informers)
        self.kcache = KubeCache(config=self.config, history=self.history, priorities=priorities, dra=self.dra)
        self.gone_claims: dict[str, list[tuple[str, str]]] = {}
        """Pods deleted or finished (uid -> their claims): they leave the claims' `reservedFor` next pass."""
        self.retry_binds: dict[str, _Retry] = {}
        """Pods whose binding failed for a transient reason, retried on the same node with backoff
        (the binding may have gone through unanswered, so the place stays theirs)."""
        self.refused: dict[str, Workload] = {}
        """This pass's preemptors an eviction was refused for (a PodDisruptionBudget): asked again in
        the same pass, it would be refused again, so they sit the pass out and are tried next pass."""
        self.malformed_queues: dict[str, str] = {}
        """Queues whose objects the API's validation refuses, as last read (name -> why)."""
        self.clock = clock
        self.period = period
        self.stats = PassStats()
        self._listing = False
        """Whether the last pass ran while the pods were still being listed (see `_cycles`)."""
        self._changed = threading.Event()
        self.pass_lock = threading.Lock()
        """Held for each pass: what reads the fleet from another thread (a federation worker's
        heartbeat, `fleet_copy`) sees it between passes, never half changed."""
        self._gone_lock = threading.Lock()
        self.binder = Binder(self.actions, workers=bind_workers, on_done=self._changed.set)
        self.run_ends = RunEnds(
            self.config,
            pods=self.pods.items,
            node=self.nodes.get,
            jobs=lambda: _Items(self.jobs),
        )
        """Runs of its gangs (not TrainingJobs') ended by a drain, a lost node or a failed GPU."""
        self.nodes.add_handler(self._note(self.kcache.node_changed))
        self.pods.add_handler(self.run_ends.pod_changed)
        self.pods.add_handler(self._note(self.kcache.pod_changed))
        self.jobs.add_handler(self._note(self.kcache.job_changed))
        self.queues.add_handler(self._note(self.kcache.queues_changed))
        self.pods.add_handler(self._pod_ended)
        self.dra.classes.add_handler(self._note(self.dra.devices_changed))
        self.dra.slices.add_handler(self._note(self.dra.devices_changed))
        self.dra.claims.add_handler(self._note(self.dra.claim_changed))

    def _pod_ended(self, event: str, old: Json | None, new: Json | None) -> None:
        """A pod with claims that was deleted or has finished: its reservations are to be released."""
        pod = new if new is not None else old
        if pod is None or not (pod.get("spec") or {}).get("resourceClaims"):
            return
        ended = event == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        uid = pod["metadata"].get("uid")
        if not ended or not uid:
            return
        namespace = pod["metadata"].get("namespace") or "default"
        try:
            claims = [(namespace, ref.claim) for ref in claim_refs(pod) if ref.claim is not None]
        except GpuFleetError:
            return
        with self._gone_lock:
            self.gone_claims[uid] = claims
        if event == "DELETED":
            self.dra.forget(key_of(pod), [f"{namespace}/{name}" for namespace, name in claims])
        self._changed.set()

    def _release_claims(self) -> None:
        """The reservations of pods that are gone or finished leave their claims (a claim reserved for no
        one is deallocated), as the resource-claim controller does; its devices are free again."""
        with self._gone_lock:
            gone, self.gone_claims = self.gone_claims, {}
        for uid, claims in gone.items():
            try:
                claim_writes.unreserve(self.actions.api, uid, claims)
            except (ApiError, GpuFleetError) as exc:
                log.warning("releasing the claims %s of pod %s failed (%s); retried", claims, uid, exc)
                with self._gone_lock:
                    self.gone_claims.setdefault(uid, claims)

    def _note(self, handler: Callable[[str, Json | None, Json | None], None]) -> Callable[..., None]:
        def note(event: str, old: Json | None, new: Json | None) -> None:
            handler(event, old, new)
            self._changed.set()

        return note

    # ------------------------------------------------------------------ the loop
    def run(self, lost: threading.Event) -> None:
        """Schedules until `lost` is set (leadership gone or shutdown); informers must be started.

        Binds already started are let finish: each was decided while leading."""
        # An unreachable API server must not hold a shutdown. The pods need only be ready: the bound
        # ones are known, and the pending ones arrive page by page while passes run (`_cycles`).
        # DRA's informers are not waited for: a cluster that serves no resource.k8s.io/v1 (before 1.34)
        # schedules as before, and pods naming claims wait until they are listed (`KubeDra.synced`).
        while not all(i.wait_until_ready(0.5) for i in (self.nodes, self.pods, self.queues, self.jobs)):
            if lost.is_set():
                return
        self.kcache.queues_changed()  # a new term starts from a full picture
        self.run_ends.clear()
        try:
            self._loop(lost)
        finally:
            self.binder.close(wait=True)

    def _loop(self, lost: threading.Event) -> None:
        while not lost.is_set():
            self._changed.clear()
            try:
                with self.pass_lock:
                    self.schedule_once()
            except Exception:  # a pass that fails is retried from a fresh picture; the loop must live
                self.stats.errors += 1
                self.kcache.queues_changed()
                contained("scheduler", "scheduling pass failed; the next starts from a fresh picture")
            self._changed.wait(self.period)
            lost.wait(0.2)  # let a burst of informer events settle into one pass

    def fleet_copy(self) -> FleetState | None:
        """The fleet as the last pass left it (None before the first pass), for another thread."""
        with self.pass_lock:
            cache = self.kcache.cache
            return None if cache is None else cache.fleet.copy()

    def schedule_once(self) -> CycleResult | None:
        """One pass: refresh what changed, run the shared cycle loop, say why the rest waits."""
        now = self.clock()
        self._collect_binds()
        listing = not self.pods.synced
        cache = self.kcache.refresh(self._sources(), now=now, new_pods=LISTING_INTAKE if listing else None)
        if self.kcache.behind:
            self._changed.set()  # what this pass left is the next one's
        self._retry_binds()
        self._release_claims()
        self.run_ends.count()
        self.refused = {}
        outcome = self._cycles(cache, now, listing=listing)
        for name, workload in self.refused.items():
            cache.pending.setdefault(name, workload)
        self.stats.passes += 1
        self.pods.release_pages()  # the first pass is over: the rest of the first list may come
        self._collect_binds()
        if listing:  # reasons and counts said now would be about a partial picture
            return outcome.last
        self._explain(outcome.last)
        kube_queues.report(
            self.actions, self.queues.items(), self.kcache, malformed=self.malformed_queues, now=now
        )
        return outcome.last

    def _cycles(self, cache: ClusterCache, now: float, *, listing: bool) -> Outcome:
        """The pass's cycles. While the pending pods are still being listed (the first list comes in
        pages, after every bound pod), the pods listed so far are scheduled as if they had just arrived,
        into free capacity only: no victim is chosen and strict-FIFO queues and the rests of partly
        bound gangs wait, since a pod not listed yet may come before them or outrank a victim. The first
        pass after the list is complete judges every workload afresh under the queues' own settings."""
        if not listing and self._listing:
            cache.replace_settings(cache.settings)
        self._listing = listing
        if not listing:
            return self._run_cycles(cache, now)
        settings = cache.settings
        held = {
            name: workload
            for name, workload in cache.pending.items()
            if name.endswith(REST) or _strict(settings.get(workload.queue))
        }
        for name in held:
            del cache.pending[name]
        cache.settings = {name: dataclasses.replace(s, preemption=ADMIT_ONLY) for name, s in settings.items()}
        try:
            return self._run_cycles(cache, now)
        finally:
            cache.settings = settings
            cache.pending.update(held)

    def _run_cycles(self, cache: ClusterCache, now: float) -> Outcome:
        return run_cycles(
            scheduler=self.scheduler,
            cache=cache,
            carrier=Carrier(
                preempt=self._preempt,
                admit=self._admit,
                leave_out=self._leave_out,
                trace_uid=self._trace_uid,
            ),
            now=now,
            max_cycles=self.scheduler_config.max_cycles,
            batch=FIRST_BATCH,
        )

    def _sources(self) -> Sources:
        queues, self.malformed_queues = kube_queues.parse_queues(self.queues.items())
        return Sources(
            nodes=_Items(self.nodes),
            pods=_Items(self.pods),
            queues=queues,
            jobs=_Items(self.jobs),
            malformed_queues=self.malformed_queues,
        )

    def _log_context(self, pod_key: str, core_name: str, node: str) -> dict[str, object]:
        """The context fields of a line about one of a workload's pods (docs/observability.md)."""
        context: dict[str, object] = {"workload": core_name.rsplit("/", 2)[0], "node": node}
        pod = self.pods.get(pod_key)
        if pod is not None:
            context["queue"] = (pod["metadata"].get("labels") or {}).get(
                QUEUE_LABEL, self.config.default_queue
            )
            uid = trace_uid(pod)
            if uid:
                context["trace_id"] = tracing.trace_id(uid)
        return context

    # ------------------------------------------------------------------ the carrier
    def _trace_uid(self, name: str) -> str | None:
        """The uid a workload's trace is named after: what its pods belong to (`trace_uid`)."""
        group = self.kcache.groups.get(name.removesuffix(REST))
        return trace_uid(group.members[0]) if group is not None and group.members else None

    def _leave_out(self, name: str, exc: Exception) -> None:
        """A workload (or the rest of a partly bound gang) the scheduler failed on waits out of the
        queue, its pods saying why, until one of them changes (`KubeCache.leave_out`)."""
        self.kcache.leave_out(name.removesuffix(REST), exc, self._sources())

    def _admit(self, admit: Admit, now: float) -> None:
        cache = self.kcache.cache
        assert cache is not None
        workload = cache.pending.get(admit.workload)
        if workload is None:
            return
        cache.admit(workload, admit.assignment, admit.allocations, now=now)  # assume
        # Every pod's bind is worked out before any goes to the binder: a gang is bound whole or not at
        # all. An error no user caused there leaves this workload out (its pods say why) until its pods
        # change, instead of failing every pass at it while the workloads behind it wait.
        try:
            binds = self._binds(workload, admit)
        except Exception as exc:
            cache.evict(admit.workload, now=now)
            self._leave_out(admit.workload, exc)
            return
        self.kcache.admitted_at.setdefault(admit.workload.removesuffix(REST), now)
        for pod, alloc, flavor, claims in binds:
            self.kcache.assume(pod, cache.fleet.names[alloc.node], alloc, flavor, claims)
            self._bind(pod, alloc.pod)

    def _binds(
        self, workload: Workload, admit: Admit
    ) -> list[tuple[Json, Allocation, str | None, tuple[ClaimWrite, ...]]]:
        """Each admitted pod with its allocation, the quota flavor it is charged to and its claims."""
        pods = self.kcache.core_pods(admit.workload)
        requests = {ps.name: ps.request for ps in workload.pod_sets}
        binds = []
        for index, alloc in enumerate(admit.allocations):
            pod = pods.get(alloc.pod)
            if pod is None:
                continue
            claims = _claim_writes(pod, admit.claims[index] if index < len(admit.claims) else ())
            # The flavor the pod is charged to goes with it, so a later scheduler charges the same one.
            request = requests.get(kube_pods.pod_set_of(pod))
            charged = pod_usage(request, admit.assignment.model) if request is not None else None
            binds.append((pod, alloc, charged[0] if charged is not None else None, claims))
        return binds

    def _bind(self, pod: Json, core_name: str) -> None:
        key = key_of(pod)
        assumed = self.kcache.assumed.get(key)
        if assumed is None:
            return
        alloc = assumed.allocation
        noted = {kube_pods.FLAVOR_ANNOTATION: assumed.flavor} if assumed.flavor else None
        self.binder.submit(
            pod, core_name, assumed.node, alloc if alloc.gpus or alloc.mig else None, noted, assumed.claims
        )

    def _collect_binds(self) -> None:
        """What became of the binds that finished since the last pass."""
        for done in self.binder.drain():
            failed = self.retry_binds.pop(done.key, None)
            if done.result is BindResult.BOUND:
                self.stats.bound += 1
                if tracing.enabled():
                    pod = self.pods.get(done.key)
                    uid = trace_uid(pod) if pod is not None else None
                    workload = done.core_name.rsplit("/", 2)[0]
                    lifecycle.bound(uid, workload=workload, nodes=[done.node], pods=1, now=self.clock())
            elif done.result is BindResult.REFUSED:  # gone, or bound elsewhere: what the pods say decides
                self.kcache.assumed.pop(done.key, None)
                self.kcache.mark(done.key)
            else:
                retry = _Retry.after(failed, done.core_name)
                self.retry_binds[done.key] = retry
                log.warning(
                    "binding %s to %s failed (%s); retrying in %.1fs",
                    done.key, done.node, done.error, retry.delay,
                    extra=self._log_context(done.key, done.core_name, done.node),
                )  # fmt: skip

    def _retry_binds(self) -> None:
        now = time.monotonic()
        for key, retry in sorted(self.retry_binds.items()):
            pod = self.pods.get(key)
            if pod is None or kube_pods.is_bound(pod) or key not in self.kcache.assumed:
                self.retry_binds.pop(key, None)
            elif retry.due <= now:
                self._bind(pod, retry.core_name)

    def _preempt(self, preempt: Preempt, now: float) -> None:
        try:
            self._evict(preempt)
        except Exception as exc:
            # An error no user caused: the victim is left out (what its pods hold stays held, and it is
            # no victim again) until its pods change, instead of failing every pass at it.
            self.kcache.leave_out_admitted(preempt.victim.removesuffix(REST), exc, self._sources(), now=now)
        # The victims leave the cache now, holding their resources until they are gone: capacity to
        # come, which their preemptor (and whoever else fits in it) waits for in the next cycles.
        self.kcache.refresh(self._sources(), now=now)

    def _evict(self, preempt: Preempt) -> None:
        members = self.kcache.core_pods(preempt.victim)
        chosen = (
            list(members.values()) if preempt.whole else [members[p] for p in preempt.pods if p in members]
        )
        cache = self.kcache.cache
        assert cache is not None
        victim = cache.admitted.get(preempt.victim)
        refused, evicted = False, 0
        for pod in chosen:
            if not (kube_pods.is_bound(pod) or key_of(pod) in self.kcache.assumed):
                continue
            self.run_ends.preempting(pod)
            if self.actions.evict(pod, reason=evictions.PREEMPTED, message=preempt.message):
                self.stats.evicted += 1
                evicted += 1
                self.kcache.evicting.add(key_of(pod))
                self.kcache.mark(key_of(pod))
            else:
                refused = True
        # The run ends when its last member goes: after a refusal (a disruption budget) the gang is
        # chosen again and counted then, once. A shrink, or an elastic gang's unbound rest, ends no run.
        ends_run = preempt.whole and evicted > 0 and not refused and not preempt.victim.endswith(REST)
        if ends_run and victim is not None and not disruptions.counted_by_operator(chosen):
            metrics.record_eviction(victim.queue, evictions.PREEMPTED)
        workload = cache.pending.pop(preempt.preemptor, None) if refused and preempt.preemptor else None
        if workload is not None:
            self.refused[preempt.preemptor] = workload

    # ------------------------------------------------------------------ reasons
    def _explain(self, result: CycleResult | None) -> None:
        reasons: dict[str, Reason] = dict(self.kcache.reasons)
        if result is not None:
            reasons.update(
                {name: self._queue_first(name, pending.reason) for name, pending in result.pending.items()}
            )
        for name in self.refused:
            message = "an eviction of its victims was refused for now (a PodDisruptionBudget); asked again"
            reasons[name] = Reason(WAITING_FOR_PREEMPTION, message, {"refused": True})
        self.stats.pending = 0
        for name, reason in reasons.items():
            group = self.kcache.groups.get(name.removesuffix(REST))
            if group is None:
                continue
            self.stats.pending += 1
            for pod in group.members:
                if not kube_pods.is_bound(pod) and key_of(pod) not in self.kcache.assumed:
                    self.actions.pending(pod, reason_type=reason.type, message=reason.message)
            if not (name.endswith(REST) and group.min_size is not None):
                # The rest of an elastic gang waits; the gang runs with what it was admitted.
                self._owner_reason(group, reason)

    def _queue_first(self, name: str, reason: Reason) -> Reason:
        """A workload whose queue is missing, left out of the quota tree or not a leaf waits for that,
        whatever the core said (it sees only that the queue is not a leaf of its tree)."""
        cache = self.kcache.cache
        workload = cache.pending.get(name) if cache is not None else None
        if cache is None or workload is None:
            return reason
        return queue_reason(cache.tree, self.kcache.invalid_queues, workload.queue) or reason

    def _owner_reason(self, group: kube_pods.Group, reason: Reason) -> None:
        owners = group.members[0]["metadata"].get("ownerReferences") or []
        for owner in owners:
            if str(owner.get("apiVersion", "")).startswith("gpufleet.io/"):
                details = _plain(dict(reason.details))
                status = {
                    "phase": "Pending",
                    "pendingReason": {"type": reason.type, "message": reason.message, "details": details},
                }
                # Per gang: a new attempt's gang is explained again even where an earlier one was
                # told the same, since its owner's status was reset in between.
                text = group.key + " " + json.dumps(status, sort_keys=True)
                said = (group.namespace, f"owner:{owner.get('kind')}/{owner.get('name')}")
                if self.actions.said.get(said) == text:
                    continue
                self.actions.owner_status(owner, group.namespace, status)
                self.actions.said[said] = text


def _claim_writes(pod: Json, allocations: Sequence[ClaimAllocation]) -> tuple[ClaimWrite, ...]:
    """The pod's claims with their allocations: the core's are in `spec.resourceClaims` order, under the
    core's names, the pod's own claims here under the names the controller manager gave them."""
    if not allocations:
        return ()
    namespace = pod["metadata"].get("namespace") or "default"
    refs = claim_refs(pod)
    return tuple(
        ClaimWrite.of(namespace, ref.claim, allocation)
        for ref, allocation in zip(refs, allocations, strict=True)
        if ref.claim is not None
    )


def _strict(settings: QueueSettings | None) -> bool:
    return settings is not None and settings.strategy is QueueingStrategy.STRICT_FIFO


def _plain(details: Mapping[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(details, default=str)))


def trace_uid(pod: Json) -> str | None:
    """The uid that names the trace of a pod's workload: its controller's (a TrainingJob, which the
    operator traces under the same uid, or a Job), so every attempt's gang joins one trace; else the
    pod's own."""
    meta = pod.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller") and owner.get("uid"):
            return str(owner["uid"])
    uid = meta.get("uid")
    return str(uid) if uid else None
