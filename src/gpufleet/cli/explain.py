"""`gpufleet explain KIND[.FIELD...]`: a kind's fields, their types and descriptions, as `kubectl explain`.

Read from the kinds' own schema (the structural OpenAPI schema the CRDs carry, every field described),
so it needs no server and says what this version of gpufleet accepts.
"""

from __future__ import annotations

import sys
import textwrap
from typing import Annotated, Any

import typer

from gpufleet.api.crd import openapi_schema
from gpufleet.api.errors import ValidationError
from gpufleet.api.kinds import BUILTIN_KINDS
from gpufleet.api.resource import API_VERSION, KindInfo

# The names `get` takes beside the kinds' own short names (the server adds KServe's to discovery).
_EXTRA_NAMES = {"InferenceService": ("isvc",)}
_INDENT = "   "
_ENVELOPE = {
    "apiVersion": f"The version of the schema this object follows: {API_VERSION}.",
    "kind": "The kind of object, in CamelCase.",
    "metadata": "Its name, namespace (namespaced kinds), labels and annotations; the server sets the rest.",
}


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)


def kind_named(name: str) -> KindInfo:
    """The kind a user named: kind, plural, singular or short name, in any case."""
    wanted = name.lower()
    for info in BUILTIN_KINDS:
        short = (*info.short_names, *_EXTRA_NAMES.get(info.kind, ()))
        if wanted in {info.kind.lower(), info.plural, info.singular, *short, *(s + "s" for s in short)}:
            return info
    known = ", ".join(sorted(info.plural for info in BUILTIN_KINDS))
    raise ValidationError(f"unknown kind {name!r} (known: {known})", field="KIND")


def type_name(schema: dict[str, Any]) -> str:
    """A field's type as kubectl explain writes it: <string>, <[]Object>, <map[string]integer>."""
    if schema.get("x-kubernetes-int-or-string"):
        return "IntOrString"
    kind = schema.get("type")
    if kind == "array":
        return "[]" + type_name(schema.get("items") or {})
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and "properties" not in schema:
            return "map[string]" + type_name(extra)
        return "Object"
    if kind is None:
        return "Object" if schema.get("x-kubernetes-preserve-unknown-fields") else "any"
    return str(kind)


def _children(schema: dict[str, Any]) -> dict[str, Any]:
    """The fields under a field: an object's properties, or those of a list's or a map's items."""
    while True:
        if "properties" in schema:
            properties: dict[str, Any] = schema["properties"]
            return properties
        if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
            schema = schema["items"]
        elif isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
        else:
            return {}


def _described(schema: dict[str, Any]) -> str:
    text = str(schema.get("description") or "<no description>")
    extra = []
    if "enum" in schema:
        extra.append("One of: " + ", ".join(map(str, schema["enum"])) + ".")
    for bound, words in (("minimum", "at least"), ("maximum", "at most")):
        if bound in schema:
            extra.append(f"{words.capitalize()} {schema[bound]}.")
    return " ".join([text, *extra])


def _wrap(text: str, indent: str) -> str:
    return textwrap.fill(text, width=100, initial_indent=indent, subsequent_indent=indent)


def explain(
    field: Annotated[
        str,
        typer.Argument(
            metavar="KIND[.FIELD...]",
            help="A kind (tj, gpupools...) and a path into it: tj.spec.worker.gpus.",
        ),
    ],
    recursive: Annotated[
        bool, typer.Option("--recursive", help="Every field below, by name and type, as a tree.")
    ] = False,
) -> None:
    """Describes a kind's fields: their types and what they mean, as kubectl explain does."""
    kind, *path = field.split(".")
    info = kind_named(kind)
    schema = openapi_schema(info)
    if info.model.__doc__:
        schema = {**schema, "description": " ".join(info.model.__doc__.split())}
    for name, text in _ENVELOPE.items():  # the API server's fields, which the kinds leave undescribed
        schema["properties"][name] = {"description": text, **schema["properties"][name]}
    walked: list[str] = []
    required: list[str] = list(schema.get("required") or [])
    for name in path:
        children = _children(schema)
        if name not in children:
            where = ".".join([info.kind, *walked])
            known = ", ".join(children) or "none"
            raise ValidationError(
                f"field {name!r} does not exist in {where} (its fields: {known})", field=field
            )
        walked.append(name)
        required = list(schema.get("required") or [])
        schema = children[name]
    lines = [f"KIND:     {info.kind}", f"VERSION:  {API_VERSION}", ""]
    if walked:
        mark = " -required-" if walked[-1] in required else ""
        lines += [f"FIELD:    {walked[-1]} <{type_name(schema)}>{mark}", ""]
    lines += ["DESCRIPTION:", _wrap(_described(schema), "     "), ""]
    children = _children(schema)
    if children:
        lines.append("FIELDS:")
        must = set(_required_of(schema))
        if recursive:
            lines += _tree(children, _INDENT)
        else:
            for name, child in children.items():
                mark = " -required-" if name in must else ""
                lines.append(f"{_INDENT}{name}\t<{type_name(child)}>{mark}")
                lines.append(_wrap(_described(child), _INDENT + "  "))
                lines.append("")
    sys.stdout.write("\n".join(lines).rstrip("\n") + "\n")


def _required_of(schema: dict[str, Any]) -> list[str]:
    while "properties" not in schema:
        if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
            schema = schema["items"]
        elif isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
        else:
            return []
    return list(schema.get("required") or [])


def _tree(children: dict[str, Any], indent: str) -> list[str]:
    lines = []
    for name, child in children.items():
        lines.append(f"{indent}{name}\t<{type_name(child)}>")
        lines += _tree(_children(child), indent + _INDENT)
    return lines
