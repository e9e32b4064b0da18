"""Kinds an embedded store validates on create but neither keeps nor logs: the simulator's Events.

An Event is "a record, never part of a decision" (`controllers.events`): nothing in a simulation
reads one back, yet each job wrote about four, and keeping them (the object and its entry in the
event log) cost a good part of a write's CPU and most of a long run's memory. A store given such
kinds still refuses a bad object exactly as it would have (the caller learns of it as before), and
returns the object as created (uid, generation, creation time; no resourceVersion, since no version
of the store holds it); it only counts what it dropped, by kind and reason, for the run's summary.
Nothing is logged, so no watcher sees it and a settle round that wrote only such objects is quiet.

A writer whose objects of such a kind are valid by construction (the controllers' Events, built by
`controllers.events` from their own fields) may skip building them: `count` tells it whether the
store drops the kind and, if so, counts the object by its reason as a create would have.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from gpufleet.api.errors import ValidationError
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.store.objects import Json, describe, kind_of, load, namespace_of, new_uid


class Discards:
    """The kinds a store drops after validating them on create, and how many it dropped."""

    __slots__ = ("counts", "kinds")

    def __init__(self, kinds: Iterable[str] = ()) -> None:
        # kind_of refuses an unknown kind by name, so a typo cannot silently keep everything.
        self.kinds = frozenset(kind_of(kind).kind for kind in kinds)
        self.counts: Counter[tuple[str, str]] = Counter()
        """(kind, reason) -> objects dropped; the reason is `spec.reason` where the kind has one."""

    def count(self, kind: str, reason: str) -> bool:
        """Counts an object of `kind` dropped as created, if the kind is one to drop (else nothing)."""
        if kind not in self.kinds:
            return False
        self.counts[(kind, reason)] += 1
        return True

    def created(self, info: KindInfo, data: Json, now: datetime) -> Resource:
        """Validates `data` as a create of it would and returns the object as created, unkept."""
        meta = data["metadata"]
        ns = namespace_of(info, meta.get("namespace"))  # the same refusals as a stored create
        if meta.get("resourceVersion"):
            raise ValidationError(
                "must not be set when creating an object",
                obj=describe(info, ns, meta.get("name", "")),
                field="metadata.resourceVersion",
            )
        meta.update(uid=meta.get("uid") or new_uid(), generation=1, creationTimestamp=now)
        meta.pop("deletionTimestamp", None)
        if "status" in info.model.model_fields:
            data.pop("status", None)
        result = load(info, data)
        spec = data.get("spec")
        reason = spec.get("reason", "") if isinstance(spec, dict) else ""
        self.count(info.kind, str(reason))
        return result
