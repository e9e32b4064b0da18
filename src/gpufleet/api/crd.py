"""CustomResourceDefinitions generated from the same pydantic models that validate the YAML.

Kubernetes requires structural schemas: every node has a `type` (or is explicitly int-or-string or
free-form), no `$ref`, and unions only as value checks. Pydantic's JSON Schema uses `$ref`, nullable
`anyOf`, `const` and numeric `exclusiveMinimum`; this module rewrites it into OpenAPI v3 as
apiextensions.k8s.io/v1 accepts it. A union it does not know how to express raises, so a new field
cannot silently produce a CRD the API server rejects.
"""

from __future__ import annotations

from typing import Any

from gpufleet.api.kinds import registered_kinds
from gpufleet.api.resource import KindInfo

CRD_API_VERSION = "apiextensions.k8s.io/v1"
CATEGORY = "gpufleet"

# JSON Schema keywords that OpenAPI v3 in a CRD understands and that keep their meaning unchanged.
_KEPT = (
    "description",
    "enum",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "required",
)
_INT_OR_STRING = "x-kubernetes-int-or-string"
_UNION_BOUNDS = {
    "ge": ("minimum", False),
    "le": ("maximum", False),
    "gt": ("minimum", True),
    "lt": ("maximum", True),
}
_FREE_FORM = "x-kubernetes-preserve-unknown-fields"


def custom_resource_definitions() -> list[dict[str, Any]]:
    """One CRD per registered kind that asks for one, in registration order."""
    return [custom_resource_definition(info) for info in registered_kinds() if info.crd]


def custom_resource_definition(info: KindInfo) -> dict[str, Any]:
    """The CRD of one kind: names, scope, status subresource, printer columns and schema."""
    version: dict[str, Any] = {
        "name": info.version,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": openapi_schema(info)},
    }
    if info.printer_columns:
        version["additionalPrinterColumns"] = [
            {
                "name": column.name,
                "type": column.type,
                "jsonPath": column.json_path,
                **({"description": column.description} if column.description else {}),
                **({"priority": column.priority} if column.priority else {}),
            }
            for column in info.printer_columns
        ]
    names: dict[str, Any] = {
        "kind": info.kind,
        "listKind": f"{info.kind}List",
        "plural": info.plural,
        "singular": info.singular,
        "categories": [CATEGORY],
    }
    if info.short_names:
        names["shortNames"] = list(info.short_names)
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info.plural}.{info.group}"},
        "spec": {
            "group": info.group,
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "names": names,
            "versions": [version],
        },
    }


def openapi_schema(info: KindInfo) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a kind.

    `metadata` is left to the API server (a CRD may only say it is an object).
    """
    source = info.model.model_json_schema(by_alias=True, mode="validation")
    definitions = source.get("$defs", {})
    schema = _structural(source, definitions, path=info.kind)
    # apiVersion and kind are checked by the API server itself; metadata may only be an object.
    schema["properties"].update(
        apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"}
    )
    schema.pop("description", None)
    return schema


def _structural(node: dict[str, Any], definitions: dict[str, Any], *, path: str) -> dict[str, Any]:
    node = _resolve(node, definitions)
    if "anyOf" in node:
        return _union(node, definitions, path=path)
    result: dict[str, Any] = {key: node[key] for key in _KEPT if key in node}
    if "const" in node:
        result["enum"] = [node["const"]]
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node:  # JSON Schema's numeric form becomes OpenAPI v3's boolean form
            result[flag] = node[bound]
            result[bound] = True
    kind = node.get("type")
    if kind is None:
        if node.get(_FREE_FORM):
            return {**result, _FREE_FORM: True}
        raise ValueError(f"{path}: no type in schema {node!r}")
    result["type"] = kind
    if kind == "object":
        _object(node, result, definitions, path=path)
    elif kind == "array":
        result["items"] = _structural(node.get("items", {}), definitions, path=f"{path}[]")
    return result


def _object(node: dict[str, Any], result: dict[str, Any], definitions: dict[str, Any], *, path: str) -> None:
    properties = node.get("properties")
    extra = node.get("additionalProperties")
    if properties:
        # `additionalProperties: false` may not sit beside `properties` in a CRD; pruning drops
        # unknown fields there anyway, and kubectl's field validation reports them.
        result["properties"] = {
            name: _structural(child, definitions, path=f"{path}.{name}") for name, child in properties.items()
        }
    elif isinstance(extra, dict):
        result["additionalProperties"] = _structural(extra, definitions, path=f"{path}.*")
    elif extra is True or extra is None:
        result[_FREE_FORM] = True


def _union(node: dict[str, Any], definitions: dict[str, Any], *, path: str) -> dict[str, Any]:
    outer = {key: node[key] for key in ("description",) if key in node}
    if node.get(_INT_OR_STRING):
        return {**outer, _INT_OR_STRING: True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    if node.get(_FREE_FORM):
        return {**outer, _FREE_FORM: True}
    options = [option for option in node["anyOf"] if option.get("type") != "null"]
    if len(options) == 1:
        inner = _structural(options[0], definitions, path=path)
        return {**inner, **outer}
    kinds = {_resolve(option, definitions).get("type") for option in options}
    if kinds <= {"integer", "number"}:
        # `int | float` with bounds: pydantic leaves them on the union as `ge`/`le`/`gt`/`lt`.
        bounds: dict[str, Any] = {}
        for key, (flag, exclusive) in _UNION_BOUNDS.items():
            if key in node:
                bounds[flag] = node[key]
                if exclusive:
                    bounds[f"exclusive{flag.capitalize()}"] = True
        return {**outer, **bounds, "type": "number"}
    raise ValueError(f"{path}: a union of {sorted(map(str, kinds))} has no structural form")


def _resolve(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        node = {**definitions[name], **siblings}
    return node
