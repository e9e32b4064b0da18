"""The Store protocol over the Kubernetes API: gpufleet's kinds as custom resources.

The API server already has the semantics the protocol promises (a store-wide resourceVersion,
generation, optimistic concurrency, the status subresource, finalizers, watches that answer 410 Gone),
so this module only translates: objects to and from their JSON, HTTP refusals to gpufleet's errors.

Writes never send a whole object with PUT: the API server keeps fields gpufleet's models do not know
(ownerReferences, managedFields), and a PUT from a model would drop them. `update` and
`update_status` send a JSON patch that replaces exactly what the protocol says they replace, with the
resourceVersion in it, which the API server checks like a PUT's (409 when stale).
"""

from __future__ import annotations

import builtins
import queue
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pydantic

from gpufleet.api.errors import ConflictError, GoneError, GpuFleetError, NotFoundError, ValidationError
from gpufleet.api.fields import PRIORITY_CLASSES_CONTEXT
from gpufleet.api.kinds import kind_info, registered_kinds
from gpufleet.api.labels import LabelSelector
from gpufleet.api.meta import DEFAULT_NAMESPACE, ObjectMeta
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.api.validation import translate_error
from gpufleet.kube.resources import ResourceType, resource_for
from gpufleet.kube.transport import JSON_PATCH, ApiError, Json, Transport
from gpufleet.store.protocol import ListResult, ObjectRef, Selector, Store, WatchEvent

R = TypeVar("R", bound=Resource)

_STORED = {PRIORITY_CLASSES_CONTEXT: None}
_META_KEYS = frozenset(field.alias or name for name, field in ObjectMeta.model_fields.items())
WATCH_CHUNK_SECONDS = 300
"""A server-side watch is reopened after this long, from where it stopped."""
POLL_SECONDS = 1
"""How long `events_since` lets the server replay history; it has no non-blocking history read."""


def api_error(exc: ApiError, *, obj: str) -> GpuFleetError | ApiError:
    """gpufleet's error for an API-server refusal; refusals a user cannot cause stay ApiError."""
    if exc.status == 404:
        return NotFoundError("not found", obj=obj)
    if exc.status == 409:
        return ConflictError(exc.message or exc.reason, obj=obj, field="metadata.resourceVersion")
    if exc.status == 410:
        return GoneError(exc.message or "too old resource version; list again", field="resourceVersion")
    if exc.status in (400, 422):
        return ValidationError(exc.message or exc.reason, obj=obj)
    return exc


def from_json(info: KindInfo, data: Json) -> Resource:
    """A model from an object as the API server returns it (metadata it does not model left out).

    An object the server stored but gpufleet's checks refuse (written with kubectl, which only its
    CRD's schema checks) raises gpufleet's `ValidationError` naming the object and the field: the
    user's error, which a caller says on that object, never a failure of the caller's round."""
    body = dict(data)
    meta = data.get("metadata", {})
    body["metadata"] = {k: v for k, v in meta.items() if k in _META_KEYS}
    try:
        return info.model.model_validate(body, context=_STORED)
    except pydantic.ValidationError as exc:
        where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
        raise translate_error(exc, obj=f"{info.kind} {where}{meta.get('name')}") from None


def to_json(obj: Resource) -> Json:
    """An object's JSON form, validated again (models do not validate attribute assignment)."""
    data = obj.to_dict()
    try:
        type(obj).model_validate(data, context=_STORED)
    except pydantic.ValidationError as exc:
        raise translate_error(exc, obj=obj.describe()) from None
    return data


class KubeStore:
    """The Store protocol on an API server; gpufleet's kinds must be installed as CRDs."""

    def __init__(self, transport: Transport) -> None:
        self._api = transport

    # ------------------------------------------------------------------------- reads
    @property
    def resource_version(self) -> str:
        # A list with limit=1 is a quorum read: its resourceVersion is the store's latest.
        answer = self._api.request("GET", "/api/v1/namespaces", query={"limit": 1})
        return str(answer.get("metadata", {}).get("resourceVersion", "0"))

    @overload
    def get(self, kind: type[R], name: str, namespace: str | None = None) -> R: ...
    @overload
    def get(self, kind: str, name: str, namespace: str | None = None) -> Resource: ...
    def get(self, kind: type[R] | str, name: str, namespace: str | None = None) -> Resource:
        info, res = _kind(kind)
        ns = _namespace(info, namespace)
        return from_json(info, self._call(info, name, ns, "GET", res.item(name, ns)))

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
        info, res = _kind(kind)
        ns = None if namespace is None else _namespace(info, namespace)
        query, local = _selector_query(label_selector)
        answer = self._call(info, "", ns, "GET", res.collection(ns), query=query)
        items = [from_json(info, item) for item in answer.get("items", [])]
        items = [i for i in items if local.matches(i.metadata.labels)]
        items.sort(key=lambda i: (i.metadata.namespace or "", i.metadata.name))
        return ListResult(items=items, resource_version=str(answer["metadata"].get("resourceVersion", "0")))

    def events_since(
        self,
        resource_version: str | int,
        *,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[WatchEvent]:
        """Events after `resource_version`: the server replays them into a watch that ends in a second."""
        events: builtins.list[WatchEvent] = []
        for kind in _kinds(kinds):
            with KubeWatch(self._api, [kind], namespace, str(resource_version), POLL_SECONDS) as watch:
                events.extend(watch)
        events.sort(key=lambda e: e.resource_version)
        return events if limit is None else events[:limit]

    def watch(
        self,
        *,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
        since: str | int | None = None,
        timeout: float | None = None,
    ) -> KubeWatch:
        start = self.resource_version if since is None else str(since)
        return KubeWatch(self._api, _kinds(kinds), namespace, start, timeout)

    # ------------------------------------------------------------------------ writes
    def create(self, obj: R) -> R:
        info, res = _kind(type(obj))
        data = to_json(obj)
        meta = data["metadata"]
        ns = _namespace(info, meta.get("namespace"))
        if meta.get("resourceVersion"):
            raise ValidationError(
                "must not be set when creating an object",
                obj=obj.describe(),
                field="metadata.resourceVersion",
            )
        for key in ("uid", "generation", "creationTimestamp", "deletionTimestamp"):
            meta.pop(key, None)
        data.pop("status", None)  # written through the status subresource, as the protocol says
        created = self._call(info, meta["name"], ns, "POST", res.collection(ns), body=data)
        return _same_kind(obj, from_json(info, created))

    def update(self, obj: R) -> R:
        info, _ = _kind(type(obj))
        data = to_json(obj)
        meta = data["metadata"]
        patch = [_replace("/metadata/" + key, meta.get(key, _EMPTY[key])) for key in _EMPTY]
        patch.append(_replace("/spec", data.get("spec", {})))
        return _same_kind(obj, self._patch(info, obj, patch, status=False))

    def update_status(self, obj: R) -> R:
        info, _ = _kind(type(obj))
        if "status" not in info.model.model_fields:
            raise ValidationError(f"{info.kind} has no status", obj=obj.describe(), field="status")
        data = to_json(obj)
        patch = [_replace("/status", data.get("status", {}))]
        return _same_kind(obj, self._patch(info, obj, patch, status=True))

    def apply(self, obj: R) -> R:
        info, _ = _kind(type(obj))
        data = to_json(obj)
        fresh = obj.model_copy(deep=True)
        fresh.metadata.resource_version = None
        try:
            return self.create(fresh)
        except ConflictError:
            pass  # it exists: replace spec, labels and annotations whatever its resourceVersion
        meta = data["metadata"]
        patch = [_replace("/metadata/" + key, meta.get(key, {})) for key in ("labels", "annotations")]
        patch.append(_replace("/spec", data.get("spec", {})))
        return _same_kind(obj, self._patch(info, fresh, patch, status=False))

    def apply_many(self, objs: Sequence[Resource], *, dry_run: bool = False) -> builtins.list[Resource]:
        """Best effort, NOT atomic: the Kubernetes API has no multi-object transaction, so this
        applies the objects one by one, and an error part-way leaves the earlier ones applied."""
        if dry_run:  # gpufleet serves no API over a cluster; kubectl asks its API server for a dry run
            raise ValidationError(
                "this store makes no dry runs: use `kubectl apply --dry-run=server`", field="dryRun"
            )
        return [self.apply(obj) for obj in objs]

    def delete(
        self,
        kind: type[Resource] | str,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
    ) -> Resource | None:
        info, res = _kind(kind)
        ns = _namespace(info, namespace)
        options: Json = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if resource_version is not None:
            options["preconditions"] = {"resourceVersion": resource_version}
        answer = self._call(info, name, ns, "DELETE", res.item(name, ns), body=options)
        meta = answer.get("metadata", {})
        if answer.get("kind") == "Status" or not (meta.get("deletionTimestamp") and meta.get("finalizers")):
            return None
        return from_json(info, answer)

    def delete_many(self, refs: Sequence[ObjectRef]) -> builtins.list[Resource | None]:
        """Best effort, NOT atomic, as `apply_many`: one delete after another."""
        return [self.delete(r.kind, r.name, r.namespace, resource_version=r.resource_version) for r in refs]

    # --------------------------------------------------------------------- internals
    def _patch(self, info: KindInfo, obj: Resource, patch: builtins.list[Json], *, status: bool) -> Resource:
        res = resource_for(info.kind)
        ns = _namespace(info, obj.metadata.namespace)
        version = obj.metadata.resource_version
        if version is not None:
            # A resourceVersion in the patched object is a precondition: stale means 409.
            patch.insert(0, _replace("/metadata/resourceVersion", version))
        path = res.item(obj.metadata.name, ns, "status" if status else None)
        answer = self._call(info, obj.metadata.name, ns, "PATCH", path, body=patch, content_type=JSON_PATCH)
        return from_json(info, answer)

    def _call(
        self, info: KindInfo, name: str, ns: str | None, method: str, path: str, **options: Any
    ) -> Json:
        try:
            return self._api.request(method, path, **options)
        except ApiError as exc:
            where = f"{info.kind} {ns}/{name}" if ns and name else f"{info.kind} {name}".rstrip()
            raise api_error(exc, obj=where) from None


_EMPTY: dict[str, Any] = {"labels": {}, "annotations": {}, "finalizers": []}


def _replace(path: str, value: Any) -> Json:
    # `add` replaces a member that exists and creates one that does not (`replace` needs it to exist).
    return {"op": "add", "path": path, "value": value}


class KubeWatch:
    """Watches of one or more kinds merged into one iterator (one thread per kind).

    Events of one kind come in resourceVersion order; `resource_version` is the lowest point every
    kind's watch has reached, so resuming from it misses nothing. A 410 from the server is raised as
    `GoneError` from `next()`.
    """

    def __init__(
        self,
        transport: Transport,
        kinds: Sequence[KindInfo],
        namespace: str | None,
        since: str,
        timeout: float | None,
    ) -> None:
        self._api = transport
        self._namespace = namespace
        self._timeout = timeout
        self._events: queue.Queue[WatchEvent | BaseException | None] = queue.Queue()
        self._cursors = {info.kind: int(since) for info in kinds}
        self._running = len(kinds)
        self._closed = threading.Event()
        for info in kinds:
            threading.Thread(target=self._pump, args=(info,), daemon=True, name=f"watch-{info.kind}").start()

    @property
    def resource_version(self) -> str:
        return str(min(self._cursors.values(), default=0))

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        while self._running > 0 and not self._closed.is_set():
            item = self._events.get()
            if item is None:
                self._running -= 1
                continue
            if isinstance(item, BaseException):
                self.close()
                raise item
            self._cursors[item.object.kind] = item.resource_version
            return item
        raise StopIteration

    def close(self) -> None:
        self._closed.set()

    def __enter__(self) -> KubeWatch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _pump(self, info: KindInfo) -> None:
        import time

        res = resource_for(info.kind)
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        cursor = self._cursors[info.kind]
        try:
            while not self._closed.is_set():
                left = WATCH_CHUNK_SECONDS if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    break
                chunk = max(1, min(int(left + 0.999), WATCH_CHUNK_SECONDS))
                query: dict[str, str | int | bool] = {
                    "watch": True,
                    "resourceVersion": str(cursor),
                    "allowWatchBookmarks": True,
                    "timeoutSeconds": chunk,
                }
                for line in self._api.watch(res.collection(self._namespace), query=query, timeout=chunk + 5):
                    if self._closed.is_set():
                        return
                    obj = line["object"]
                    cursor = max(cursor, int(obj["metadata"]["resourceVersion"]))
                    if line["type"] == "BOOKMARK":
                        continue
                    self._events.put(WatchEvent(line["type"], from_json(info, obj), cursor))
        except ApiError as exc:
            self._events.put(api_error(exc, obj=info.kind) if exc.status == 410 else exc)
        except BaseException as exc:  # handed to the consumer, which raises it
            self._events.put(exc)
        finally:
            self._events.put(None)


def _kind(kind: type[Resource] | str) -> tuple[KindInfo, ResourceType]:
    name = kind if isinstance(kind, str) else str(kind.model_fields["kind"].default)
    info = kind_info(name)
    if info is None or (not isinstance(kind, str) and info.model is not kind):
        raise ValidationError(f"kind {name} is not registered (see gpufleet.api.register_kind)", field="kind")
    return info, resource_for(info.kind)


def _kinds(kinds: Sequence[str] | None) -> builtins.list[KindInfo]:
    if kinds is None:
        return [info for info in registered_kinds() if info.crd]
    return [_kind(kind)[0] for kind in kinds]


def _namespace(info: KindInfo, namespace: str | None) -> str | None:
    if info.namespaced:
        return namespace or DEFAULT_NAMESPACE
    if namespace:
        raise ValidationError(
            f"{info.kind} is cluster-wide and takes no namespace", field="metadata.namespace"
        )
    return None


def _selector_query(selector: Selector) -> tuple[dict[str, str | int | bool], LabelSelector]:
    """What the server can filter (its own syntax) and what is left to filter here."""
    if selector is None:
        return {}, LabelSelector()
    if isinstance(selector, str):
        LabelSelector.parse(selector)  # a malformed selector fails here, with gpufleet's error
        return {"labelSelector": selector}, LabelSelector()
    if isinstance(selector, LabelSelector):
        return {}, selector
    return {"labelSelector": ",".join(f"{k}={v}" for k, v in selector.items())}, LabelSelector()


def _same_kind(obj: R, result: Resource) -> R:
    if not isinstance(result, type(obj)):  # pragma: no cover - _kind checks the registration
        raise TypeError(f"store returned {type(result).__name__} for {type(obj).__name__}")
    return result


if TYPE_CHECKING:  # mypy proves that KubeStore implements the Store protocol

    def _implements_store(store: KubeStore) -> Store:
        return store
