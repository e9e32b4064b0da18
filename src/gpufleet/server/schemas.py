"""What the OpenAPI document says each path answers: the bodies the server wraps objects in.

The kinds' own schemas come from their pydantic models, each field described where it is declared
(the one text for the API, the CRDs and `explain`). This module describes the envelopes: a list of a
kind, the status view, an apply's or a delete's answer, a watch line, a change; and the small bodies
of the server's own paths. Models that take no kind are pydantic models (FastAPI puts them in the
document); those that name a kind are JSON Schema put into the components by `components`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pydantic

from gpufleet.api.resource import API_VERSION, KindInfo

REF = "#/components/schemas/"
NDJSON = "application/x-ndjson"


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF + name}


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_RESOURCE_VERSION = "The store's resourceVersion when the answer was made: watch from it to miss nothing."


def _list_meta() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The list's metadata.",
        "properties": {"resourceVersion": _string(_RESOURCE_VERSION)},
    }


def _any_kind(kinds: Sequence[KindInfo], description: str) -> dict[str, Any]:
    return {"anyOf": [ref(info.kind) for info in kinds], "description": description}


def status_model(info: KindInfo) -> str | None:
    """The name of the kind's status model (its schema's name in the components), if it has one."""
    status = info.model.model_fields.get("status")
    name = getattr(getattr(status, "annotation", None), "__name__", None)
    return name if isinstance(name, str) else None


def components(kinds: Sequence[KindInfo]) -> dict[str, dict[str, Any]]:
    """The schemas the paths refer to besides the kinds' own: per kind its list, status view and
    watch line; for all kinds an apply's and a delete's answer and the change log's page."""
    schemas: dict[str, dict[str, Any]] = {}
    for info in kinds:
        schemas[f"{info.kind}List"] = {
            "type": "object",
            "title": f"{info.kind}List",
            "description": f"The {info.plural} a token may read, ordered by namespace and name.",
            "required": ["apiVersion", "kind", "metadata", "items"],
            "properties": {
                "apiVersion": _string(API_VERSION),
                "kind": _string(f"{info.kind}List"),
                "metadata": _list_meta(),
                "items": {"type": "array", "items": ref(info.kind), "description": f"The {info.plural}."},
            },
        }
        schemas[f"{info.kind}StatusView"] = {
            "type": "object",
            "title": f"{info.kind}StatusView",
            "description": f"A {info.kind} without its spec: what `.../status` reads and writes.",
            "required": ["apiVersion", "kind", "metadata"],
            "properties": {
                "apiVersion": _string(API_VERSION),
                "kind": _string(info.kind),
                "metadata": {**ref("ObjectMeta"), "description": "The object's metadata."},
                "status": {
                    **(ref(status) if (status := status_model(info)) else {"type": "object"}),
                    "description": f"The {info.kind}'s status.",
                },
            },
        }
        schemas[f"{info.kind}WatchEvent"] = {
            "type": "object",
            "title": f"{info.kind}WatchEvent",
            "description": "One line of a watch (NDJSON): a change, a BOOKMARK after each burst, or an "
            "ERROR (410: list again) that ends it.",
            "required": ["type", "object"],
            "properties": {
                "type": {
                    "type": "string",
                    "enum": ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"],
                    "description": "What happened; BOOKMARK carries only metadata.resourceVersion, where "
                    "to resume; ERROR carries the error body's `error`.",
                },
                "object": {
                    "anyOf": [ref(info.kind), {"type": "object"}],
                    "description": f"The {info.kind} as it is after the change (for DELETED, its last "
                    "state); for BOOKMARK only its metadata.resourceVersion; for ERROR the error.",
                },
            },
        }
    schemas["AppliedList"] = {
        "type": "object",
        "title": "AppliedList",
        "description": "What an apply did to each object, in the request's order.",
        "required": ["items"],
        "properties": {
            "items": {
                "type": "array",
                "description": "One entry per object of the request.",
                "items": {
                    "type": "object",
                    "required": ["action", "object"],
                    "properties": {
                        "action": {
                            "type": "string",
                            "enum": ["created", "configured", "unchanged"],
                            "description": "Whether the object was new, changed, or already as given.",
                        },
                        "object": _any_kind(kinds, "The object as stored after the apply."),
                    },
                },
            }
        },
    }
    schemas["DeletedList"] = {
        "type": "object",
        "title": "DeletedList",
        "description": "What a delete of many objects did to each, in the request's order (a collection "
        "delete: by namespace and name). Objects not found and ignored (ignoreNotFound) are left out.",
        "required": ["items"],
        "properties": {
            "items": {
                "type": "array",
                "description": "One entry per object deleted.",
                "items": {
                    "type": "object",
                    "required": ["action", "object"],
                    "properties": {
                        "action": {
                            "type": "string",
                            "enum": ["deleted", "deleting"],
                            "description": "deleted: gone; deleting: held by finalizers until they are "
                            "removed (metadata.deletionTimestamp is set).",
                        },
                        "object": _any_kind(kinds, "The object's last state."),
                    },
                },
            }
        },
    }
    schemas["ChangeList"] = {
        "type": "object",
        "title": "ChangeList",
        "description": "A page of the change log the token may read.",
        "required": ["resourceVersion", "items"],
        "properties": {
            "resourceVersion": _string("Where to continue: ask again with this resourceVersion."),
            "items": {
                "type": "array",
                "description": "The changes, oldest first.",
                "items": {
                    "type": "object",
                    "required": ["type", "resourceVersion", "object"],
                    "properties": {
                        "type": {
                            "type": "string",
                            "enum": ["ADDED", "MODIFIED", "DELETED"],
                            "description": "What happened to the object.",
                        },
                        "resourceVersion": _string("The change's resourceVersion."),
                        "object": _any_kind(kinds, "The object after the change (DELETED: its last state)."),
                    },
                },
            },
        },
    }
    return schemas


def json_answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """An OpenAPI response with a JSON body of `schema`."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


# ------------------------------------------------------------------------- the server's own paths


class Health(pydantic.BaseModel):
    status: Literal["ok"] = pydantic.Field(description="Always ok: the server answers.")


class PrinterColumn(pydantic.BaseModel):
    name: str = pydantic.Field(description="The column's heading.")
    jsonPath: str = pydantic.Field(description="Where its value is in an object, e.g. .status.phase.")
    type: str = pydantic.Field(description="string, integer, number, boolean or date.")
    priority: int = pydantic.Field(description="0: shown in every table; more: only in the wide one.")


class ApiResource(pydantic.BaseModel):
    name: str = pydantic.Field(description="The plural, as in the kind's paths.")
    singularName: str = pydantic.Field(description="The singular, lower case.")
    kind: str = pydantic.Field(description="The kind, as in objects' `kind`.")
    namespaced: bool = pydantic.Field(description="Whether its objects live in namespaces.")
    shortNames: list[str] = pydantic.Field(description="Other names the CLI takes for it.")
    printerColumns: list[PrinterColumn] = pydantic.Field(description="The columns of its tables.")


class ApiResourceList(pydantic.BaseModel):
    """The kinds this server serves (Kubernetes' discovery document)."""

    kind: Literal["APIResourceList"] = pydantic.Field(description="APIResourceList.")
    groupVersion: str = pydantic.Field(description=API_VERSION)
    resources: list[ApiResource] = pydantic.Field(description="One entry per kind served.")


class WhoAmI(pydantic.BaseModel):
    admin: bool = pydantic.Field(description="Whether the token is the admin token.")
    queue: str | None = pydantic.Field(description="The queue a queue's token is for; null for the admin.")
    role: str | None = pydantic.Field(
        default=None, description="A federation token's role (absent for the others): see docs/federation.md."
    )
    cluster: str | None = pydantic.Field(default=None, description="A federation token's worker cluster.")


class Stats(pydantic.BaseModel):
    watches: int = pydantic.Field(description="Watches open now.")
    longPolls: int = pydantic.Field(description="Long polls of /v1/changes waiting now.")
    feedFollowing: bool = pydantic.Field(description="Whether the thread that follows the change log runs.")
    rssBytes: int = pydantic.Field(description="The server process's resident memory.")
    threads: int = pydantic.Field(description="The server process's threads.")


class Token(pydantic.BaseModel):
    token: str = pydantic.Field(description="The token; shown once, only its hash is kept.")
    queue: str | None = pydantic.Field(description="The queue it may submit to and read (null for a role).")
    role: str | None = pydantic.Field(default=None, description="A federation token's role.")
    cluster: str | None = pydantic.Field(default=None, description="A federation token's worker cluster.")
    id: str | None = pydantic.Field(
        default=None,
        description="A federation token's id (the start of its hash), as `GET /v1/tokens` lists it.",
    )
    expires: str | None = pydantic.Field(
        default=None, description="When a federation token expires (RFC 3339; null: never)."
    )


class RoleTokenInfo(pydantic.BaseModel):
    id: str = pydantic.Field(description="The token's id: the start of its hash (never the token).")
    role: str = pydantic.Field(description="Its role.")
    cluster: str = pydantic.Field(description="The worker cluster it was minted for.")
    created: str = pydantic.Field(description="When it was minted (RFC 3339, on the plane's clock).")
    expires: str | None = pydantic.Field(default=None, description="When it expires (null: never).")
    used: str | None = pydantic.Field(default=None, description="When it was first used (null: not yet).")


class RoleTokens(pydantic.BaseModel):
    items: list[RoleTokenInfo] = pydantic.Field(description="The role's tokens for the cluster.")


class Revoked(pydantic.BaseModel):
    revoked: int = pydantic.Field(description="How many tokens were revoked (0: there was none).")


class StatusAnswer(pydantic.BaseModel):
    """The answer to a delete that removed the object at once (Kubernetes' Status)."""

    kind: Literal["Status"] = pydantic.Field(description="Status.")
    status: Literal["Success"] = pydantic.Field(description="Success.")
    details: dict[str, Any] = pydantic.Field(description="The kind, name and namespace deleted.")
