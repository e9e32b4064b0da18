"""Copies of a stored form that share nothing with it once validated, copying only what must be copied.

A model validated from a stored form must share nothing with it (see `store.memory`), yet pydantic
builds new containers for every typed part (nested models, `list[str]`, `dict[str, str]`) and keeps
only the values of `Any` fields as given (a pod template, a pending reason's details). A deep copy
of the whole form before validation was about 6% of a simulation's CPU. The plan of a kind says
where its `Any` values can be; `fresh` deep-copies those alone and shares the rest with the stored
form, which validation copies anyway.

Where the plan cannot prove that validation builds a new value (a validator that runs before or
instead of pydantic's, an unknown type, a union of models, a recursive model, extra fields) it
deep-copies the whole value: a wrong plan costs time, never isolation.
"""

from __future__ import annotations

import datetime
import enum
import functools
import pickle
import types
import typing
from typing import Any, TypeAlias

import pydantic
from pydantic.fields import FieldInfo

Json = dict[str, Any]

_IMMUTABLE = (str, int, float, bool, type(None))
_SCALARS = (
    str,
    int,
    float,
    bool,
    type(None),
    datetime.datetime,
    datetime.date,
    datetime.timedelta,
    enum.Enum,
)
_PYDANTIC_SCALARS = (pydantic.AwareDatetime, pydantic.NaiveDatetime)
_KEEPS_INPUT = ("before", "wrap", "plain")
"""Validator modes that see the input as given and may return (part of) it."""
_INPUT_VALIDATORS = (pydantic.BeforeValidator, pydantic.WrapValidator, pydantic.PlainValidator)


class _Deep:
    """Copy the whole value."""


DEEP = _Deep()


@typing.final
class _Items:
    """A list (or tuple, set) whose items follow `plan`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan


@typing.final
class _Values:
    """A dictionary whose values follow `plan`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan


Plan: TypeAlias = _Deep | _Items | _Values | dict[str, "Plan"]
"""Where a value may hold something validation keeps as given; a dict is a model's fields by key."""


def deep(value: Any) -> Any:
    """A deep copy of plain JSON data (a pickle round trip, done in C: a fifth of `copy.deepcopy`)."""
    if isinstance(value, _IMMUTABLE):
        return value
    return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def fresh(model: type[pydantic.BaseModel], data: Json) -> Json:
    """`data` with every value that validating it as `model` would keep as given copied; the rest is
    shared with `data`, which is never changed."""
    plan = plan_of(model)
    copied: Json = _copy(plan, data) if plan is not None else data
    return copied


def _copy(plan: Plan, value: Any) -> Any:
    if isinstance(plan, dict):
        if not isinstance(value, dict):
            return deep(value)  # not the shape the model expects: validation refuses it anyway
        keys = [key for key in plan if key in value]
        if not keys:
            return value
        copied = dict(value)
        for key in keys:
            copied[key] = _copy(plan[key], value[key])
        return copied
    if isinstance(plan, _Items) and isinstance(value, list | tuple):
        return [_copy(plan.plan, item) for item in value]
    if isinstance(plan, _Values) and isinstance(value, dict):
        return {key: _copy(plan.plan, item) for key, item in value.items()}
    return deep(value)


@functools.cache
def plan_of(model: type[pydantic.BaseModel]) -> Plan | None:
    """The plan of a model (None: validation shares nothing with its input). Computed once per model."""
    return _model_plan(model, frozenset())


def _model_plan(model: type[pydantic.BaseModel], building: frozenset[type]) -> Plan | None:
    if model in building:
        return DEEP  # a recursive model: not worth proving
    building = building | {model}
    decorators = model.__pydantic_decorators__
    if model.model_config.get("extra") == "allow" or any(
        d.info.mode in _KEEPS_INPUT for d in decorators.model_validators.values()
    ):
        return DEEP
    keeps_input = {
        field
        for d in decorators.field_validators.values()
        if d.info.mode in _KEEPS_INPUT
        for field in d.info.fields
    }
    plan: dict[str, Plan] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        if field.validation_alias is not None and field.validation_alias != key:
            return DEEP  # read under another key than the stored form's
        sub = DEEP if name in keeps_input or _keeps_input(field) else _type_plan(field.annotation, building)
        if sub is not None:
            plan[key] = sub
    return plan or None


def _keeps_input(field: FieldInfo) -> bool:
    return any(isinstance(item, _INPUT_VALIDATORS) for item in field.metadata)


def _type_plan(tp: Any, building: frozenset[type]) -> Plan | None:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        if any(isinstance(item, _INPUT_VALIDATORS) for item in args[1:]):
            return DEEP
        return _type_plan(args[0], building)
    if origin is typing.Literal:
        return None
    if origin is typing.Union or origin is types.UnionType:
        plans = [_type_plan(arg, building) for arg in args]
        kept = [plan for plan in plans if plan is not None]
        if not kept:
            return None
        # The members with no plan share nothing once validated; one with a plan is followed.
        return kept[0] if len(kept) == 1 else DEEP
    if origin in (list, tuple, set, frozenset):
        items = [arg for arg in args if arg is not Ellipsis]
        if not items:
            return DEEP
        plans = [_type_plan(arg, building) for arg in items]
        kept = [plan for plan in plans if plan is not None]
        if not kept:
            return None
        return _Items(kept[0]) if len(items) == 1 else DEEP
    if origin is dict:
        if len(args) != 2 or _type_plan(args[0], building) is not None:
            return DEEP
        values = _type_plan(args[1], building)
        return None if values is None else _Values(values)
    if origin is not None:
        return DEEP
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return _model_plan(tp, building)
    return None if _is_scalar(tp) else DEEP


def _is_scalar(tp: Any) -> bool:
    if tp in _PYDANTIC_SCALARS:
        return True
    return isinstance(tp, type) and issubclass(tp, _SCALARS)
