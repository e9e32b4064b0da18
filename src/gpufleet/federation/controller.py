"""The Cluster objects' two writers, over the Store protocol (either world's store).

- A worker reports into its Cluster in the manager's store (`report`): capacity, levels, heartbeat.
  Status only; the manager's conditions on the object are kept.
- The manager's pass (`ClusterConditions.reconcile`) sets every Cluster's Ready, LeaseExpired and
  Draining at `now`, and writes only the Clusters whose conditions changed, so an idle fleet costs no
  writes.

A write that loses a race (the other writer changed the object since it was read) is read again and
retried: both writers change disjoint parts of the status and recompute theirs from the fresh copy.
Time is an argument; the process that runs these passes owns the clock.
"""

from __future__ import annotations

from datetime import datetime

from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import ConflictError
from gpufleet.federation.manager import cluster_conditions, worker_status
from gpufleet.fleet.state import FleetState
from gpufleet.store.protocol import Store

ATTEMPTS = 5
"""Writes tried per object before the conflict is left to the next pass."""


def report(
    store: Store, cluster: str, fleet: FleetState, *, now: datetime, running_workloads: int = 0
) -> Cluster:
    """Writes the worker's summary and heartbeat into its Cluster (which the manager created)."""
    fresh = worker_status(fleet, now=now, running_workloads=running_workloads)
    for attempt in range(ATTEMPTS):
        current = store.get(Cluster, cluster)
        current.status = fresh.model_copy(update={"conditions": current.status.conditions})
        try:
            return store.update_status(current)
        except ConflictError:
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


class ClusterConditions:
    """The manager's pass over every Cluster's conditions."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def reconcile(self, *, now: datetime) -> list[str]:
        """Names of the Clusters whose conditions changed (and were written)."""
        changed: list[str] = []
        for cluster in self.store.list(Cluster):
            for attempt in range(ATTEMPTS):
                conditions = cluster_conditions(cluster, now=now)
                if conditions == cluster.status.conditions:
                    break
                cluster.status.conditions = conditions
                try:
                    self.store.update_status(cluster)
                except ConflictError:
                    if attempt == ATTEMPTS - 1:
                        raise
                    cluster = self.store.get(Cluster, cluster.name)
                    continue
                changed.append(cluster.name)
                break
        return changed
