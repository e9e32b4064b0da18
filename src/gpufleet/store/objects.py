"""What both embedded stores share: Kubernetes' write semantics over an object's JSON form.

The SQLite store (`store.sqlite`) and the in-memory one (`store.memory`) keep each object as its
YAML/JSON form (camelCase keys, `Resource.to_dict`) and implement the protocol's rules on it the
same way: a write replaces whole sections (spec, status, metadata keys) of a shallow copy and never
changes a stored nested value in place, so a stored form can be shared by the object table and the
event log. These functions are those rules, kept in one place so the two stores cannot drift apart.
"""

from __future__ import annotations

import functools
import os
import random
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

import pydantic

from gpufleet.api.base import REVEAL_SECRETS
from gpufleet.api.errors import ConflictError, GoneError, ValidationError
from gpufleet.api.fields import PRIORITY_CLASSES_CONTEXT
from gpufleet.api.kinds import kind_info
from gpufleet.api.meta import DEFAULT_NAMESPACE
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.api.validation import translate_error

R = TypeVar("R", bound=Resource)
Json = dict[str, Any]

# Objects read back were validated when written; priority classes are not checked again, so a
# changed priority-class table cannot make stored objects unreadable.
STORED = {PRIORITY_CLASSES_CONTEXT: None}
STORED_FORM: dict[str, Any] = {
    "mode": "json",
    "by_alias": True,
    "exclude_none": True,
    "context": {REVEAL_SECRETS: True},
}
"""`model_dump` arguments giving a model's stored form (`to_dict(reveal_secrets=True)`), for dumping
a part of an object (with `include` or `exclude`) or a section alone."""


def utc_now() -> datetime:
    return datetime.now(UTC)


_UIDS = random.Random()  # seeded from the OS; a forked child reseeds, so no two processes share a draw
os.register_at_fork(after_in_child=_UIDS.seed)
_VERSION_4 = (0xF000 << 64) | (0xC000 << 48), (0x4000 << 64) | (0x8000 << 48)


def new_uid() -> str:
    """A random (version 4) UUID in its usual text form, for a new object's metadata.uid.

    Every create takes one: `str(uuid.uuid4())` builds a UUID object and reads the OS's random
    source each time, three times the cost of these few integer and string operations."""
    clear, set_ = _VERSION_4
    h = f"{_UIDS.getrandbits(128) & ~clear | set_:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def kind_of(kind: type[Resource] | str) -> KindInfo:
    name = kind if isinstance(kind, str) else _kind_name(kind)
    info = kind_info(name)
    if info is None or (not isinstance(kind, str) and info.model is not kind):
        raise ValidationError(f"kind {name} is not registered (see gpufleet.api.register_kind)", field="kind")
    return info


@functools.cache  # every write asks; a model class's kind never changes
def _kind_name(model: type[Resource]) -> str:
    default = model.model_fields["kind"].default
    return default if isinstance(default, str) else model.__name__


def namespace_of(info: KindInfo, namespace: str | None) -> str:
    if info.namespaced:
        return namespace or DEFAULT_NAMESPACE
    if namespace:
        raise ValidationError(
            f"{info.kind} is cluster-wide and takes no namespace", field="metadata.namespace"
        )
    return ""


def describe(info: KindInfo, ns: str, name: str) -> str:
    return f"{info.kind} {ns}/{name}" if ns else f"{info.kind} {name}"


def version_of(value: str | int) -> int:
    try:
        version = int(value)
    except (TypeError, ValueError):
        raise ValidationError(f"not a resourceVersion: {value!r}", field="resourceVersion") from None
    if version < 0:
        raise ValidationError(f"not a resourceVersion: {value!r}", field="resourceVersion")
    return version


def gone(since: int, compacted: int) -> GoneError:
    return GoneError(
        f"resourceVersion {since} is too old: events up to {compacted} were compacted; list again",
        field="resourceVersion",
    )


def load(info: KindInfo, data: Json) -> Resource:
    return info.model.model_validate(data, context=STORED)


class RolledBack(Exception):
    """Raised inside a dry run's transaction so that it rolls back, carrying what it would have written."""

    def __init__(self, results: list[Resource]) -> None:
        super().__init__("dry run")
        self.results = results


def dumped(obj: Resource) -> tuple[KindInfo, Json]:
    """The registration of the object's kind and its JSON form (not validated yet)."""
    return kind_of(type(obj)), obj.to_dict(reveal_secrets=True)


def status_kind(obj: Resource) -> KindInfo:
    """The registration of the object's kind, which must have a status (what `update_status` writes)."""
    info = kind_of(type(obj))
    if not _has_status(info.model):
        raise ValidationError(f"{info.kind} has no status", obj=obj.describe(), field="status")
    return info


@functools.cache  # every status write asks; a model class's fields never change
def _has_status(model: type[Resource]) -> bool:
    return "status" in model.model_fields


def dumped_but_status(obj: Resource) -> Json:
    """The JSON form of the object without its status, as `dumped` would give it: what a create, an
    apply or an update reads (each keeps the stored status, or none, so the given one is not dumped)."""
    return obj.model_dump(exclude={"status"}, **STORED_FORM)


def dumped_status(obj: Resource) -> Json:
    """The JSON form of the object's status alone, as `dumped` would give it, without dumping the spec
    and metadata (a quarter of the cost)."""
    data = obj.model_dump(include={"status"}, **STORED_FORM)
    status: Json = data.get("status", {})
    return status


def validated(obj: Resource) -> tuple[KindInfo, Json]:
    """The registration of the object's kind and its JSON form, validated again.

    Models do not validate attribute assignments, so an object changed after it was built could
    hold an invalid value; it is refused here rather than stored.
    """
    info, data = dumped(obj)
    with translated(obj):
        info.model.model_validate(data, context=STORED)
    return info, data


class translated:
    """A refusal by the model's validation as a ValidationError naming `obj` and the field.

    A class, not a `contextmanager` generator: it wraps every store write, and a generator's
    set-up and tear-down cost several times the two calls here."""

    __slots__ = ("obj",)

    def __init__(self, obj: Resource) -> None:
        self.obj = obj

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, pydantic.ValidationError):
            raise translate_error(exc, obj=self.obj.describe()) from None


def check_version(info: KindInfo, obj: Resource, current: Json) -> None:
    given = obj.metadata.resource_version
    if given is not None and given != current["metadata"]["resourceVersion"]:
        raise conflict(info, current, given)


def conflict(info: KindInfo, current: Json, given: str) -> ConflictError:
    meta = current["metadata"]
    return ConflictError(
        f"the object has been modified (resourceVersion {given}, now {meta['resourceVersion']}); "
        "read it again and retry",
        obj=describe(info, meta.get("namespace") or "", meta["name"]),
        field="metadata.resourceVersion",
    )


def with_spec_and_meta(info: KindInfo, current: Json, new: Json, *, finalizers: bool) -> Json:
    """`current` with the spec, labels, annotations (and finalizers) of `new`; generation follows spec."""
    changed = shallow(current)
    if "spec" in new:
        changed["spec"] = new["spec"]
    else:
        changed.pop("spec", None)
    meta, new_meta = changed["metadata"], new["metadata"]
    keys = ("labels", "annotations", "finalizers") if finalizers else ("labels", "annotations")
    for key in keys:
        if new_meta.get(key):
            meta[key] = new_meta[key]
        else:
            meta.pop(key, None)
    if meta.get("deletionTimestamp"):
        added = set(meta.get("finalizers", [])) - set(current["metadata"].get("finalizers", []))
        if added:
            raise ValidationError(
                f"cannot add finalizers {sorted(added)} to an object being deleted",
                obj=describe(info, meta.get("namespace") or "", meta["name"]),
                field="metadata.finalizers",
            )
    if changed.get("spec") != current.get("spec"):
        meta["generation"] = int(meta.get("generation", 0)) + 1
    return changed


def shallow(current: Json) -> Json:
    """A copy of a stored object to change: writes replace top-level sections and metadata keys,
    and never change a nested value in place, so only the top level and metadata are copied (a
    deep copy of every status was a tenth of a simulation's time)."""
    changed = dict(current)
    changed["metadata"] = dict(current["metadata"])
    return changed


def same_kind(obj: R, result: Resource) -> R:
    if not isinstance(result, type(obj)):  # pragma: no cover - kind_of checks the registration
        raise TypeError(f"store returned {type(result).__name__} for {type(obj).__name__}")
    return result
