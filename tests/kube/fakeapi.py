"""An in-memory stand-in for the few API-server endpoints gpufleet uses, behind the Transport protocol.

It keeps the semantics the kubernetes world relies on, as a 1.3x API server has them: a global
resourceVersion, `generation` moving with spec, optimistic concurrency (409 on a stale
resourceVersion, in PUT and in patches that carry one), the status subresource, finalizers, watches
from a resourceVersion with 410 Expired once the history is compacted, bookmarks, Bindings (409 for
a pod already bound; their annotations merged into the pod) and Evictions (429 while a disruption
budget forbids). Like a bare API server it runs no controllers: bound pods deleted with a grace
period stay, with a deletionTimestamp.

What a real server does that callers can trip over is done here too: gpufleet's CRDs are installed
when the stand-in starts (`crds=False` leaves them out), a custom resource whose CRD is not installed
is answered 404, fields its CRD's schema does not declare are pruned on every write, new pods get the
`DefaultTolerationSeconds` tolerations, an eviction sets the pod's `DisruptionTarget` condition
(reason `EvictionByEvictionAPI`) before it deletes it, a custom resource's object keys come back
sorted (it is stored as unstructured JSON, Go maps), and a watch with a label selector reports an
object that enters the selection as ADDED and one that leaves it as DELETED. A Namespace is created
with the `kubernetes` finalizer in `spec.finalizers`; deleting it leaves it Terminating (no namespace
controller deletes its content or finalizes it), new objects in it are refused (403), and a PUT of its
`finalize` subresource without that finalizer removes it.

It is a unit-test tool, not the e2e proof (that is `pytest -m k8s`).
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import jsonschema

from gpufleet.api.crd import custom_resource_definitions
from gpufleet.api.labels import LabelSelector
from gpufleet.kube.transport import JSON_PATCH, ApiError, Json

NOW = "2026-11-29T12:00:00Z"
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
NAMESPACES = "/v1/namespaces"
BUILT_IN_GROUPS = ("apiextensions.k8s.io", "coordination.k8s.io", "policy", "batch", "scheduling.k8s.io",
                   "apps", "events.k8s.io", "rbac.authorization.k8s.io", "resource.k8s.io")  # fmt: skip
DEFAULT_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{name}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for name in ("not-ready", "unreachable")
]
"""What the DefaultTolerationSeconds admission plugin adds to every pod (NoExecute only)."""


def _status(code: int, reason: str, message: str) -> ApiError:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    return ApiError(code, reason, message, body)


def _parse(path: str) -> tuple[str, str | None, str | None, str | None]:
    """(resource key `group/version/plural`, namespace, name, subresource) of a path."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group_version, rest = f"/{parts[1]}", parts[2:]
    else:
        group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    namespace = None
    if rest[0] == "namespaces" and rest[2:] in (["finalize"], ["status"]):
        return f"{group_version}/namespaces", None, rest[1], rest[2]  # a Namespace's subresource
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return f"{group_version}/{plural}", namespace, name, sub


def _json_patch(doc: Json, ops: list[Json]) -> Json:
    doc = copy.deepcopy(doc)
    for op in ops:
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        parent = doc
        for key in keys[:-1]:
            parent = parent[int(key)] if isinstance(parent, list) else parent.setdefault(key, {})
        last = keys[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif op["op"] == "test" and parent.get(last) != op["value"]:
            raise _status(422, "Invalid", f"test of {op['path']} failed")
    return doc


def _merge_patch(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


class FakeApiServer:
    """The Transport protocol over dictionaries. Thread-safe; watches block on a condition."""

    STATUS_SUBRESOURCE = ("/v1/pods", "/v1/nodes", "/v1/services")

    def __init__(self, *, retention: int = 1000, crds: bool = True) -> None:
        self.objects: dict[str, dict[tuple[str, str], Json]] = {}
        # (rv, resource key, type, object, its labels before the change: None when it is new)
        self.log: list[tuple[int, str, str, Json, dict[str, str] | None]] = []
        self._labels: dict[tuple[str, str, str], dict[str, str]] = {}
        self.rv = itertools.count(100)
        self.head = 99
        self.compacted = 0
        self.retention = retention
        self.lock = threading.Condition()
        self.requests: list[tuple[str, str]] = []
        self.failures: list[ApiError] = []
        self.blocked_evictions: set[tuple[str, str]] = set()
        self.pod_logs: dict[tuple[str, str], list[str]] = {}
        """What each pod (namespace, name) printed, served by `lines` as the `pods/log` subresource."""
        if crds:
            with self.lock:
                for crd in custom_resource_definitions():
                    self._create(CRDS, None, crd)

    # ------------------------------------------------------------------ test helpers
    def fail_next(self, count: int, status: int = 503) -> None:
        """The next `count` requests (and watches) fail as an unavailable server would."""
        with self.lock:
            self.failures.extend(_status(status, "ServiceUnavailable", "unavailable") for _ in range(count))

    def compact(self) -> None:
        """Drops the watch history: a watch from any older resourceVersion gets 410."""
        with self.lock:
            self.compacted = self.head
            self.log.clear()

    def put(self, path: str, obj: Json) -> Json:
        """Creates a real-shaped object at a collection path (test setup: its status and creation
        time are kept, the server-owned uid and resourceVersion are replaced)."""
        body = copy.deepcopy(obj)
        meta = body.setdefault("metadata", {})
        for server_owned in ("resourceVersion", "uid", "managedFields"):
            meta.pop(server_owned, None)
        created = self.request("POST", path, body=body)
        key, ns, name, _ = _parse(path + "/" + created["metadata"]["name"])
        with self.lock:
            stored = self.objects[key][(ns or "", name or "")]
            if "status" in obj:
                stored["status"] = copy.deepcopy(obj["status"])
            if "creationTimestamp" in meta:
                stored["metadata"]["creationTimestamp"] = meta["creationTimestamp"]
            if stored != created:
                self._bump(key, "MODIFIED", stored)
            return copy.deepcopy(stored)

    def get(self, path: str) -> Json:
        return self.request("GET", path)

    # ------------------------------------------------------------------ transport
    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Json:
        query = dict(query or {})
        with self.lock:
            self.requests.append((method, path))
            if self.failures:
                raise self.failures.pop(0)
            key, ns, name, sub = _parse(path)
            self._served(key)
            if method == "GET" and name is None:
                return self._list(key, ns, query)
            if method == "GET":
                return copy.deepcopy(self._find(key, ns, name))
            if method == "POST" and sub == "binding":
                return self._bind(key, ns or "", name or "", body)
            if method == "POST" and sub == "eviction":
                return self._evict(key, ns or "", name or "", body)
            if method == "POST":
                return self._create(key, ns, body)
            if method == "PUT":
                return self._replace(key, ns, name or "", body, sub)
            if method == "PATCH":
                current = self._find(key, ns, name)
                if content_type == JSON_PATCH:
                    patched = _json_patch(current, body)
                else:
                    patched = _merge_patch(current, body)
                return self._replace(key, ns, name or "", patched, sub)
            if method == "DELETE" and name is None:  # deletecollection, as `kubectl delete --all -l`
                listed = self._list(key, ns, query)["items"]
                for item in listed:
                    meta = item["metadata"]
                    self._delete(key, meta.get("namespace") or "", meta["name"], body or {})
                return {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": listed}
            if method == "DELETE":
                return self._delete(key, ns or "", name or "", body or {})
        raise AssertionError(f"unsupported {method} {path}")

    def lines(self, path: str, *, query: Mapping[str, str | int | bool]) -> Iterator[str]:
        """A pod's log (`.../pods/NAME/log`): its lines in `pod_logs`, 404 for a pod that is not there."""
        with self.lock:
            self.requests.append(("GET", path))
            key, ns, name, sub = _parse(path)
            if key != "/v1/pods" or sub != "log":
                raise AssertionError(f"unsupported log path {path}")
            self._find(key, ns, name)
            found = list(self.pod_logs.get((ns or "", name or ""), []))
        yield from found

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        key, ns, _, _ = _parse(path)
        with self.lock:
            self.requests.append(("WATCH", path))
            if self.failures:
                raise self.failures.pop(0)
            self._served(key)
        since = int(query.get("resourceVersion") or self.head)
        selector = LabelSelector.parse(str(query.get("labelSelector", "")) or None)
        fields = _field_selector(str(query.get("fieldSelector", "")))
        bookmarks = bool(query.get("allowWatchBookmarks"))
        deadline = time.monotonic() + min(timeout, float(query.get("timeoutSeconds", timeout)))
        while True:
            with self.lock:
                if since < self.compacted:
                    raise _status(410, "Expired", f"too old resource version: {since} ({self.compacted})")
                batch = [
                    (rv, kind, obj, before) for rv, k, kind, obj, before in self.log
                    if rv > since and k == key and (ns is None or obj["metadata"].get("namespace") == ns)
                ]  # fmt: skip
                if not batch:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        if bookmarks:
                            mark = {"metadata": {"resourceVersion": str(self.head)}}
                            yield {"type": "BOOKMARK", "object": mark}
                        return
                    self.lock.wait(min(remaining, 0.05))
                    continue
            for rv, kind, obj, before in batch:
                since = rv
                # As the API server's watch cache: an object that comes into the selection is ADDED,
                # one that leaves it is DELETED, whatever the change was.
                # A field selector here names fields an object keeps (an Event's involvedObject).
                fields_in = all((_field(obj, path) == value) is equal for path, equal, value in fields)
                now_in = (
                    fields_in and kind != "DELETED" and selector.matches(obj["metadata"].get("labels") or {})
                )
                was_in = fields_in and before is not None and selector.matches(before)
                if now_in:
                    yield {"type": "MODIFIED" if was_in else "ADDED", "object": copy.deepcopy(obj)}
                elif was_in:
                    yield {"type": "DELETED", "object": copy.deepcopy(obj)}

    # ------------------------------------------------------------------ internals
    def _schema(self, key: str) -> Json | None:
        """The openAPIV3Schema of a custom resource's CRD; None for built-in resources."""
        if key.startswith("/"):
            return None
        group, _, rest = key.partition("/")
        version, _, plural = rest.partition("/")
        if group in BUILT_IN_GROUPS:
            return None
        crd = self.objects.get(CRDS, {}).get(("", f"{plural}.{group}"))
        if crd is None:
            return None
        served = [v for v in crd["spec"]["versions"] if v["name"] == version and v.get("served")]
        return served[0]["schema"]["openAPIV3Schema"] if served else None

    def _served(self, key: str) -> None:
        """A real server has no URL for a custom resource whose CRD is not installed: 404."""
        group = key.partition("/")[0]
        if not key.startswith("/") and group not in BUILT_IN_GROUPS and self._schema(key) is None:
            raise _status(404, "NotFound", f"the server could not find the requested resource ({key})")

    def _find(self, key: str, ns: str | None, name: str | None) -> Json:
        found = self.objects.get(key, {}).get((ns or "", name or ""))
        if found is None:
            raise _status(404, "NotFound", f'{key.rsplit("/", 1)[-1]} "{name}" not found')
        return found

    def _list(self, key: str, ns: str | None, query: Mapping[str, Any]) -> Json:
        selector = LabelSelector.parse(str(query.get("labelSelector", "")) or None)
        fields = _field_selector(str(query.get("fieldSelector", "")))
        items = [
            copy.deepcopy(obj) for (o_ns, _), obj in sorted(self.objects.get(key, {}).items())
            if (ns is None or o_ns == ns) and selector.matches(obj["metadata"].get("labels", {}))
            and all((_field(obj, path) == value) is equal for path, equal, value in fields)
        ]  # fmt: skip
        # Pages as a real server gives them: the continue token carries the first page's
        # resourceVersion, which every page reports (here the pages read the current objects).
        version, offset = str(self.head), 0
        token = str(query.get("continue", "") or "")
        if token:
            version, _, start = token.partition(":")
            offset = int(start)
        meta: Json = {"resourceVersion": version}
        limit = int(query.get("limit", 0) or 0)
        if limit and str(query.get("resourceVersion", "")) != "0":  # the watch cache ignores limit
            if offset + limit < len(items):
                meta["continue"] = f"{version}:{offset + limit}"
            items = items[offset : offset + limit]
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items}

    def _bump(self, key: str, kind: str, obj: Json) -> None:
        rv = next(self.rv)
        self.head = rv
        obj["metadata"]["resourceVersion"] = str(rv)
        where = (key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        before = self._labels.get(where)
        if kind == "DELETED":
            self._labels.pop(where, None)
        else:
            self._labels[where] = dict(obj["metadata"].get("labels") or {})
        self.log.append((rv, key, kind, copy.deepcopy(obj), None if kind == "ADDED" else before))
        if len(self.log) > self.retention:
            dropped = self.log.pop(0)
            self.compacted = dropped[0]
        self.lock.notify_all()

    def _create(self, key: str, ns: str | None, body: Json) -> Json:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if ns is not None:
            meta["namespace"] = ns
        if meta.get("resourceVersion"):
            raise _status(400, "BadRequest", "resourceVersion should not be set on objects to be created")
        if ns is not None and self.objects.get(NAMESPACES, {}).get(("", ns), {}).get("metadata", {}).get(
            "deletionTimestamp"
        ):
            raise _status(
                403,
                "Forbidden",
                f"unable to create new content in namespace {ns} because it is being terminated",
            )
        table = self.objects.setdefault(key, {})
        where = (meta.get("namespace") or "", meta["name"])
        if where in table:
            raise _status(409, "AlreadyExists", f'"{meta["name"]}" already exists')
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=NOW, generation=1)
        if key == "/v1/pods":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
        elif key == "/v1/nodes":
            obj.pop("status", None)
            # What every bare API server does to a new Node: nothing ever lifts this taint.
            taints = obj.setdefault("spec", {}).setdefault("taints", [])
            taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
        elif key == NAMESPACES:
            # What the API server's registry gives every Namespace: the namespace controller's finalizer.
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        elif key == "apiextensions.k8s.io/v1/customresourcedefinitions":
            names = obj["spec"]["names"]
            obj["status"] = {
                "acceptedNames": names,
                "conditions": [
                    {"type": "NamesAccepted", "status": "True"},
                    {"type": "Established", "status": "True"},
                ],
            }
        else:
            obj.pop("status", None)
        if key == "/v1/pods":
            tolerations = obj["spec"].setdefault("tolerations", [])
            tolerations += [
                t for t in DEFAULT_TOLERATIONS if t["key"] not in {x.get("key") for x in tolerations}
            ]
        obj = self._pruned(key, obj)
        table[where] = obj
        self._bump(key, "ADDED", obj)
        return copy.deepcopy(obj)

    def _pruned(self, key: str, obj: Json) -> Json:
        """The object as a real server stores it: pruned to its CRD's schema, then validated (422)."""
        schema = self._schema(key)
        if schema is None:
            return obj
        # metadata is the server's own business, whatever the schema says of it
        body = _prune({k: v for k, v in obj.items() if k != "metadata"}, schema)
        errors = sorted(jsonschema.Draft4Validator(_without_metadata(schema)).iter_errors(body), key=str)
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path)
            raise _status(422, "Invalid", f"{obj.get('kind')} {obj['metadata'].get('name')!r} is invalid: "
                          f"{where}: {errors[0].message}")  # fmt: skip
        # A custom resource is kept as unstructured JSON (Go maps): its object keys come back sorted, so
        # the order a user wrote a map in (a Queue's quotas) does not survive the server.
        return _sorted_keys({**body, "metadata": obj["metadata"]})

    def _has_status(self, key: str) -> bool:
        return key in self.STATUS_SUBRESOURCE or not key.startswith("/")

    def _replace(self, key: str, ns: str | None, name: str, body: Json, sub: str | None) -> Json:
        current = self._find(key, ns, name)
        if sub == "finalize":
            return self._finalize(current, body)
        given = body.get("metadata", {}).get("resourceVersion")
        if given is not None and given != current["metadata"]["resourceVersion"]:
            raise _status(409, "Conflict", "the object has been modified; please apply your changes to "
                          "the latest version and try again")  # fmt: skip
        new = copy.deepcopy(current)
        if sub == "status":
            new["status"] = copy.deepcopy(body.get("status", {}))
        else:
            for field, value in body.items():
                if field in ("metadata", "status"):
                    continue
                new[field] = copy.deepcopy(value)
            for field in [f for f in new if f not in body and f not in ("metadata", "status", "kind",
                                                                         "apiVersion")]:  # fmt: skip
                del new[field]
            meta = body.get("metadata", {})
            for field in ("labels", "annotations", "finalizers", "ownerReferences"):
                if meta.get(field):
                    new["metadata"][field] = copy.deepcopy(meta[field])
                else:
                    new["metadata"].pop(field, None)
            if not self._has_status(key) and "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            if new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        new = self._pruned(key, new)
        if new == current:
            return copy.deepcopy(current)
        # As the real registry: an update removes an object being deleted once no finalizer is left,
        # but never one still in its grace period (a bound pod waiting for its kubelet).
        if (
            new["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and not current["metadata"].get("deletionGracePeriodSeconds")
            and not (key == NAMESPACES and (new.get("spec") or {}).get("finalizers"))
        ):
            del self.objects[key][(ns or "", name)]
            self._bump(key, "DELETED", new)
            return copy.deepcopy(new)
        self.objects[key][(ns or "", name)] = new
        self._bump(key, "MODIFIED", new)
        return copy.deepcopy(new)

    def _finalize(self, namespace: Json, body: Json) -> Json:
        """PUT namespaces/NAME/finalize: its `spec.finalizers` as given; a Terminating namespace left
        with none (and no metadata finalizers) is removed, as the namespace controller's call does."""
        new = copy.deepcopy(namespace)
        new.setdefault("spec", {})["finalizers"] = list((body.get("spec") or {}).get("finalizers") or [])
        name = new["metadata"]["name"]
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not new["spec"]["finalizers"] and not meta.get("finalizers"):
            del self.objects[NAMESPACES][("", name)]
            self._bump(NAMESPACES, "DELETED", new)
            return copy.deepcopy(new)
        if new != namespace:
            self.objects[NAMESPACES][("", name)] = new
            self._bump(NAMESPACES, "MODIFIED", new)
        return copy.deepcopy(new)

    def _delete(self, key: str, ns: str, name: str, options: Json) -> Json:
        current = self._find(key, ns, name)
        pre = options.get("preconditions", {})
        if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise _status(409, "Conflict", "Precondition failed: ResourceVersion mismatch")
        if key == NAMESPACES and (current.get("spec") or {}).get("finalizers"):
            # Terminating until the namespace controller, which a bare API server lacks, finalizes it.
            if current["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(current)
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            new["status"] = {"phase": "Terminating"}
            self.objects[key][("", name)] = new
            self._bump(key, "MODIFIED", new)
            return copy.deepcopy(new)
        grace = options.get("gracePeriodSeconds")
        graceful = key == "/v1/pods" and current.get("spec", {}).get("nodeName") and grace != 0
        if current["metadata"].get("finalizers") or graceful:
            if current["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(current)
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if graceful:
                new["metadata"]["deletionGracePeriodSeconds"] = 30 if grace is None else grace
            self.objects[key][(ns, name)] = new
            self._bump(key, "MODIFIED", new)
            return copy.deepcopy(new)
        del self.objects[key][(ns, name)]
        gone = copy.deepcopy(current)
        self._bump(key, "DELETED", gone)
        return gone

    def _bind(self, key: str, ns: str, name: str, body: Json) -> Json:
        pod = self._find(key, ns, name)
        if pod["spec"].get("nodeName"):
            raise _status(
                409, "Conflict", f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
            )
        target = body["target"]["name"]
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = target
        # As the real server's binding: the Binding's annotations are merged into the pod.
        noted = (body.get("metadata") or {}).get("annotations") or {}
        if noted:
            new["metadata"]["annotations"] = {**(new["metadata"].get("annotations") or {}), **noted}
        conditions = new["status"].setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": NOW})
        self.objects[key][(ns, name)] = new
        self._bump(key, "MODIFIED", new)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    def _evict(self, key: str, ns: str, name: str, body: Json) -> Json:
        pod = self._find(key, ns, name)
        if (ns, name) in self.blocked_evictions:
            raise _status(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            )
        # The Eviction API's own condition, written over whatever DisruptionTarget the pod had.
        conditions = [c for c in pod["status"].get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                           "message": "Eviction API: evicting", "lastTransitionTime": NOW})  # fmt: skip
        self._replace(key, ns, name, {"status": {**pod["status"], "conditions": conditions}}, "status")
        self._delete(key, ns, name, body.get("deleteOptions") or {})
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}


def _prune(value: Any, schema: Json) -> Any:
    """What a structural schema keeps of a value: undeclared object fields are dropped."""
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            keep = schema.get("x-kubernetes-preserve-unknown-fields")
            return {
                k: _prune(v, props[k]) if k in props else v for k, v in value.items() if keep or k in props
            }
        if isinstance(extra, dict):
            return {k: _prune(v, extra) for k, v in value.items()}
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(v, schema["items"]) for v in value]
    return value


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def _without_metadata(schema: Json) -> Json:
    return {
        **schema,
        "properties": {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"},
        "required": [k for k in schema.get("required", []) if k != "metadata"],
    }


def _field_selector(text: str) -> list[tuple[str, bool, str]]:
    """`a.b=v,c!=w` as (path, equal, value) triples (`=`, `==` and `!=`, as a real server takes)."""
    clauses = []
    for clause in filter(None, text.split(",")):
        path, _, value = clause.partition("=")
        equal = not path.endswith("!")
        clauses.append((path.rstrip("!").strip(), equal, value.lstrip("=").strip()))
    return clauses


def _field(obj: Json, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def dumps(obj: Json) -> str:
    return json.dumps(obj, sort_keys=True)
