"""The Store protocol: what controllers, the twin and the HTTP server may ask of the state.

Both worlds implement it: the embedded SQLite store (`gpufleet.store.sqlite`) and, later, the
Kubernetes API server seen through `kube/`. The semantics are Kubernetes' own, so code written
against one behaves the same against the other:

- `resourceVersion` is a store-wide, strictly increasing integer (a string in metadata). Every write
  that changes an object gives it a new one; a write that changes nothing is not a write.
- `generation` starts at 1 and grows only when `spec` changes.
- `update` replaces spec, labels, annotations and finalizers, and never status; `update_status` replaces
  status only. Both refuse a stale `resourceVersion` with `ConflictError` (none given: unconditional).
- `create` ignores status (the status subresource is written with `update_status`) and refuses an
  object that carries a resourceVersion or already exists.
- `delete` of an object with finalizers only sets `deletionTimestamp`; the object goes when an update
  removes its last finalizer. Finalizers cannot be added to an object being deleted.
- Watches deliver ADDED / MODIFIED / DELETED events in resourceVersion order, strictly after the
  resourceVersion asked for; one older than what the store retains raises `GoneError` (list again).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar, overload

from gpufleet.api.labels import LabelSelector
from gpufleet.api.resource import Resource

R = TypeVar("R", bound=Resource)
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Selector = str | Mapping[str, str] | LabelSelector | None
"""A label selector: Kubernetes syntax (`app=web,env in (a,b)`), a mapping of equal labels, or None."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change to one object. For DELETED, `object` is its last state, at the deletion's version."""

    type: EventType
    object: Resource
    resource_version: int


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object named for `delete_many`: kind, name and namespace (None for cluster-wide kinds and
    for `default`), and optionally the resourceVersion it must still have (else 409)."""

    kind: str
    name: str
    namespace: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True, slots=True)
class ListResult(Generic[R]):
    """Objects of a list and the store's resourceVersion at that moment: watch from it to miss nothing."""

    items: list[R] = field(default_factory=list)
    resource_version: str = "0"

    def __iter__(self) -> Iterator[R]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class Watch(Protocol):
    """An iterator of events that ends at its timeout or when closed; also a context manager."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def __next__(self) -> WatchEvent: ...

    def close(self) -> None: ...

    @property
    def resource_version(self) -> str:
        """Where to resume: every event up to here has been delivered (or filtered out)."""
        ...


class Store(Protocol):
    """State of the world, with Kubernetes' semantics (see the module docstring).

    `kind` is a registered model class (typed result) or a kind name. Cluster-wide kinds take no
    namespace; namespaced ones default to `default` for get and delete, and to all namespaces for
    list and watch.
    """

    @property
    def resource_version(self) -> str:
        """The store's latest resourceVersion."""
        ...

    @overload
    def get(self, kind: type[R], name: str, namespace: str | None = None) -> R: ...
    @overload
    def get(self, kind: str, name: str, namespace: str | None = None) -> Resource: ...
    def get(self, kind: type[R] | str, name: str, namespace: str | None = None) -> Resource:
        """The object; `NotFoundError` if there is none."""
        ...

    @overload
    def list(
        self, kind: type[R], *, namespace: str | None = None, label_selector: Selector = None
    ) -> ListResult[R]: ...
    @overload
    def list(
        self, kind: str, *, namespace: str | None = None, label_selector: Selector = None
    ) -> ListResult[Resource]: ...
    def list(
        self, kind: type[R] | str, *, namespace: str | None = None, label_selector: Selector = None
    ) -> ListResult[R] | ListResult[Resource]:
        """Objects of a kind, ordered by namespace and name, with the list's resourceVersion."""
        ...

    def create(self, obj: R) -> R:
        """Stores a new object; returns it with uid, resourceVersion, generation 1 and creation time."""
        ...

    def update(self, obj: R) -> R:
        """Replaces spec and metadata labels, annotations and finalizers (not status)."""
        ...

    def update_status(self, obj: R) -> R:
        """Replaces status only."""
        ...

    def apply(self, obj: R) -> R:
        """Creates the object, or replaces spec, labels and annotations whatever its resourceVersion.

        What `gpufleet apply -f` does; finalizers and status are left as they are.
        """
        ...

    def apply_many(self, objs: Sequence[Resource], *, dry_run: bool = False) -> builtins.list[Resource]:
        """`apply` of every object in order, all or none: the results, in the same order.

        `dry_run`: every check and write is made as for real, the results returned, and nothing is
        kept (no object, version or event), so a dry run refuses exactly what a real apply would.

        The embedded store writes the batch in one transaction (consecutive resourceVersions, every
        event committed together, nothing of it after a crash or an error part-way). The Kubernetes
        API has no multi-object transaction: there it is a sequence of applies, best effort.
        """
        ...

    def delete(
        self,
        kind: type[Resource] | str,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
    ) -> Resource | None:
        """Deletes the object: None when it is gone, or its state while finalizers hold it."""
        ...

    def delete_many(self, refs: Sequence[ObjectRef]) -> builtins.list[Resource | None]:
        """`delete` of every object in order, all or none: the results, in the same order.

        As `apply_many`: the embedded store deletes the batch in one transaction (a missing object or
        a stale resourceVersion anywhere leaves every object as it was); the Kubernetes API has no
        multi-object transaction, so there it is a sequence of deletes, best effort.
        """
        ...

    def events_since(
        self,
        resource_version: str | int,
        *,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[WatchEvent]:
        """Events after `resource_version`, oldest first, without waiting (a poll)."""
        ...

    def watch(
        self,
        *,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
        since: str | int | None = None,
        timeout: float | None = None,
    ) -> Watch:
        """Events after `since` (None: from now) as they happen, until `timeout` seconds have passed."""
        ...
