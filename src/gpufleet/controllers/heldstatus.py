"""Statuses held back until their instant has settled: one status write per object per instant.

At one instant a TrainingJob moves through several hand-offs (its Workload made, admitted, its pods
running), each in its own settle round, and each round's reconcile computed a new status and wrote
it: three writes of the job at its submission, with a pool status write for every pod that came or
went. The status a user or a watcher reads after the instant is the last one; the ones before it
lived for no time at all. So the TrainingJob and pool controllers hold each computed status here
(the TrainingJob controller a job's until it runs) and write it once the control plane is quiet:
at the end of a manager step in which no controller wrote anything else (under a runtime; a
manager stepped by hand writes at the end of every step). The Events announcing each transition
are kept in order and written just before the status.

While a status is held, the controller reads its object *with the held status* (`effective`), so
every later reconcile at the instant decides from what it would have read had the status been
written: the decisions and the statuses finally written are those of writing at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from gpufleet.api.errors import ConflictError
from gpufleet.api.resource import Resource
from gpufleet.controllers import events
from gpufleet.controllers.manager import Key
from gpufleet.controllers.ownwrites import OwnWrites
from gpufleet.store.protocol import Store

Obj = TypeVar("Obj", bound=Resource)
Status = TypeVar("Status")


class HeldStatuses(Generic[Obj, Status]):
    """The statuses and Events computed at this instant and not written yet."""

    def __init__(self) -> None:
        self.statuses: dict[Key, Status] = {}
        self.events: dict[Key, list[events.Announcement]] = {}
        self.written = OwnWrites()
        """The flushed status writes, until their events come back (`echo`)."""

    def __bool__(self) -> bool:
        return bool(self.statuses or self.events)

    def effective(self, key: Key, obj: Obj) -> Obj:
        """`obj` as stored, with its held status in place of the stored one (if any)."""
        held = self.statuses.get(key)
        if held is None:
            return obj
        return obj.model_copy(update={"status": held})

    def echo(self, key: Key, obj: Resource) -> bool:
        """Whether `obj` (from an event) is what the last flush wrote for `key` and nothing since:
        a reconcile of it would find what the one that computed the status found, so the controller
        need not look again (as a Kubernetes controller ignores its own status writes)."""
        return self.written.echo(key, obj)

    def hold(self, key: Key, status: Status) -> None:
        self.statuses[key] = status

    def announce(self, key: Key, event: events.Announcement) -> None:
        self.events.setdefault(key, []).append(event)

    def flush(
        self,
        store: Store,
        current: Callable[[Key], Obj | None],
        *,
        unchanged: Callable[[Status, Obj], bool],
        keys: Iterable[Key] | None = None,
    ) -> list[Key]:
        """Writes, per key (all, or `keys`), its held Events in order, then its held status onto the
        object as stored now (`current`; a key gone since is skipped, and so is a status `unchanged`
        against the stored one). Returns the keys whose write met a conflict (another writer, e.g.
        the HTTP API): their statuses stay held and the caller looks at them again."""
        chosen = sorted(set(self.statuses) | set(self.events)) if keys is None else sorted(keys)
        conflicted: list[Key] = []
        for key in chosen:
            events.record_all(store, self.events.pop(key, []))
            if key not in self.statuses:
                continue
            status = self.statuses.pop(key)
            obj = current(key)
            if obj is None or unchanged(status, obj):
                continue
            try:
                written = store.update_status(obj.model_copy(update={"status": status}))
                self.written.wrote(key, written)
            except ConflictError:
                self.statuses[key] = status
                conflicted.append(key)
        return conflicted
