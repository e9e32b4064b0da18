"""Elastic growth in the embedded world: a workload running short is restarted larger at a checkpoint.

The core admits an elastic workload with as many pods as fit (at least its minimum) and shrinks it
toward the minimum before evicting anyone, but never grows an admitted one. So the embedded world
does, by restart at the larger size right after the workload checkpoints, and only while nothing else
waits. Until then a workload that could grow is marked with the pools whose new nodes would give it
its missing pods (`status.nodeDemand`), so that a pool replaces a spot node taken from under it.
"""

from __future__ import annotations

from gpufleet.api.runtime import NodeDemand
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import capacity, events
from gpufleet.controllers.failures import contained_error
from gpufleet.controllers.scheduling.actions import Actions
from gpufleet.controllers.scheduling.state import SOURCE, SchedulingState, gone
from gpufleet.controllers.scheduling.status import StatusWriter
from gpufleet.scheduler.cache import Admitted
from gpufleet.scheduler.cycle import Scheduler
from gpufleet.scheduler.explain import Admit


class Growth:
    """Grows elastic workloads that run short, and says which pools could let them."""

    def __init__(
        self, state: SchedulingState, scheduler: Scheduler, actions: Actions, status: StatusWriter
    ) -> None:
        self.state = state
        self.scheduler = scheduler
        self.actions = actions
        self.status = status

    def grow(self, now: float) -> None:
        """Restarts elastic workloads that run short at a larger size, right after a checkpoint.

        When such a workload has just checkpointed (nothing to lose) and nothing waits (growing must
        not take room from waiting work), a trial cycle with the workload's own capacity freed says
        how many pods it would get now. If more, its pods are replaced by the larger gang; the restart
        is not an eviction (no restart counted, no backoff). Jobs without a checkpoint policy keep the
        size they started with.
        """
        state = self.state
        cache = state.cache
        assert cache is not None
        candidates, state.grow = sorted(state.grow), set()
        if cache.pending or state.backoff:
            return
        for key in candidates:
            admit = self._trial_admission(key, now)
            if admit is not None:
                self._resize(key, admit, now)

    def _trial_admission(self, key: str, now: float) -> Admit | None:
        """The admission the workload would get if it were waiting now; None unless it is larger.

        The cache is left exactly as it was (the workload keeps its pods and admission time)."""
        cache = self.state.cache
        assert cache is not None
        admitted = cache.admitted.get(key)
        if admitted is None or sum(admitted.assignment.counts) >= admitted.workload.pod_count:
            return None
        workload, assignment = admitted.workload, admitted.assignment
        allocations = [alloc for pod, alloc in admitted.pods.items() if pod in cache.fleet.allocations]
        cache.evict(key, now=now)
        try:
            result = self.scheduler.cycle(cache, now=now, learn=False)  # a trial: nothing to learn
        finally:
            cache.pending.pop(key, None)
            restored = cache.admit(workload, assignment, allocations, now=now)
            restored.workload = workload  # keeps its admission time (minimum runtime, lost work)
        error = result.errors.get(key)
        if error is not None:  # a bug its numbers trip: it keeps its size; its next checkpoint tries again
            self.state.failures += 1
            contained_error(
                "scheduler", error, "workload %s: the trial of its growth raised; it keeps its pods", key
            )
            return None
        admit = next((a for a in result.admitted if a.workload == key), None)
        if admit is None or sum(admit.assignment.counts) <= sum(assignment.counts):
            return None
        return admit

    def _resize(self, key: str, admit: Admit, now: float) -> None:
        """Replaces the workload's pods with the larger gang of `admit` (a new attempt, not an eviction)."""
        state = self.state
        cache = state.cache
        assert cache is not None
        obj = state.workloads.get(key)
        if obj is None or obj.status.admission is None:
            return
        counts = list(obj.status.admission.counts)
        before = sum(counts)
        cache.evict(key, now=now)
        for pod in list(state.pods.pop(key, {}).values()):
            if not gone(pod):
                state.delete_pod(pod)
        self.actions.admit(admit, now)
        admitted = cache.admitted.get(key)
        if admitted is not None:  # carried out: the pods it adds are learnt (the trial cycle taught nothing)
            grown = zip(admitted.workload.pod_sets, admit.assignment.counts, counts, strict=True)
            self.scheduler.learn(pod_set.request for pod_set, new, old in grown for _ in range(new - old))
        after = sum(admit.assignment.counts)
        events.record(
            state.store,
            state.workloads.get(key, obj),
            reason="Resized",
            message=f"restarted from its last checkpoint with {after} pods (was {before})",
            now=now,
            source=SOURCE,
        )

    def write_short_demand(self) -> None:
        """Marks admitted elastic workloads that run short with the pools whose new nodes could give
        them their missing pods (`status.nodeDemand`), and clears the mark once it is stale.

        Such a workload is not waiting, so nothing else would ask for nodes: after a spot node is
        taken back from under it, the pool would not replace the node and the job would stay short.
        Only workloads that can grow are marked: growth happens at a checkpoint (`grow`), so one that
        has checkpointed, and only while its queue's quota would hold its full size."""
        state = self.state
        cache = state.cache
        assert cache is not None
        # Only those that can carry a mark (Admitted, and checkpointed or marked): not a walk of all.
        for key, obj in state.workloads.may_need_marks():
            admitted = cache.admitted.get(key)
            wanted = None
            if admitted is not None and obj.spec.last_checkpoint_time is not None:
                wanted = self._short_demand(obj, admitted)
            if obj.status.node_demand != wanted:
                status = obj.status.model_copy(deep=True)
                status.node_demand = wanted
                self.status.write(key, obj, status)

    def _short_demand(self, obj: WorkloadObject, admitted: Admitted) -> NodeDemand | None:
        state = self.state
        cache = state.cache
        assert cache is not None
        running = sum(admitted.assignment.counts)
        missing = admitted.workload.pod_count - running
        queue = cache.tree.nodes.get(obj.spec.queue)
        if missing <= 0 or running <= 0 or queue is None:
            return None
        # What the missing pods would charge, at the rate the running ones do.
        extra = {flavor: milli * missing // running for flavor, milli in admitted.assignment.usage.items()}
        if cache.usage.fits(admitted.queue, extra) is not None:
            return None
        flavors = None if queue.unlimited else set(queue.quotas)
        pools = capacity.serving_pools(obj.spec, state.pools.values(), flavors=flavors)
        return NodeDemand(pools=pools) if pools else None
