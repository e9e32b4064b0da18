"""A write's validated result built from the object's previous one, section by section.

Every write validates what it stores and hands out the validated model. Most writes of a simulation
change one section of one object (a pod's status as it starts, a job's status as it ends, a
workload's spec as it goes inactive) or delete it: validating the whole object again (a pod's spec,
a job's template) and dumping it again to get its stored form was a tenth of a run's CPU. Where the
previous model is at hand and, apart from what the store sets (`resourceVersion`, `generation`,
`deletionTimestamp`), only sections that validate alone changed, those sections alone are validated
and dumped, and the new model is the previous one with them replaced: it shares every other value
with the previous model. Only a store whose results are never changed in place
(`MemoryStore(share_results=True)`) may do this; such a store's readers already share one object
per event.

What this rests on: no kind's model validator reads its status, and `_scope` reads only the
namespace, which no write changes; so a status, or the spec of a kind whose only model validator is
`_scope`, validated alone is as valid as inside the whole object (a kind with another, such as a
queue's parent check or a job's name that becomes its pods' label, has its spec validated whole).
`tests/store/test_derived.py` keeps the list of the model validators that may exist and fails on a
new one. Changed labels, annotations or finalizers take the whole validation. The previous model's
dump is the current stored form (the store keeps the pair together), so the new model's dump is the
new stored form.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import pydantic

from gpufleet.api.resource import KindInfo, Resource
from gpufleet.store.fresh import fresh
from gpufleet.store.objects import STORED, STORED_FORM, Json

SET_BY_STORE = frozenset({"resourceVersion", "generation", "deletionTimestamp"})
"""Metadata the store itself sets on a change; every other metadata value must stay as it was."""
ALONE = frozenset({"_scope"})
"""Model validators that read only metadata the store never changes (the namespace): a kind with no
other may have its spec validated alone too; the status always may (no validator reads it)."""

_TIMESTAMP: pydantic.TypeAdapter[datetime] = pydantic.TypeAdapter(pydantic.AwareDatetime)


@functools.cache
def section_models(model: type[Resource]) -> dict[str, type[pydantic.BaseModel]]:
    """The top-level sections of a kind that may be validated alone, by key, with their models."""
    alone_ok = set(model.__pydantic_decorators__.model_validators) <= ALONE
    sections: dict[str, type[pydantic.BaseModel]] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if name == "metadata" or not (
            isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)
        ):
            continue
        if name == "status" or alone_ok:
            sections[field.alias or name] = annotation
    return sections


def derive(info: KindInfo, previous: Resource, current: Json, changed: Json) -> tuple[Resource, Json] | None:
    """(the validated model, its stored form) of `changed`, or None where it cannot be derived from
    `current`, whose model is `previous`: a section changed that must be validated with the whole
    object, or metadata other than what the store sets."""
    if changed.keys() != current.keys():
        return None
    meta, old_meta = changed["metadata"], current["metadata"]
    if not old_meta.keys() <= meta.keys():
        return None
    # Any key added is one the store sets (most writes add none, and then no set is built).
    if len(meta) != len(old_meta) and not meta.keys() - old_meta.keys() <= SET_BY_STORE:
        return None
    stored_meta = dict(old_meta)
    meta_update: dict[str, Any] = {}
    for key, value in meta.items():
        old = old_meta.get(key)
        if value is old or value == old:
            continue
        if key == "resourceVersion" and isinstance(value, str):
            meta_update["resource_version"] = stored_meta[key] = value
        elif key == "generation" and type(value) is int and value >= 0:
            meta_update["generation"] = stored_meta[key] = value
        elif key == "deletionTimestamp":
            when = _TIMESTAMP.validate_python(value)
            meta_update["deletion_timestamp"] = when
            stored_meta[key] = _TIMESTAMP.dump_python(when, mode="json")
        else:
            return None  # labels, annotations, finalizers...: validated with the whole object
    stored: Json = {}
    update: dict[str, Any] = {"metadata": previous.metadata.model_copy(update=meta_update)}
    sections = section_models(info.model)
    for key, value in changed.items():
        if key == "metadata":
            stored[key] = stored_meta
            continue
        old = current[key]
        if value is old or value == old:
            stored[key] = old
            continue
        model = sections.get(key)
        if model is None or not isinstance(value, dict):
            return None
        try:
            validated = model.model_validate(fresh(model, value), context=STORED)
        except pydantic.ValidationError:
            return None  # refused: validating the whole object names the field from its top
        update[model_field_name(info.model, key)] = validated
        stored[key] = validated.model_dump(**STORED_FORM)
    return previous.model_copy(update=update), stored


@functools.cache
def model_field_name(model: type[Resource], key: str) -> str:
    """The Python name of a top-level section known by its JSON key."""
    for name, field in model.model_fields.items():
        if (field.alias or name) == key:
            return name
    raise KeyError(key)  # pragma: no cover - section_models found it
