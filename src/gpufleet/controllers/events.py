"""Recording Events: what happened to an object, in words, for `gpufleet describe` and people."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
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
    event = about(kind, name, namespace, reason=reason, message=message, now=now, type=type, source=source)
    record_all(store, [event])


def about(
    kind: str,
    name: str,
    namespace: str | None,
    *,
    reason: str,
    message: str,
    now: float,
    type: Literal["Normal", "Warning"] = "Normal",
    source: str = "",
) -> Event:
    """The Event `record_about` writes, to be written later (`record_all`)."""
    event_name = f"{name}.{int(now * 1000):x}.{next(_seq)}"
    return Event(
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


def record_all(store: Store, events: Sequence[Event]) -> None:
    """Writes `events` in order. As `record`, an event that cannot be written is logged and dropped.

    One create each, not one `apply_many`: a batch validates every object before its transaction
    and again as it stores it, and an Event is too small for a transaction to cost more than that."""
    for event in events:
        try:
            store.create(event)
        except GpuFleetError as exc:
            spec = event.spec
            log.warning(
                "event %s for %s %s not recorded: %s",
                spec.reason,
                spec.involved_kind,
                spec.involved_name,
                exc,
            )
