"""What a Queue's status says: one rule for both worlds, computed from the scheduling core's cache.

The embedded world (`controllers.scheduling`) and the Kubernetes world (`kube.queues`) each write it
their own way (the store, a status PATCH); what it says is decided here, so `gpufleet get queues` and
`kubectl get queues` agree on the same cluster:

- `Valid`: `True` / `InQuotaTree` for a queue of the quota tree; `False` / `InvalidSpec` for one whose
  object the API's validation refuses (the message names the field; only Kubernetes can hold one, as
  kubectl skips the API's checks); `False` / `InvalidParent` for one that cannot be placed in the tree
  (unknown parent, a loop of parents, below such a queue). Writing a `False` that is new or says
  something new comes with one Warning `InvalidQueue` Event (`warns`); a condition already right is
  not written again, so a restarted scheduler repeats no Event.
- `pendingWorkloads`, `admittedWorkloads`, `usage` (GPUs per flavor): the queue's own workloads and
  those of its subtree, so a parent shows what its children hold. A queue left out of the tree has no
  subtree: it counts only the workloads submitted to it (they wait, with `queue_reason` saying why).
- `queue_reason`: why a workload's queue cannot take it (`QueueNotFound`, `QueueInvalid`,
  `QueueNotLeaf`), which both worlds put before whatever the core said.

`reports` also sets the queue gauges of `gpufleet.observability.metrics` (nominal, used and borrowed
GPUs per queue and flavor) and the fleet's GPU gauges (`fleetmetrics`), so both worlds export what
their Queue statuses say, once per scheduling pass.

Cost: one pass over pending and admitted workloads (each charged along its queue's path, a few levels),
so a Kubernetes scheduler can ask every pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.api.meta import ConditionStatus
from gpufleet.controllers import fleetmetrics
from gpufleet.observability import metrics
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.explain import Reason
from gpufleet.scheduler.quota import QuotaTree

VALID = "Valid"
IN_QUOTA_TREE = "InQuotaTree"
INVALID_SPEC = "InvalidSpec"
INVALID_PARENT = "InvalidParent"
INVALID_QUEUE_EVENT = "InvalidQueue"

# Pending reasons about the queue a workload names rather than about its quota.
QUEUE_NOT_FOUND = "QueueNotFound"
QUEUE_INVALID = "QueueInvalid"
QUEUE_NOT_LEAF = "QueueNotLeaf"


@dataclass(frozen=True, slots=True)
class Validity:
    """A Queue's `Valid` condition, without its transition time (each world keeps that)."""

    status: ConditionStatus
    reason: str
    message: str


@dataclass(slots=True)
class QueueReport:
    """What one Queue's status should say."""

    valid: Validity
    pending_workloads: int = 0
    admitted_workloads: int = 0
    usage: dict[str, float] = field(default_factory=dict)
    """GPUs in use per flavor, rounded to milli-GPUs, flavors in name order."""


def validity(name: str, invalid: Mapping[str, str], malformed: Mapping[str, str] | None = None) -> Validity:
    """The `Valid` condition of Queue `name`: `invalid` says why each queue left out of the quota tree
    is, `malformed` why the API's validation refuses a queue's object (a refused object comes first:
    it is why the queue is left out)."""
    if malformed and name in malformed:
        return Validity("False", INVALID_SPEC, malformed[name])
    if name in invalid:
        return Validity("False", INVALID_PARENT, f"left out of the quota tree: {invalid[name]}")
    return Validity("True", IN_QUOTA_TREE, "")


def warns(before: Validity | None, after: Validity) -> bool:
    """Whether writing `after` over `before` comes with a Warning `InvalidQueue` Event: when a queue
    becomes invalid or its problem changes, never for one that stays as it was."""
    return after.status == "False" and before != after


def reports(
    cache: ClusterCache,
    queues: Iterable[str],
    *,
    invalid: Mapping[str, str],
    malformed: Mapping[str, str] | None = None,
    pending: Iterable[str] | None = None,
    export_metrics: bool = True,
) -> dict[str, QueueReport]:
    """The status each of `queues` should carry; with `export_metrics`, the quota and GPU gauges are
    set too.

    `pending` names the queue of every workload that waits, when the world knows more waiting work
    than the core holds (a workload in backoff after an eviction, a gang still missing members); by
    default the core's pending workloads."""
    out = {name: QueueReport(validity(name, invalid, malformed)) for name in queues}
    # First per queue workloads are submitted to (one dict step per workload), then up each such
    # queue's path once: thousands of workloads sit in a few queues.
    waiting = Counter(w.queue for w in cache.pending.values()) if pending is None else Counter(pending)
    admitted: Counter[str] = Counter()
    milli: dict[str, dict[str, int]] = {}
    for each in cache.admitted.values():
        queue = each.queue
        admitted[queue] += 1
        row = milli.setdefault(queue, {})
        for flavor, amount in each.assignment.usage.items():
            row[flavor] = row.get(flavor, 0) + amount
    paths = cache.tree.paths
    used: dict[str, Counter[str]] = {}
    for queue in waiting.keys() | admitted.keys():
        for name in paths.get(queue, (queue,)):
            report = out.get(name)
            if report is None:
                continue
            report.pending_workloads += waiting[queue]
            report.admitted_workloads += admitted[queue]
            if queue in milli:
                used.setdefault(name, Counter()).update(milli[queue])
    for name, amounts in used.items():
        # Summed in milli-GPUs (exact), shown in GPUs; a flavor whose use went back to 0 is dropped.
        out[name].usage = {flavor: round(m / 1000, 3) for flavor, m in sorted(amounts.items()) if m}
    if export_metrics:
        record_quota(tree=cache.tree, reports=out)
        fleetmetrics.record(cache)
    return out


def record_quota(*, tree: QuotaTree, reports: Mapping[str, QueueReport]) -> None:
    """Sets the quota gauges: per queue of the tree and flavor it lists (or uses), its nominal quota
    (its subtree's, as quota is charged), the GPUs it uses and those beyond the nominal (borrowed)."""
    nominal: dict[tuple[str, str], float] = {}
    used: dict[tuple[str, str], float] = {}
    borrowed: dict[tuple[str, str], float] = {}
    for name, report in reports.items():
        node = tree.nodes.get(name)
        if node is None:
            continue
        flavors = dict.fromkeys([*node.quotas, *report.usage])
        for flavor in flavors:
            key = (name, flavor)
            gpus = report.usage.get(flavor, 0.0)
            used[key] = gpus
            if node.unlimited:
                continue
            quota = tree.nominal(name, flavor) / 1000
            nominal[key] = quota
            borrowed[key] = max(0.0, round(gpus - quota, 3))
    metrics.set_series(metrics.QUOTA_NOMINAL, nominal)
    metrics.set_series(metrics.QUOTA_USED, used)
    metrics.set_series(metrics.QUOTA_BORROWED, borrowed)


def queue_reason(tree: QuotaTree, invalid: Mapping[str, str], queue: str) -> Reason | None:
    """Why a workload's queue cannot take it, when the queue is missing, left out of the quota tree
    (`invalid`: name -> why) or not a leaf; None when the queue is a usable leaf (the core's reason
    stands)."""
    if queue in tree.nodes:
        if tree.is_leaf(queue):
            return None
        return Reason(
            QUEUE_NOT_LEAF, f"queue {queue!r} has child queues; submit to a leaf queue", {"queue": queue}
        )
    if queue in invalid:
        return Reason(
            QUEUE_INVALID,
            f"queue {queue!r} is left out of the quota tree: {invalid[queue]}",
            {"queue": queue},
        )
    return Reason(QUEUE_NOT_FOUND, f"queue {queue!r} does not exist", {"queue": queue})
