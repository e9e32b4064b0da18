"""The management plane's view, built from stored objects: Cluster and Queue in, a dispatcher out.

What the Cluster controller will run on each pass (it is not written yet, see docs/federation.md): the
worker's report becomes its Cluster's status (`worker_status`), the manager sets each Cluster's
conditions from its heartbeat, lease and drain (`cluster_conditions`), and builds the dispatcher over
every Cluster's summary and the fleet-wide quota tree of the Queues (`manager_view`). The quota tree is
the one both worlds build (`controllers.convert.placeable_quota_tree`): one translation of a Queue.
Time is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from gpufleet.api.cluster import DRAINING, LEASE_EXPIRED, READY, Cluster, ClusterStatus
from gpufleet.api.meta import Condition, set_condition
from gpufleet.api.queue import Queue
from gpufleet.controllers.convert import placeable_quota_tree
from gpufleet.federation.convert import capacity_status, choice_of, summary_of
from gpufleet.federation.dispatch import ANY_CLUSTER, ClusterChoice, Decision, Dispatcher
from gpufleet.federation.summary import summarize
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.quota import QuotaUsage
from gpufleet.scheduler.workload import Workload


def worker_status(fleet: FleetState, *, now: datetime, running_workloads: int = 0) -> ClusterStatus:
    """What a worker reports into its Cluster: its summary, its levels and the heartbeat time."""
    return ClusterStatus(
        capacity=capacity_status(summarize(fleet)),
        heartbeat_time=now,
        topology_levels=list(fleet.levels),
        running_workloads=running_workloads,
    )


CLOCK_AHEAD_SECONDS = 5.0
"""How far ahead of the manager's clock a heartbeat may be stamped (a request in flight, small skew)."""


def cluster_conditions(cluster: Cluster, *, now: datetime) -> list[Condition]:
    """Ready, LeaseExpired and Draining as the manager sees the cluster at `now`."""
    status, spec = cluster.status, cluster.spec
    heard = status.heartbeat_time
    silent = None if heard is None else (now - heard).total_seconds()
    expired = silent is None or silent > spec.lease_seconds
    if heard is None:
        lease = Condition(
            type=LEASE_EXPIRED, status="True", reason="NeverReported", message="no heartbeat yet"
        )
    elif expired:
        lease = Condition(
            type=LEASE_EXPIRED,
            status="True",
            reason="NoHeartbeat",
            message=f"no heartbeat for {silent:.0f}s, lease {spec.lease_seconds:.0f}s",
        )
    else:
        lease = Condition(type=LEASE_EXPIRED, status="False", reason="Heartbeat")
    ready = Condition(
        type=READY,
        status="False" if expired else "True",
        reason="LeaseExpired" if expired else "Heartbeat",
    )
    if silent is not None and -silent > CLOCK_AHEAD_SECONDS:
        # Its heartbeats come from the manager's future: its clock runs ahead (another --time-scale,
        # or an unsynchronised machine). Its lease would look valid for too long, so it gets no work.
        ready = Condition(
            type=READY,
            status="False",
            reason="ClockAhead",
            message=f"its heartbeat is {-silent:.0f}s ahead of the manager's clock: run every plane at "
            "--time-scale 1 with synchronised clocks",
        )
    drain = spec.drain
    draining = Condition(
        type=DRAINING,
        status="False" if drain is None else "True",
        reason="Drain" if drain is not None else "NotDraining",
        message=None if drain is None else drain.reason or None,
    )
    conditions = list(status.conditions)
    for condition in (ready, lease, draining):
        conditions = set_condition(conditions, condition, now=now)
    return conditions


@dataclass(slots=True)
class ManagerView:
    """The dispatcher over every cluster, each queue's cluster choice, and the queues left out of the
    quota tree (with why)."""

    dispatcher: Dispatcher
    choices: dict[str, ClusterChoice]
    broken_queues: dict[str, str]

    def dispatch(self, workloads: Iterable[Workload]) -> list[Decision]:
        """Each workload in the order given (the manager's queue order), each seeing the ones before."""
        return [self.dispatcher.dispatch(w, self.choices.get(w.queue, ANY_CLUSTER)) for w in workloads]


def manager_view(clusters: Iterable[Cluster], queues: Iterable[Queue], *, now: datetime) -> ManagerView:
    queue_list = list(queues)
    tree, _settings, broken = placeable_quota_tree(queue_list)
    summaries = [summary_of(cluster, now=now) for cluster in clusters]
    choices = {queue.name: choice_of(queue.spec.clusters) for queue in queue_list}
    return ManagerView(Dispatcher(summaries, QuotaUsage(tree)), choices, broken)
