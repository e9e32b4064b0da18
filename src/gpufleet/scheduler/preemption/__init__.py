"""Preemption: which admitted workloads to evict (or shrink) so that a pending one can start.

Steps (ARCHITECTURE.md, Scheduling cycle step 4):
1. candidates (`policy`, kept per queue across cycles by `kept`, merged per preemptor by `pool`):
   workloads the preemptor's queue policy allows it to evict (`withinQueue`, `reclaimWithinCohort`
   when it would stay within its nominal quota, `borrowWithinCohort` when it would borrow); never a
   non-preemptible one, never one inside its queue's `minRuntimeSeconds`, never one in another tree;
   from another queue only while that queue borrows (so a queue within its nominal quota is never a
   reclaim target);
2. scopes (`scopes`, `node_index`): a workload that requires a topology domain is tried domain by
   domain (the candidates with pods in that domain), so victims free one domain rather than scattered
   capacity; a one-pod workload is tried node by node; any other workload over the whole fleet (node
   scopes are bounded from the queues' kept candidates grouped per node, and built only when the
   search comes to them); while quota is short, victims that free quota may be anywhere: a node's or
   domain's search also takes the pool's cheapest workloads outside it, and those workloads make one
   more scope over the fleet;
3. in each scope (`search`), the cheapest sufficient set (`order.VictimSet.cost`): while the scope
   holds few workloads, an exact search over its minimal sets that pass quota and a free-GPU bound,
   each workload untouched, shrunk by 1, 2, ... pods (elastic: only the pods the preemptor needs) or
   evicted, the sets then placed cheapest first; beyond that bound, candidates are given up in
   `victim_order` until the preemptor fits, then those not needed are added back in reverse order
   (Kueue's minimal set, `greedy`), again with only candidates that keep their queue at nominal if
   that set does not, and its shrinks cut to the pods needed;
4. a set that leaves every other queue at or above its nominal quota beats any that does not; one
   that does not is allowed only when a queue loses its last borrowing workload whole (a gang cannot
   be split); then the cheapest set over all scopes wins, scopes taken cheapest first by their lower
   bounds (`bounds`) after the cheap tests of `feasibility`.

An elastic preemptor may be admitted at fewer pods where their victims rank better (`counts`).

Everything is tried on the snapshot and rolled back; the caller re-applies the chosen set. A preemption
is proposed only when the preemptor then fits: no loops of evictions that admit nobody.
"""

from gpufleet.scheduler.preemption.counts import choose_count
from gpufleet.scheduler.preemption.greedy import apply_victims
from gpufleet.scheduler.preemption.order import (
    BORROW,
    RECLAIM,
    WITHIN_QUEUE,
    Candidate,
    SetCost,
    SetRank,
    VictimSet,
    victim_order,
)
from gpufleet.scheduler.preemption.policy import candidates, reaches_other_queues
from gpufleet.scheduler.preemption.search import select_victims

__all__ = [
    "BORROW",
    "RECLAIM",
    "WITHIN_QUEUE",
    "Candidate",
    "SetCost",
    "SetRank",
    "VictimSet",
    "apply_victims",
    "candidates",
    "choose_count",
    "reaches_other_queues",
    "select_victims",
    "victim_order",
]
