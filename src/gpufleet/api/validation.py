"""Turning raw mappings into validated objects, and pydantic's errors into gpufleet's.

A user sees one line such as `TrainingJob team-a/llm: field spec.worker.gpus: must be >= 0`: the
object, the YAML path of the field and what is wrong, in words rather than pydantic's error codes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
from pydantic_core import ErrorDetails

from gpufleet.api.errors import ValidationError
from gpufleet.api.fields import PRIORITY_CLASSES_CONTEXT
from gpufleet.api.kinds import kind_info, registered_kinds
from gpufleet.api.meta import DEFAULT_NAMESPACE
from gpufleet.api.resource import KindInfo, Resource

# Location parts pydantic adds for the member of a union it tried (`str`, `list[str]`, `int`...).
_UNION_TAG = re.compile(r"^(str|int|float|bool|[a-z-]+\[.*\])$")


def parse_object(
    data: Any, *, priority_classes: Mapping[str, int] | None = None, where: str | None = None
) -> Resource:
    """A validated object of a registered kind from its YAML/JSON mapping.

    `priority_classes` is the configured table (default: ARCHITECTURE.md's five classes); `where`
    names the source (e.g. `document 3`) in errors about the document as a whole.
    """
    info = _kind_of(data, where)
    context = {} if priority_classes is None else {PRIORITY_CLASSES_CONTEXT: priority_classes}
    try:
        obj = info.model.model_validate(data, context=context)
    except pydantic.ValidationError as exc:
        raise translate_error(exc, obj=describe_raw(info, data, where)) from None
    run_validators(obj)
    return obj


Validator = Callable[[Resource], None]
"""Checks an object further once its fields are valid; raises ValidationError naming the field."""

_VALIDATORS: dict[str, list[Validator]] = {}


def register_validator(kind: str, validator: Validator) -> None:
    """Adds a check that every object of `kind` parsed by `parse_object` must pass.

    The hook lets packages that `api` may not import (e.g. `gpufleet.sharing`, which knows the MIG
    catalogue) refuse objects at admission: the API server and `load_objects` both parse through
    `parse_object`. Registering the same function twice has no further effect.
    """
    validators = _VALIDATORS.setdefault(kind, [])
    if validator not in validators:
        validators.append(validator)


def registered_validators(kind: str) -> tuple[Validator, ...]:
    return tuple(_VALIDATORS.get(kind, ()))


def run_validators(obj: Resource) -> None:
    """Runs the registered checks of the object's kind; an error gets the object's name."""
    for validator in _VALIDATORS.get(obj.kind, ()):
        try:
            validator(obj)
        except ValidationError as exc:
            if exc.obj is not None:
                raise
            raise ValidationError(exc.detail, obj=obj.describe(), field=exc.field) from None


def revalidate(info: KindInfo, data: Mapping[str, Any]) -> Resource:
    """An object from data already validated once (read back from a store): no priority-class check."""
    return info.model.model_validate(data, context={PRIORITY_CLASSES_CONTEXT: None})


def describe_raw(info: KindInfo, data: Mapping[str, Any], where: str | None = None) -> str:
    """How errors name an object not yet validated: `TrainingJob team-a/llm`."""
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str):
        return f"{info.kind} in {where}" if where else f"{info.kind} (no name)"
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    if info.namespaced:
        return f"{info.kind} {namespace if isinstance(namespace, str) else DEFAULT_NAMESPACE}/{name}"
    return f"{info.kind} {name}"


def translate_error(exc: pydantic.ValidationError, *, obj: str) -> ValidationError:
    """One gpufleet ValidationError naming the first bad field; the others are listed after it."""
    problems: dict[str, list[str]] = {}
    for error in exc.errors():
        path, message = _describe(error)
        if message not in problems.setdefault(path, []):
            problems[path].append(message)
    (first_path, first_messages), *others = problems.items()
    message = " or ".join(first_messages)
    if others:
        rest = "; ".join(f"field {path}: {' or '.join(msgs)}" for path, msgs in others)
        message = f"{message} (also {rest})"
    return ValidationError(message, obj=obj, field=first_path or None)


def _describe(error: ErrorDetails) -> tuple[str, str]:
    loc = [part for part in error["loc"] if not (isinstance(part, str) and _UNION_TAG.match(part))]
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "gpufleet_field":
        loc.extend(str(ctx["field"]).split("."))
    return _path(loc), _message(kind, ctx, error)


def _path(loc: list[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def _message(kind: str, ctx: dict[str, Any], error: ErrorDetails) -> str:
    given = error.get("input")
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"must be {bounds[kind]} {limit}, got {given!r}"
    plain = {
        "extra_forbidden": "unknown field",
        "missing": "required field is missing",
        "string_type": f"must be a string, got {given!r}",
        "bool_type": f"must be true or false, got {given!r}",
        "bool_parsing": f"must be true or false, got {given!r}",
        "int_type": f"must be an integer, got {given!r}",
        "int_parsing": f"must be an integer, got {given!r}",
        "int_from_float": f"must be a whole number, got {given!r}",
        "float_type": f"must be a number, got {given!r}",
        "float_parsing": f"must be a number, got {given!r}",
        "dict_type": "must be a mapping",
        "model_type": "must be a mapping",
        "model_attributes_type": "must be a mapping",
        "list_type": "must be a list",
        "string_too_short": "must not be empty",
        "timezone_aware": "must be a time with a time zone (e.g. 2026-01-01T00:00:00Z)",
    }
    if kind in plain:
        return plain[kind]
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {given!r}"
    if kind == "gpufleet_field":
        return str(ctx["message"])
    message = error["msg"]
    return message.removeprefix("Value error, ")


def _kind_of(data: Any, where: str | None) -> KindInfo:
    prefix = f"{where}: " if where else ""
    if not isinstance(data, Mapping):
        raise ValidationError(
            f"{prefix}expected a mapping with apiVersion and kind, got {type(data).__name__}"
        )
    kind, api_version = data.get("kind"), data.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        raise ValidationError(f"{prefix}every object needs apiVersion and kind")
    info = kind_info(kind)
    if info is None:
        known = ", ".join(sorted(k.kind for k in registered_kinds()))
        raise ValidationError(f"{prefix}unknown kind {kind!r} (known: {known})")
    if api_version != info.api_version:
        raise ValidationError(
            f"{prefix}{kind}: apiVersion {api_version!r} is not served; use {info.api_version}"
        )
    return info
