"""What each request does to the store, apart from HTTP: read, list, create, apply, status, delete, events.

Every operation takes the principal and applies `access`'s rules. Writes go through one lock, so
the objects a request's access checks read are not changed by another request before it writes. A
multi-object apply is one `Store.apply_many` batch and a multi-object delete one `Store.delete_many`
batch: in the embedded store one transaction, so a request is applied whole or not at all, even if
the process is killed part-way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.api.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.api.kinds import kind_info
from gpufleet.api.meta import DEFAULT_NAMESPACE
from gpufleet.api.numerals import plain_digits
from gpufleet.api.resource import API_VERSION, KindInfo, Resource
from gpufleet.api.validation import parse_object
from gpufleet.server import access, admission
from gpufleet.server.auth import Principal
from gpufleet.server.bodies import merge_patch
from gpufleet.store.protocol import ObjectRef, Store, WatchEvent

Action = Literal["created", "configured", "unchanged"]
MAX_EVENTS = 1000
STATUS_RETRIES = 5
"""Tries of a status write without a resourceVersion while controllers keep writing the object."""


@dataclass(frozen=True, slots=True)
class Applied:
    object: Resource
    action: Action


@dataclass(frozen=True, slots=True)
class Deleted:
    """An object a delete request took: its last state, and whether it is gone or held by finalizers."""

    object: Resource
    gone: bool

    @property
    def action(self) -> Literal["deleted", "deleting"]:
        return "deleted" if self.gone else "deleting"


class Operations:
    """The API's verbs on a store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._writes = threading.Lock()

    # ----------------------------------------------------------------------------------- reads

    def get(self, principal: Principal, info: KindInfo, name: str, namespace: str | None) -> Resource:
        access.check_kind_readable(principal, info)
        obj = self.store.get(info.kind, name, namespace)
        access.check_readable(principal, obj, self._lookup)
        return obj

    def list_objects(
        self, principal: Principal, info: KindInfo, namespace: str | None, selector: str | None
    ) -> dict[str, Any]:
        access.check_kind_readable(principal, info)
        result = self.store.list(info.kind, namespace=namespace, label_selector=selector)
        readable = self.reader(principal)
        items = [obj.to_dict() for obj in result.items if readable(obj)]
        return {
            "apiVersion": API_VERSION,
            "kind": f"{info.kind}List",
            "metadata": {"resourceVersion": result.resource_version},
            "items": items,
        }

    # ---------------------------------------------------------------------------------- writes

    def create(self, principal: Principal, obj: Resource) -> Resource:
        with self._writes:
            access.check_writable(principal, obj, None)
            admission.check_queues(self.store, [obj])
            admission.check_queue_refs(self.store, [obj])
            return self.store.create(obj)

    def put(self, principal: Principal, obj: Resource) -> Applied:
        """An update when the object names a resourceVersion (refused if stale), else an apply."""
        if obj.metadata.resource_version is None:
            return self.apply(principal, [obj])[0]
        with self._writes:
            existing = self._find(obj)
            if existing is None:
                raise NotFoundError(
                    "not found; leave out metadata.resourceVersion to create it", obj=obj.describe()
                )
            access.check_writable(principal, obj, existing)
            admission.check_queues(self.store, [obj])
            admission.check_queue_refs(self.store, [obj])
            updated = self.store.update(obj)
        return Applied(updated, _action(existing, updated))

    def apply(
        self, principal: Principal, objects: Sequence[Resource], *, dry_run: bool = False
    ) -> list[Applied]:
        """Creates or updates every object, or none: all are checked first, then written as one
        batch (`Store.apply_many`), which the embedded store commits in one transaction. A dry run
        makes the same checks and writes, and reports them, but keeps nothing."""
        with self._writes:
            previous = [self._find(obj) for obj in objects]
            for obj, existing in zip(objects, previous, strict=True):
                access.check_writable(principal, obj, existing)
            admission.check_queues(self.store, objects)
            admission.check_queue_refs(self.store, objects)
            results = self.store.apply_many(objects, dry_run=dry_run)
            return [
                Applied(result, _action(existing, result))
                for existing, result in zip(previous, results, strict=True)
            ]

    def write_status(
        self,
        principal: Principal,
        info: KindInfo,
        name: str,
        namespace: str | None,
        doc: dict[str, Any],
        *,
        patch: bool,
    ) -> Resource:
        """Replaces (PUT) or merge-patches (PATCH) an object's status, for the admin only.

        A `metadata.resourceVersion` in `doc` must be the object's current one. Without it the write
        goes to the latest status: read again and retried when a controller wrote meanwhile.
        """
        access.check_status_writable(principal, info, name)
        given = _status_target(info, name, namespace, doc)
        with self._writes:
            for attempt in range(STATUS_RETRIES):
                current = self.store.get(info.kind, name, namespace)
                access.check_status_object(principal, current)
                data = current.to_dict(reveal_secrets=True)
                data["status"] = merge_patch(data.get("status"), doc["status"]) if patch else doc["status"]
                data["metadata"]["resourceVersion"] = given or current.metadata.resource_version
                try:
                    return self.store.update_status(parse_object(data))
                except ConflictError:
                    if given is not None or attempt == STATUS_RETRIES - 1:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def delete(
        self,
        principal: Principal,
        info: KindInfo,
        name: str,
        namespace: str | None,
        resource_version: str | None,
    ) -> Resource | None:
        with self._writes:
            existing = self.get(principal, info, name, namespace)
            access.check_writable(principal, existing, existing)
            if info.kind == "Queue":
                admission.check_queue_delete(self.store, name)
            return self.store.delete(info.kind, name, namespace, resource_version=resource_version)

    def delete_many(
        self, principal: Principal, refs: Sequence[ObjectRef], *, ignore_not_found: bool = False
    ) -> list[Deleted]:
        """Deletes every object named, or none: all are checked first (each exists and may be
        deleted by the principal, a queue keeps no children or work that stays), then deleted as one
        batch (`Store.delete_many`). With `ignore_not_found` objects that do not exist are left out
        (and not answered for); else the first of them fails the request."""
        with self._writes:
            targets: list[tuple[ObjectRef, Resource]] = []
            missing: list[str] = []
            for ref in refs:
                info = kind_info(ref.kind)
                if info is None:
                    raise ValidationError(f"unknown kind {ref.kind!r}", field="kind")
                access.check_kind_readable(principal, info)
                existing = self._lookup(info.kind, ref.name, ref.namespace)
                if existing is None or not access.may_read(principal, existing, self._lookup):
                    missing.append(_describe_ref(info, ref))
                    continue
                access.check_writable(principal, existing, existing)
                targets.append((ref, existing))
            if missing and not ignore_not_found:
                more = f" (and {len(missing) - 1} more of the request's objects)" if len(missing) > 1 else ""
                raise NotFoundError("not found" + more + "; nothing was deleted", obj=missing[0])
            return self._delete_checked(targets)

    def delete_collection(
        self, principal: Principal, info: KindInfo, namespace: str | None, selector: str | None
    ) -> list[Deleted]:
        """Deletes every object of a kind (in `namespace`, or all) that `selector` matches and the
        principal may read, all or none, as `delete_many`. Listed under the write lock, so what is
        deleted is exactly what was listed."""
        access.check_kind_readable(principal, info)
        with self._writes:
            listed = self.store.list(info.kind, namespace=namespace, label_selector=selector).items
            readable = self.reader(principal)
            targets = []
            for obj in listed:
                if readable(obj):
                    access.check_writable(principal, obj, obj)
                    targets.append((ObjectRef(obj.kind, obj.name, obj.namespace), obj))
            return self._delete_checked(targets)

    def _delete_checked(self, targets: Sequence[tuple[ObjectRef, Resource]]) -> list[Deleted]:
        keys = [(obj.kind, obj.namespace, obj.name) for _, obj in targets]
        if len(set(keys)) != len(keys):
            seen: set[tuple[str, str | None, str]] = set()
            for (_, obj), key in zip(targets, keys, strict=True):
                if key in seen:
                    raise ValidationError("appears twice in one request", obj=obj.describe())
                seen.add(key)
        queues = [obj.name for _, obj in targets if obj.kind == "Queue"]
        admission.check_queue_deletes(self.store, queues, frozenset(keys))
        results = self.store.delete_many([ref for ref, _ in targets])
        return [
            Deleted(existing if held is None else held, gone=held is None)
            for (_, existing), held in zip(targets, results, strict=True)
        ]

    # ---------------------------------------------------------------------------------- events

    def events(
        self,
        principal: Principal,
        kinds: Sequence[KindInfo],
        *,
        since: str | None,
        namespace: str | None,
        limit: int,
    ) -> tuple[list[WatchEvent], str]:
        """Events after `since` (None: the latest `limit`) and where to continue from; no waiting
        (a long poll waits on the change feed between two of these)."""
        for info in kinds:
            access.check_kind_readable(principal, info)
        if since is not None:
            check_version(since)
        names = [info.kind for info in kinds] or None
        limit = max(1, min(limit, MAX_EVENTS))
        head = int(self.store.resource_version)
        start = int(since) if since is not None else max(0, head - limit)
        events, cursor = self._page(names, namespace, start, limit, head)
        readable = self.reader(principal)
        return [e for e in events if readable(e.object)], str(cursor)

    def start_watch(
        self, principal: Principal, info: KindInfo, *, since: str | None, namespace: str | None
    ) -> int:
        """Where a watch of the kind starts: after `since`, or after the latest change.

        Checked before the answer starts, so that a bad or compacted resourceVersion is a 4xx rather
        than a broken stream.
        """
        access.check_kind_readable(principal, info)
        if since is None:
            return int(self.store.resource_version)
        version = check_version(since)
        # Raises GoneError now if `since` was compacted away.
        self.store.events_since(since, kinds=[info.kind], namespace=namespace, limit=1)
        return version

    def read_events(
        self, kinds: Collection[str] | None, namespace: str | None, after: int, limit: int
    ) -> tuple[list[WatchEvent], int]:
        """Up to `limit` events after `after` (unfiltered by principal) and the cursor after them."""
        head = int(self.store.resource_version)
        return self._page(sorted(kinds) if kinds is not None else None, namespace, after, limit, head)

    def reader(self, principal: Principal) -> Callable[[Resource], bool]:
        """`access.may_read` for one answer: the objects Events are about are read once each."""
        seen: dict[tuple[str, str, str | None], Resource | None] = {}

        def lookup(kind: str, name: str, namespace: str | None) -> Resource | None:
            key = (kind, name, namespace)
            if key not in seen:
                seen[key] = self._lookup(kind, name, namespace)
            return seen[key]

        return lambda obj: access.may_read(principal, obj, lookup)

    # ------------------------------------------------------------------------------- internals

    def _lookup(self, kind: str, name: str, namespace: str | None) -> Resource | None:
        try:
            return self.store.get(kind, name, namespace)
        except NotFoundError:
            return None

    def _find(self, obj: Resource) -> Resource | None:
        return self._lookup(obj.kind, obj.name, obj.namespace)

    def _page(
        self, kinds: list[str] | None, namespace: str | None, start: int, limit: int, head: int
    ) -> tuple[list[WatchEvent], int]:
        # `head` is read before the events: every event up to it is in the answer below (or did
        # not match), so continuing from the cursor misses nothing even when writes happen meanwhile.
        events = self.store.events_since(start, kinds=kinds, namespace=namespace, limit=limit)
        if events and len(events) == limit:  # a full page may stop short of the head
            return events, events[-1].resource_version
        last = events[-1].resource_version if events else start
        return events, max(last, head, start)


def _describe_ref(info: KindInfo, ref: ObjectRef) -> str:
    if info.namespaced:
        return f"{info.kind} {ref.namespace or DEFAULT_NAMESPACE}/{ref.name}"
    return f"{info.kind} {ref.name}"


def _action(existing: Resource | None, result: Resource) -> Action:
    if existing is None:
        return "created"
    if existing.metadata.resource_version == result.metadata.resource_version:
        return "unchanged"
    return "configured"


def event_dict(event: WatchEvent) -> dict[str, Any]:
    return {
        "type": event.type,
        "resourceVersion": str(event.resource_version),
        "object": event.object.to_dict(),
    }


def _status_target(info: KindInfo, name: str, namespace: str | None, doc: dict[str, Any]) -> str | None:
    """Checks that a status write's body names the object of its path; its resourceVersion, if any."""
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ValidationError("must be a mapping", field="metadata")
    if meta.get("name", name) != name:
        raise ValidationError(f"the path names {name}, the object {meta['name']}", field="metadata.name")
    if info.namespaced and meta.get("namespace", namespace) != namespace:
        raise ValidationError(
            f"the path is in namespace {namespace}, the object in {meta['namespace']}",
            field="metadata.namespace",
        )
    given = meta.get("resourceVersion")
    if given is None:
        return None
    if not isinstance(given, str):
        raise ValidationError(f"not a resourceVersion: {given!r}", field="metadata.resourceVersion")
    check_version(given)
    return given


def check_namespace(info: KindInfo, obj: Resource, namespace: str | None, name: str | None) -> None:
    """The object's namespace and name agree with the path it was sent to."""
    if info.namespaced and namespace is not None and obj.namespace != namespace:
        raise ValidationError(
            f"the path is in namespace {namespace}, the object in {obj.namespace}",
            obj=obj.describe(),
            field="metadata.namespace",
        )
    if name is not None and obj.name != name:
        raise ValidationError(
            f"the path names {name}, the object {obj.name}", obj=obj.describe(), field="metadata.name"
        )


def check_version(value: str) -> int:
    """A resourceVersion given by a client: a non-negative integer."""
    if not plain_digits(value) or len(value) > 18:
        raise ValidationError(f"not a resourceVersion: {value!r}", field="resourceVersion")
    return int(value)
