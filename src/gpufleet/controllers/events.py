"""Recording Events: what happened to an object, in words, for `gpufleet describe` and people."""

from __future__ import annotations

import itertools
import logging
from typing import Literal

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.resource import Resource
from gpufleet.api.runtime import Event, EventSpec
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.store.protocol import Store

log = logging.getLogger(__name__)
_seq = itertools.count()


def record(
    store: Store,
    obj: Resource,
    *,
    reason: str,
    message: str,
    now: float,
    type: Literal["Normal", "Warning"] = "Normal",
    source: str = "",
) -> None:
    """Writes an Event about `obj` (in its namespace, `default` for cluster-wide objects).

    An event that cannot be written is logged and dropped: it is a record, never part of a decision.
    """
    record_about(
        store,
        obj.kind,
        obj.name,
        obj.namespace,
        reason=reason,
        message=message,
        now=now,
        type=type,
        source=source,
    )


def record_about(
    store: Store,
    kind: str,
    name: str,
    namespace: str | None,
    *,
    reason: str,
    message: str,
    now: float,
    type: Literal["Normal", "Warning"] = "Normal",
    source: str = "",
) -> None:
    """`record` for an object known by kind and name only (e.g. a Workload's owner)."""
    event_name = f"{name}.{int(now * 1000):x}.{next(_seq)}"
    event = Event(
        metadata=ObjectMeta(name=event_name[-253:].lstrip(".-"), namespace=namespace or "default"),
        spec=EventSpec(
            involved_kind=kind,
            involved_name=name,
            type=type,
            reason=reason,
            message=message,
            time=to_datetime(now),
            source=source,
        ),
    )
    try:
        store.create(event)
    except GpuFleetError as exc:
        log.warning("event %s for %s %s not recorded: %s", reason, kind, name, exc)
