"""What the scheduler says about Queues on the API server: whether each is part of the quota tree.

kubectl writes Queues without the embedded API's checks, so a Queue the API would refuse (a field
its validation rejects) or that cannot be placed in the quota tree (unknown parent, a loop of
parents, below such a queue) reaches the scheduler. It is left out and scheduling goes on for the
rest, as in the embedded world (`controllers.convert.placeable_quota_tree`), and users are told:

- the Queue's `Valid` condition: `False` with reason `InvalidSpec` (its object is refused; the
  message names the field) or `InvalidParent` (it cannot be placed), `True` / `InQuotaTree` otherwise,
  as Kueue's ClusterQueue says whether it is active;
- a Warning Event `InvalidQueue` when a Queue becomes invalid or its problem changes;
- pods submitted to it wait with the reason `QueueInvalid` (`controllers.scheduling.queue_reason`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import pydantic

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.queue import Queue
from gpufleet.api.resource import kind_info
from gpufleet.api.validation import translate_error
from gpufleet.kube.actions import Actions
from gpufleet.kube.resources import resource_for
from gpufleet.kube.status import patch_status, with_condition
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import ApiError, Json, Transport

log = logging.getLogger(__name__)

VALID = "Valid"
INVALID_SPEC = "InvalidSpec"
INVALID_PARENT = "InvalidParent"
IN_QUOTA_TREE = "InQuotaTree"


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
        except pydantic.ValidationError as exc:
            refused[name] = _described(translate_error(exc, obj=f"Queue {name}"))
            continue
        except GpuFleetError as exc:
            refused[name] = _described(exc)
            continue
        assert isinstance(queue, Queue)
        queues.append(queue)
    return queues, refused


def _described(exc: GpuFleetError) -> str:
    return f"field {exc.field}: {exc.detail}" if exc.field else exc.detail


def wanted(name: str, invalid: Mapping[str, str], malformed: Mapping[str, str]) -> tuple[str, str, str]:
    """The `Valid` condition a Queue should carry: (status, reason, message)."""
    if name in malformed:
        return "False", INVALID_SPEC, malformed[name]
    if name in invalid:
        return "False", INVALID_PARENT, f"left out of the quota tree: {invalid[name]}"
    return "True", IN_QUOTA_TREE, ""


def report(
    api: Transport,
    actions: Actions,
    raws: Iterable[Json],
    *,
    invalid: Mapping[str, str],
    malformed: Mapping[str, str],
    now: float,
) -> None:
    """Brings every Queue's `Valid` condition in line; a Warning Event when one becomes (differently)
    invalid. Level-triggered: a condition already right is not written again, so a restarted scheduler
    repeats no Event."""
    resource = resource_for("Queue")
    for raw in raws:
        name = str(raw["metadata"]["name"])
        status, reason, message = wanted(name, invalid, malformed)
        current = next(
            (c for c in (raw.get("status") or {}).get("conditions") or [] if c.get("type") == VALID), None
        )
        said = current and (current.get("status"), current.get("reason"), current.get("message"))
        if said == (status, reason, message):
            continue
        conditions = with_condition(raw.get("status") or {}, VALID, status, reason, message, now)
        try:
            patch_status(api, resource, raw, {"conditions": conditions})
        except ApiError as exc:
            log.warning("Queue %s: Valid condition not written: %s", name, exc)
            continue
        if status == "False":
            actions.event(raw, reason="InvalidQueue", message=message, type="Warning")
