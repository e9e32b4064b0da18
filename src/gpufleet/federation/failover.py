"""A worker cluster lost with its work: the dispatcher and the lease rule together, on fleet time.

The issue's failover target, checked on the federation's own logic before the twin and real workers
run it: one cluster holds `workloads` running single-host jobs (arrived one a second) and goes silent
(its heartbeats and the manager's acks are lost). The manager notices after lease plus grace, takes the
work back, refunds its quota and dispatches it to the other clusters, whose next heartbeat's ack tells
them to start it. Every second the simulation checks that no workload runs in two clusters. Measured:
how long after the lost cluster's lease expired all work runs again, and the work lost per workload
(time since its last checkpoint when the lost cluster fenced it).

Pure: time is a loop counter (seconds of fleet time), nothing is read from a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpufleet.federation.dispatch import Dispatched, Dispatcher
from gpufleet.federation.lease import ManagerLedger, WorkerLease
from gpufleet.federation.summary import ClusterSummary, ModelSummary
from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.quota import QuotaNode, QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import PodSet, Workload

MODEL = "H100-80GB"


@dataclass(frozen=True, slots=True)
class FailoverResult:
    workloads: int
    moved: int
    lease_expired_at: float
    all_running_again_at: float | None
    ran_twice: int
    max_lost_seconds: float
    mean_lost_seconds: float

    @property
    def seconds_to_recover(self) -> float | None:
        """From the lost cluster's lease expiry (its last heartbeat + lease) to all work running again."""
        if self.all_running_again_at is None:
            return None
        return self.all_running_again_at - self.lease_expired_at


def _summary(name: str, hosts: int, price: float) -> ClusterSummary:
    model = ModelSummary(
        gpus=hosts * 8, free_gpus=hosts * 8, free_domains={"host": {8: hosts}, "nvlink": {8: hosts}}
    )
    return ClusterSummary(name, {MODEL: model}, prices={MODEL: price})


def simulate_cluster_loss(
    *,
    workloads: int = 500,
    spare_hosts: int = 300,
    lease_seconds: float = 30.0,
    grace_seconds: float = 5.0,
    heartbeat_every: int = 5,
    tick_every: int = 2,
    checkpoint_every: int = 600,
    lost_at: int = 900,
    horizon: int = 3600,
) -> FailoverResult:
    """Cluster `lost` (the cheapest, so it gets all the work) goes silent at `lost_at`; `spare-a` and
    `spare-b` have `spare_hosts` free hosts each. Workers check their lease every `tick_every` seconds,
    which the grace must cover."""
    names = ("lost", "spare-a", "spare-b")
    summaries = [_summary("lost", workloads, 1.0), *(_summary(n, spare_hosts, 2.0) for n in names[1:])]
    dispatcher = Dispatcher(summaries, QuotaUsage(QuotaTree([QuotaNode("default", unlimited=True)])))
    ledger = ManagerLedger(dict.fromkeys(names, lease_seconds), grace_seconds=grace_seconds)
    workers = {name: WorkerLease(name, lease_seconds=lease_seconds) for name in names}
    jobs = {
        f"job-{i}": Workload(f"job-{i}", (PodSet("worker", 1, PodRequest(gpus=8)),)) for i in range(workloads)
    }
    decisions: dict[str, Dispatched] = {}
    started_at: dict[tuple[str, int], int] = {}
    lost_seconds: list[float] = []
    ran_twice = 0
    all_again: float | None = None
    last_heard_lost = 0.0
    for now in range(1, horizon + 1):
        silent = {"lost"} if now >= lost_at else set()
        if now <= workloads:
            ledger.submit([f"job-{now - 1}"])  # one arrival a second: checkpoints fall at different times
        # 1. Workers report; the manager answers (both ways lost for a silent cluster).
        if now % heartbeat_every == 0:
            for name, worker in workers.items():
                if name not in silent:
                    worker.acknowledged(ledger.on_heartbeat(worker.heartbeat(now), now))
                    if name == "lost":
                        last_heard_lost = now
        # 2. The manager takes back the work of expired clusters and dispatches what waits.
        for workload in ledger.reclaim(now):
            dispatcher.release(decisions.pop(workload))
        for name in names:
            cluster = dispatcher.clusters[name]
            if cluster.accepting == ledger.expired(name, now):
                dispatcher.update(replace(cluster, accepting=not ledger.expired(name, now)))
        for workload in sorted(ledger.pending):
            decision = dispatcher.dispatch(jobs[workload])
            if isinstance(decision, Dispatched):
                decisions[workload] = decision
                ledger.assign(workload, decision.cluster, now)
        # 3. Workers check their lease and start or fence work.
        for worker in workers.values():
            if now % tick_every == 0:
                started, stopped = worker.tick(now)
                started_at.update((assignment, now) for assignment in started)
                for assignment in stopped:
                    ran = now - started_at[assignment]
                    lost_seconds.append(ran % checkpoint_every)
        running: dict[str, int] = {}
        for worker in workers.values():
            for workload, _generation in worker.running:
                running[workload] = running.get(workload, 0) + 1
        ran_twice += sum(count > 1 for count in running.values())
        if now > lost_at and len(running) == workloads and not workers["lost"].running:
            all_again = float(now)
            break
    moved = sum(1 for _w, generation in ledger.holder.values() if generation > 1)
    return FailoverResult(
        workloads=workloads,
        moved=moved,
        lease_expired_at=last_heard_lost + lease_seconds,
        all_running_again_at=all_again,
        ran_twice=ran_twice,
        max_lost_seconds=max(lost_seconds, default=0.0),
        mean_lost_seconds=sum(lost_seconds) / len(lost_seconds) if lost_seconds else 0.0,
    )
