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
    name = f"{obj.name}.{int(now * 1000):x}.{next(_seq)}"
    event = Event(
        metadata=ObjectMeta(name=name[-253:].lstrip(".-"), namespace=obj.namespace or "default"),
        spec=EventSpec(
            involved_kind=obj.kind,
            involved_name=obj.name,
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
        log.warning("event %s for %s not recorded: %s", reason, obj.describe(), exc)
