"""The Store protocol's writes, once for every embedded store.

Both stores (SQLite for `gpufleet up`, memory for `gpufleet simulate`) keep each object's JSON form
and differ only in where it lives and how a transaction is kept or undone. What a write means (its
checks, the version test, spec and metadata against status, finalizers, batches all or none, a dry
run as a batch undone) is written here over five primitives each store provides: `_transaction`,
`_find`, `_create_locked`, `_change_locked` and a `_clock`. The `_locked` methods run inside a
transaction; a single object's write validates what it stores once, inside it (in `_create_locked`
or `_change_locked`), while a batch is checked whole before its transaction opens.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TypeVar

from gpufleet.api.errors import NotFoundError
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.store.discard import Discards
from gpufleet.store.objects import (
    Json,
    RolledBack,
    check_version,
    conflict,
    describe,
    dumped_but_status,
    dumped_status,
    kind_of,
    namespace_of,
    same_kind,
    shallow,
    status_kind,
    translated,
    validated,
    with_spec_and_meta,
)
from gpufleet.store.protocol import ObjectRef

R = TypeVar("R", bound=Resource)


class ObjectWrites(ABC):
    """create, update, update_status, apply, delete and their batches over a store's primitives."""

    _clock: Callable[[], datetime]
    _discards: Discards
    """Kinds validated on create but not kept (`store.discard`); each store sets it, empty by default."""

    @property
    def discarded(self) -> Counter[tuple[str, str]]:
        """(kind, reason) -> objects validated on create and dropped, not stored (`discard_kinds`)."""
        return self._discards.counts

    def dropped(self, kind: str, reason: str) -> bool:
        """Whether this store drops objects of `kind` (`discard_kinds`); if so, one such object, valid by
        construction and never built, is counted under `reason` as its create would have counted it."""
        return self._discards.count(kind, reason)

    # ------------------------------------------------------------------ what each store provides

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[object]:
        """Writes inside it are kept all together or, on any exception, undone all together."""

    @abstractmethod
    def _find(self, info: KindInfo, ns: str, name: str) -> Json | None:
        """The stored form of an object, or None."""

    @abstractmethod
    def _create_locked(self, info: KindInfo, data: Json) -> Resource:
        """Stores a new object (refusing a set resourceVersion or a name taken) and logs ADDED."""

    @abstractmethod
    def _change_locked(
        self, info: KindInfo, ns: str, name: str, current: Json, changed: Json, *, remove: bool = False
    ) -> Resource:
        """Stores `changed` in place of `current` (or removes it) at the next version and logs it;
        nothing at all when nothing changed."""

    # ----------------------------------------------------------------------------------- writes

    def create(self, obj: R) -> R:
        info, data = kind_of(type(obj)), dumped_but_status(obj)
        if info.kind in self._discards.kinds:
            with translated(obj):  # no transaction: nothing is stored, no version taken
                return same_kind(obj, self._discards.created(info, data, self._clock()))
        with translated(obj), self._transaction():
            created = self._create_locked(info, data)
        return same_kind(obj, created)

    def update(self, obj: R) -> R:
        info, data = kind_of(type(obj)), dumped_but_status(obj)
        ns, name = namespace_of(info, obj.metadata.namespace), obj.metadata.name
        with translated(obj), self._transaction():
            current = self._current(info, ns, name)
            check_version(info, obj, current)
            changed = with_spec_and_meta(info, current, data, finalizers=True)
            result = self._change_locked(info, ns, name, current, changed)
        return same_kind(obj, result)

    def update_status(self, obj: R) -> R:
        info = status_kind(obj)
        ns, name = namespace_of(info, obj.metadata.namespace), obj.metadata.name
        with translated(obj), self._transaction():
            current = self._current(info, ns, name)
            check_version(info, obj, current)
            # Dumped once the object is known to be there at this version: a status written for an
            # object already deleted (a controller behind the event log) costs a lookup alone.
            changed = shallow(current)
            changed["status"] = dumped_status(obj)
            result = self._change_locked(info, ns, name, current, changed)
        return same_kind(obj, result)

    def apply(self, obj: R) -> R:
        info, data = kind_of(type(obj)), dumped_but_status(obj)
        with translated(obj), self._transaction():
            result = self._apply_locked(info, data)
        return same_kind(obj, result)

    def apply_many(self, objs: Sequence[Resource], *, dry_run: bool = False) -> builtins.list[Resource]:
        # Every object is checked before the transaction opens; then all writes and their events
        # are kept in one transaction, so the versions are consecutive and an error part-way leaves
        # nothing of the batch. A dry run is the same transaction undone. A batch of one is that
        # object's `apply`, which validates it once, inside its transaction (the simulator submits
        # most jobs alone).
        if len(objs) == 1 and not dry_run:
            return [self.apply(objs[0])]
        checked = [validated(obj) for obj in objs]
        try:
            with self._transaction():
                results = [self._apply_locked(info, data) for info, data in checked]
                if dry_run:
                    raise RolledBack(results)
                return results
        except RolledBack as rolled_back:
            return rolled_back.results

    def delete(
        self,
        kind: type[Resource] | str,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
    ) -> Resource | None:
        info = kind_of(kind)
        ns = namespace_of(info, namespace)
        with self._transaction():
            return self._delete_locked(info, ns, name, resource_version)

    def delete_many(self, refs: Sequence[ObjectRef]) -> builtins.list[Resource | None]:
        # Kinds and namespaces are checked before the transaction opens; then every deletion and
        # its event are kept in one transaction, so an object missing or changed anywhere in the
        # batch leaves all of them as they were.
        checked = []
        for ref in refs:
            info = kind_of(ref.kind)
            checked.append((info, namespace_of(info, ref.namespace), ref.name, ref.resource_version))
        with self._transaction():
            return [self._delete_locked(*target) for target in checked]

    # ------------------------------------------------------------------------------- internals

    def _current(self, info: KindInfo, ns: str, name: str) -> Json:
        data = self._find(info, ns, name)
        if data is None:
            raise NotFoundError("not found", obj=describe(info, ns, name))
        return data

    def _apply_locked(self, info: KindInfo, data: Json) -> Resource:
        meta = data["metadata"]
        ns, name = namespace_of(info, meta.get("namespace")), meta["name"]
        current = self._find(info, ns, name)
        if current is None:
            meta.pop("resourceVersion", None)
            return self._create_locked(info, data)
        changed = with_spec_and_meta(info, current, data, finalizers=False)
        return self._change_locked(info, ns, name, current, changed)

    def _delete_locked(
        self, info: KindInfo, ns: str, name: str, resource_version: str | None
    ) -> Resource | None:
        current = self._current(info, ns, name)
        if resource_version is not None and resource_version != current["metadata"]["resourceVersion"]:
            raise conflict(info, current, resource_version)
        changed = shallow(current)
        meta = changed["metadata"]
        meta.setdefault("deletionTimestamp", self._clock())
        if meta.get("finalizers"):
            return self._change_locked(info, ns, name, current, changed)
        self._change_locked(info, ns, name, current, changed, remove=True)
        return None
