"""Recording Events: what happened to an object, in words, for `gpufleet describe` and people."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.resource import Resource
from gpufleet.api.runtime import Event, EventSpec
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.store.protocol import Store
from gpufleet.store.writes import ObjectWrites

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
    record_all(store, [Announcement(kind, name, namespace, reason, message, now, type, source)])


@dataclass(frozen=True, slots=True)
class Announcement:
    """An Event to record about an object: built (`event`) only for a store that keeps Events."""

    kind: str
    name: str
    namespace: str | None
    reason: str
    message: str
    now: float
    type: Literal["Normal", "Warning"] = "Normal"
    source: str = ""

    def event(self) -> Event:
        return about(
            self.kind,
            self.name,
            self.namespace,
            reason=self.reason,
            message=self.message,
            now=self.now,
            type=self.type,
            source=self.source,
        )


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
    """The Event recorded about an object."""
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


def record_all(store: Store, announcements: Sequence[Announcement]) -> None:
    """Writes an Event for each of `announcements`, in order. As `record`, an event that cannot be
    written is logged and dropped.

    A store that drops Events (the simulator's, `store.discard`) only counts each by its reason: the
    Event built from an announcement is valid by construction, and building it and having the store
    validate it again were most of what a simulated job's four Events cost. One create each, not one
    `apply_many`: a batch validates every object before its transaction and again as it stores it, and
    an Event is too small for a transaction to cost more than that."""
    counts = store.dropped if isinstance(store, ObjectWrites) else None
    for announced in announcements:
        if counts is not None and counts("Event", announced.reason):
            continue
        try:
            store.create(announced.event())
        except GpuFleetError as exc:
            log.warning(
                "event %s for %s %s not recorded: %s",
                announced.reason,
                announced.kind,
                announced.name,
                exc,
            )
