"""What the scheduler says about Queues on the API server: their status, by the rule both worlds share.

kubectl writes Queues without the embedded API's checks, so a Queue the API would refuse (a field
its validation rejects) or that cannot be placed in the quota tree (unknown parent, a loop of
parents, below such a queue) reaches the scheduler. It is left out and scheduling goes on for the
rest, as in the embedded world (`controllers.convert.placeable_quota_tree`), and users are told, as
`controllers.queuestatus` decides for both worlds:

- the Queue's `Valid` condition: `False` with reason `InvalidSpec` (its object is refused; the
  message names the field) or `InvalidParent` (it cannot be placed), `True` / `InQuotaTree` otherwise,
  as Kueue's ClusterQueue says whether it is active;
- a Warning Event `InvalidQueue` when a Queue becomes invalid or its problem changes;
- pods submitted to it wait with the reason `QueueInvalid` (`controllers.queuestatus.queue_reason`).

Every Queue's status also counts its subtree's waiting and admitted workloads and GPUs in use per
flavor (`pendingWorkloads`, `admittedWorkloads`, `usage`: the columns of `kubectl get queues`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.kinds import kind_info
from gpufleet.api.meta import ConditionStatus
from gpufleet.api.queue import Queue
from gpufleet.controllers import queuestatus
from gpufleet.controllers.queuestatus import VALID, QueueReport, Validity
from gpufleet.kube.actions import Actions
from gpufleet.kube.cache import REST, KubeCache
from gpufleet.kube.config import QUEUE_LABEL
from gpufleet.kube.resources import ResourceType, resource_for
from gpufleet.kube.status import with_condition
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json

log = logging.getLogger(__name__)


def parse_queues(raws: Iterable[Json]) -> tuple[list[Queue], dict[str, str]]:
    """The Queues the API's own validation accepts, and for each other one why (naming the field)."""
    info = kind_info("Queue")
    assert info is not None
    queues: list[Queue] = []
    refused: dict[str, str] = {}
    for raw in raws:
        name = str(raw["metadata"].get("name"))
        try:
            queue = from_json(info, raw)
        except GpuFleetError as exc:
            refused[name] = _described(exc)
            continue
        assert isinstance(queue, Queue)
        queues.append(queue)
    return queues, refused


def _described(exc: GpuFleetError) -> str:
    return f"field {exc.field}: {exc.detail}" if exc.field else exc.detail


def report(
    actions: Actions, raws: Iterable[Json], kcache: KubeCache, *, malformed: Mapping[str, str], now: float
) -> None:
    """Brings every Queue's status in line with what the scheduler holds (`queuestatus.reports`):
    its `Valid` condition, waiting and admitted workloads and GPUs in use per flavor; a Warning Event
    when one becomes (differently) invalid.

    Called every pass, so it sends a PATCH only for a queue whose status changed: one already right is
    not written again (a restarted scheduler repeats no Event), and neither is one just written whose
    new state the informer has not shown yet."""
    cache = kcache.cache
    assert cache is not None
    queues = {str(raw["metadata"]["name"]): raw for raw in raws}
    wanted = queuestatus.reports(
        cache,
        queues,
        invalid=kcache.invalid_queues,
        malformed=malformed,
        pending=waiting(kcache),
    )
    resource = resource_for("Queue")
    for name, raw in queues.items():
        _write(actions, resource, raw, wanted[name], rebuild=kcache.rebuilds, now=now)


def waiting(kcache: KubeCache) -> list[str]:
    """The queue of every workload whose pods wait: those the core holds pending, and gangs the core
    cannot take yet (members missing, a request it refuses). The rest of a partly bound gang is not
    one more: its gang counts as admitted."""
    cache = kcache.cache
    assert cache is not None
    queues = [w.queue for name, w in cache.pending.items() if not name.endswith(REST)]
    for key in kcache.reasons:
        group = kcache.groups.get(key)
        if group is not None and group.members:
            labels = group.members[0]["metadata"].get("labels") or {}
            queues.append(labels.get(QUEUE_LABEL, kcache.config.default_queue))
    return queues


def _write(
    actions: Actions, resource: ResourceType, raw: Json, report: QueueReport, *, rebuild: int, now: float
) -> None:
    name = str(raw["metadata"]["name"])
    version = str(raw["metadata"].get("resourceVersion"))
    key = ("", f"queue-status:{name}")
    status = raw.get("status") or {}
    memo = json.loads(actions.said[key]) if key in actions.said else None
    if memo is not None and memo["version"] == version:
        # This replica wrote the status since the informer's copy: compare with what it wrote, so the
        # same PATCH (and Event) is not sent again before the informer shows it.
        status = memo["status"]
    before = _validity(status)
    valid = report.valid
    empty = not (report.pending_workloads or report.admitted_workloads or report.usage)
    # A replica with no work in the queue that already wrote it empty (since its cache was built)
    # leaves the counts alone: another scheduler (another schedulerName) may count its own work there,
    # and two that each wrote their own numbers would overwrite each other without end.
    idle = empty and memo is not None and memo["rebuild"] == rebuild and memo["empty"]
    update: Json = {} if idle else _counts(status, report)
    if before != valid:
        update["conditions"] = with_condition(status, VALID, valid.status, valid.reason, valid.message, now)
    if not update:
        return
    try:
        path = resource.item(name, None, "status")
        actions.api.request("PATCH", path, body={"status": update}, content_type=MERGE_PATCH)
    except ApiError as exc:
        if exc.status != 404:  # a Queue deleted meanwhile needs no status
            log.warning("Queue %s: status not written: %s", name, exc)
        return
    after = {**status, **update}
    if "usage" in update:
        after["usage"] = report.usage
    wrote_empty = memo["empty"] if idle and memo is not None else empty
    memo = {"rebuild": rebuild, "version": version, "status": after, "empty": wrote_empty}
    actions.said[key] = json.dumps(memo, sort_keys=True)
    if queuestatus.warns(before, valid):
        actions.event(raw, reason=queuestatus.INVALID_QUEUE_EVENT, message=valid.message, type="Warning")


def _counts(status: Json, report: QueueReport) -> Json:
    """The merge patch that brings the status's counts and usage in line with the report."""
    update: Json = {}
    if status.get("pendingWorkloads") != report.pending_workloads:
        update["pendingWorkloads"] = report.pending_workloads
    if status.get("admittedWorkloads") != report.admitted_workloads:
        update["admittedWorkloads"] = report.admitted_workloads
    if (status.get("usage") or {}) != report.usage:
        # A merge patch merges maps: a flavor no longer in use is removed by naming it with null.
        update["usage"] = {flavor: None for flavor in status.get("usage") or {}} | report.usage
    return update


def _validity(status: Json) -> Validity | None:
    """The `Valid` condition the Queue carries now, if any."""
    found = next((c for c in status.get("conditions") or [] if c.get("type") == VALID), None)
    if found is None:
        return None
    said = found.get("status")
    value: ConditionStatus = "True" if said == "True" else "False" if said == "False" else "Unknown"
    return Validity(value, str(found.get("reason") or ""), str(found.get("message") or ""))
