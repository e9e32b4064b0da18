"""A write's validated result built from the object's previous one, where only its status or the
store's own metadata changed.

Every write validates what it stores and hands out the validated model. Most writes of a simulation
change one object's status (a pod starts, a job ends) or delete it: validating the whole object again
(a pod's spec, a job's template) and dumping it again to get its stored form was a tenth of a run's
CPU. Where the previous model is at hand and nothing but the status, `resourceVersion` and
`deletionTimestamp` changed, the status alone is validated and dumped, and the new model is the
previous one with those fields replaced: it shares its spec and metadata values with the previous
model. Only a store whose results are never changed in place (`MemoryStore(share_results=True)`)
may do this; such a store's readers already share one object per event.

What this rests on: a kind's model validators read only its metadata and spec (`_scope`, a queue's
parent), never its status, so a status validated alone is as valid as inside the whole object;
`tests/store/test_derived.py` keeps a list of the model validators that may exist and fails on a new
one. The previous model's dump is the current stored form (the store keeps the pair together), so
the new model's dump is the new stored form.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import pydantic

from gpufleet.api.base import REVEAL_SECRETS
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.store.fresh import fresh
from gpufleet.store.objects import STORED, Json

STORE_OWNED = frozenset({"resourceVersion", "deletionTimestamp"})
"""Metadata the store itself sets on a change, and which may differ between the two forms."""

_TIMESTAMP: pydantic.TypeAdapter[datetime] = pydantic.TypeAdapter(pydantic.AwareDatetime)
_DUMP: dict[str, Any] = {
    "mode": "json",
    "by_alias": True,
    "exclude_none": True,
    "context": {REVEAL_SECRETS: True},
}


@functools.cache
def status_model(model: type[Resource]) -> type[pydantic.BaseModel] | None:
    """The model of a kind's status, or None where it has none (or not a plain model)."""
    field = model.model_fields.get("status")
    annotation = field.annotation if field is not None else None
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    return None


def derive(info: KindInfo, previous: Resource, current: Json, changed: Json) -> tuple[Resource, Json] | None:
    """(the validated model, its stored form) of `changed`, or None where more than the status and
    the store's own metadata changed from `current`, whose model is `previous`."""
    if changed.keys() != current.keys():
        return None
    for key, value in changed.items():
        if key != "metadata" and key != "status" and value is not current[key]:
            return None
    meta, old_meta = changed["metadata"], current["metadata"]
    if meta.keys() - STORE_OWNED != old_meta.keys() - STORE_OWNED:
        return None
    for key, value in meta.items():
        if key not in STORE_OWNED and value is not old_meta[key]:
            return None
    stored = dict(changed)
    meta_update: dict[str, Any] = {"resource_version": meta["resourceVersion"]}
    deleted_at = meta.get("deletionTimestamp")
    if deleted_at is not None and deleted_at is not old_meta.get("deletionTimestamp"):
        when = _TIMESTAMP.validate_python(deleted_at)
        meta_update["deletion_timestamp"] = when
        stored["metadata"] = {**meta, "deletionTimestamp": _TIMESTAMP.dump_python(when, mode="json")}
    update: dict[str, Any] = {"metadata": previous.metadata.model_copy(update=meta_update)}
    status = changed.get("status")
    if status is not current.get("status"):
        model = status_model(info.model)
        if model is None or not isinstance(status, dict):
            return None
        try:
            validated = model.model_validate(fresh(model, status), context=STORED)
        except pydantic.ValidationError:
            return None  # refused: validating the whole object names the field from its top
        update["status"] = validated
        stored["status"] = validated.model_dump(**_DUMP)
    return previous.model_copy(update=update), stored
