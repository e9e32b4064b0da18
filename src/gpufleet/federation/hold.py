"""The hold for the head gang across the fleet: the cluster it waits for keeps the hosts it waits on.

Without it, a gang of 4 hosts waits at the manager while no cluster has four whole hosts free, and the
small jobs behind it take each host of every cluster as it frees, so the gang waits far longer than on
one cluster of the same size (where 4 of 48 hosts free up sooner than 4 of 16). The rule, in one pass
of the dispatcher:

- the first workload of the pass that fits no cluster (the queue order puts the highest priority, then
  the oldest, first) sets the hold, if it has whole-GPU pods;
- it holds the (cluster, model) closest to fitting it: the fewest GPUs still to free (`shortfall`), then
  the cheapest, then the name;
- later work in the pass may go to that cluster only when it leaves the gang's shortfall there as it
  was (it fits on hosts the gang does not wait for); otherwise it goes to the next cluster it fits, or
  waits. Work that fits only there and would take the gang's hosts waits, since taking them is exactly
  what delays the gang.

The shortfall counts hosts only (a gang's pods each need a host with room); a required rack or block
is not counted, so for such gangs the hold is a guess that the next heartbeat and pass correct.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.federation.summary import ModelSummary
from gpufleet.federation.take import GangShape
from gpufleet.fleet.state import HOST_LEVEL, NVLINK_LEVEL


def _pods(gang: GangShape) -> list[int]:
    """Whole GPUs per pod, biggest first; a gang required on one host or NVLink domain is one pod."""
    if gang.required in (HOST_LEVEL, NVLINK_LEVEL):
        return [gang.whole_gpus] if gang.whole_gpus else []
    return sorted(gang.whole, reverse=True)


def shortfall(summary: ModelSummary, gang: GangShape) -> int:
    """GPUs that must still free before the gang's whole-GPU pods fit the hosts of `summary`.

    Pods, biggest first, go to the host with most free GPUs left among the gang's count of fullest
    hosts (the pods of a gang may share a host); a pod that fits on none counts what its host lacks,
    and that host is then the gang's. 0 when every pod has room. A greedy estimate, not a placement.
    """
    pods = _pods(gang)
    hosts: list[int] = []
    histogram = summary.free_domains.get(HOST_LEVEL, {})
    for free in sorted(histogram, reverse=True):
        hosts.extend([free] * min(histogram[free], len(pods) - len(hosts)))
        if len(hosts) == len(pods):
            break
    hosts.extend([0] * (len(pods) - len(hosts)))
    short = 0
    for pod in pods:
        index = max(range(len(hosts)), key=hosts.__getitem__)
        if hosts[index] >= pod:
            hosts[index] -= pod
        else:
            short += pod - hosts[index]
            hosts[index] = 0
    return short


@dataclass(frozen=True, slots=True)
class Hold:
    """`cluster`'s `model` is held for `workload` (its `gang`) for the rest of the dispatch pass."""

    workload: str
    cluster: str
    model: str
    gang: GangShape

    def blocks(self, cluster: str, model: str, before: ModelSummary, after: ModelSummary) -> bool:
        """Whether taking `before` to `after` on (cluster, model) takes hosts the held gang waits for."""
        if (cluster, model) != (self.cluster, self.model):
            return False
        return shortfall(after, self.gang) > shortfall(before, self.gang)
