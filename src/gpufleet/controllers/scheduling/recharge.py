"""Recording the usage of workloads that took over a shared claim's quota charge.

When the workload charged for a shared ResourceClaim leaves while others still use the claim, the cache
moves the charge to the next user (`scheduler.claim_charges`). The embedded world restores an admitted
workload's usage from its recorded admission after a restart, so the receiver's new usage is written
there too; otherwise a restart would forget who pays.
"""

from __future__ import annotations

import logging

from gpufleet.api.errors import GpuFleetError
from gpufleet.controllers.scheduling.state import SchedulingState

log = logging.getLogger(__name__)


def record_recharged(state: SchedulingState) -> None:
    """Writes `status.admission.usage` of each workload the cache recharged; a failed write is tried
    again at the next step."""
    cache = state.cache
    if cache is None or not cache.recharged:
        return
    for key in sorted(cache.recharged):
        admitted = cache.admitted.get(key)
        obj = state.workloads.get(key)
        if admitted is None or obj is None or obj.status.admission is None:
            cache.recharged.discard(key)
            continue
        status = obj.status.model_copy(deep=True)
        assert status.admission is not None
        status.admission.usage = dict(admitted.assignment.usage)
        try:
            state.workloads[key] = state.store.update_status(obj.model_copy(update={"status": status}))
        except GpuFleetError as exc:
            log.info("usage of %s after a claim's charge moved to it not written (%s); retried", key, exc)
            continue
        cache.recharged.discard(key)
        state.queues_dirty = True
