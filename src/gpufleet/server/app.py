"""The FastAPI application: per-kind resource paths plus a few that span kinds.

GET  /healthz                           liveness, no token needed
GET  /apis/gpufleet.io/v1alpha1         discovery: the kinds served, their plurals and short names
POST /v1/apply                          many objects (JSON list or multi-document YAML), all or none
POST /v1/delete                         delete many objects (named as for apply), all or none
GET  /v1/changes                        the change log after a resourceVersion (long poll)
POST /v1/tokens                         a queue-scoped token, or a federation token (admin only)
DELETE /v1/tokens?role=R&cluster=C      revokes a federation token (admin only; keep=ID or only=ID)
GET  /v1/tokens?role=R&cluster=C        lists federation tokens: ids, expiry, first use (admin only)
GET  /v1/whoami                         what the caller's token may do
GET  /v1/stats                          open watches and long polls, memory, threads (admin only)
GET  /openapi.json, /docs               the OpenAPI document and its browser
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations at run time.
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import psutil
import pydantic
from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.kinds import kind_info, registered_kinds
from gpufleet.api.resource import API_VERSION, KindInfo, Resource
from gpufleet.server import admission
from gpufleet.server.auth import Principal, TokenRegistry
from gpufleet.server.bodies import all_objects, object_refs, with_body
from gpufleet.server.changefeed import ChangeFeed, Interest
from gpufleet.server.errors import BadRequestError, ForbiddenError, error_responses, install_error_handlers
from gpufleet.server.federation_access import Role
from gpufleet.server.logs import LogSource, add_log_route
from gpufleet.server.operations import MAX_EVENTS, Operations, event_dict
from gpufleet.server.routes import MAX_WATCH_SECONDS, PREFIX, add_kind_routes, deleted_response
from gpufleet.server.schemas import (
    ApiResourceList,
    Health,
    Revoked,
    RoleTokens,
    Stats,
    StatusAnswer,
    Token,
    WhoAmI,
    json_answer,
    ref,
)
from gpufleet.server.schemas import components as envelopes
from gpufleet.server.stamp import StampTime
from gpufleet.server.watches import LONG_POLLS, WATCHES, unless_disconnected
from gpufleet.store.protocol import ObjectRef, Store

TIME_HEADER = "X-Gpufleet-Time"

# Kinds that describe a what-if rather than state; nothing stores them.
_NOT_SERVED = frozenset({"Scenario"})

# Short names this API adds to those a kind registers. They are not registered with the kind,
# which would put them into its CRD as well: on a cluster `isvc` is KServe's InferenceService, and
# two CRDs sharing a short name leave `kubectl get isvc` to pick one of them.
_EXTRA_SHORT_NAMES = {"InferenceService": ("isvc",)}


class TokenRequest(pydantic.BaseModel):
    """Either `queue`, or `role` with `cluster` (`gpufleet cluster join` asks for the latter)."""

    queue: str | None = pydantic.Field(
        default=None, description="The queue the token may submit to and read."
    )
    role: Role | None = pydantic.Field(
        default=None,
        description="A federation token: `federation-manager` (in a worker, for its manager) or "
        "`federation-worker` (in a manager, for the worker `cluster`); see docs/federation.md.",
    )
    cluster: str | None = pydantic.Field(
        default=None, description="With `role`: the worker cluster's name (in its manager)."
    )
    ttlSeconds: float | None = pydantic.Field(
        default=None,
        ge=0,
        description="With `role`: how long the token is valid, in seconds (null or 0: it never expires).",
    )
    replace: bool = pydantic.Field(
        default=True,
        description="With `role`: whether the new token replaces the role's earlier ones for the cluster "
        "(false keeps them valid until revoked: a rotation revokes them once the new one has worked).",
    )


class FaultRequest(pydantic.BaseModel):
    """A fault of the digital twin: a GPU fails or is repaired, a node is lost or a spot node reclaimed."""

    model_config = pydantic.ConfigDict(extra="forbid")

    type: Literal["GpuFailure", "GpuRepair", "NodeLoss", "SpotInterruption"] = pydantic.Field(
        description="GpuFailure: a GPU fails (an XID error); GpuRepair: it works again; NodeLoss: the "
        "node is gone; SpotInterruption: a spot node gets its notice and is taken back."
    )
    node: str = pydantic.Field(max_length=253, description="The node (see `gpufleet get nodes`).")
    gpu: int | None = pydantic.Field(
        default=None,
        ge=0,
        description="For GpuFailure and GpuRepair: the GPU's index, below the node's GPU count.",
    )


class FaultAccepted(pydantic.BaseModel):
    accepted: FaultRequest = pydantic.Field(description="The fault, as the twin will play it.")


FaultSink = Callable[[FaultRequest], None]
"""Hands a checked fault to the runtime; given by whoever runs a digital twin next to the server."""


def served_kinds() -> list[KindInfo]:
    return [info for info in registered_kinds() if info.kind not in _NOT_SERVED]


def create_app(
    store: Store,
    tokens: TokenRegistry,
    *,
    faults: FaultSink | None = None,
    logs: LogSource | None = None,
    now: Callable[[], datetime] | None = None,
) -> FastAPI:
    """The HTTP API over `store`, with requests authenticated against `tokens`.

    `faults` receives the faults posted to /v1/faults; without it (no digital twin) they are refused.
    `logs` holds the pods' logs /v1/logs reads (the twin's); without it there are none.
    `now` is the clock that stamps the store's objects (the twin's, which may run faster than real
    time); every answer carries it in `X-Gpufleet-Time` so clients show ages on the same time line.
    """
    # The docs pages (/docs, /redoc) load their scripts and styles from the package, not from a CDN,
    # so they work on a machine without internet access.
    app = FastAPIOffline(
        title="gpufleet",
        version="v1alpha1",
        description=_DESCRIPTION,
        static_url="/docs-assets",
        swagger_ui_parameters={"validatorUrl": None},
    )
    install_error_handlers(app)
    app.add_middleware(StampTime, header=TIME_HEADER, clock=now or (lambda: datetime.now(UTC)))

    ops = Operations(store)
    feed = ChangeFeed(store)
    app.state.feed = feed
    bearer = HTTPBearer(auto_error=False, description="The admin token or a queue's token.")

    # Coroutines, not functions: FastAPI runs a plain function in a worker thread, and every request
    # would wait for a thread just to check its token.
    async def authenticate(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Principal:
        header = None if credentials is None else f"{credentials.scheme} {credentials.credentials}"
        return tokens.authenticate(header)

    Who = Annotated[Principal, Depends(authenticate)]
    kinds = served_kinds()

    @app.get(
        "/healthz",
        tags=["server"],
        summary="Whether the server answers (no token needed)",
        response_model=None,
        responses={200: {"model": Health, "description": "The server answers."}, **error_responses()},
    )
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        PREFIX,
        tags=["server"],
        summary="The kinds this server serves",
        response_model=None,
        responses={200: {"model": ApiResourceList, "description": "The kinds."}, **error_responses(401)},
    )
    async def discovery(who: Who) -> dict[str, Any]:
        return {
            "kind": "APIResourceList",
            "groupVersion": API_VERSION,
            "resources": [_resource(info) for info in kinds],
        }

    @app.get(
        "/v1/whoami",
        tags=["server"],
        summary="What the caller's token may do",
        response_model=None,
        responses={200: {"model": WhoAmI, "description": "The token's scope."}, **error_responses(401)},
    )
    async def whoami(who: Who) -> dict[str, Any]:
        roles = {"role": who.role, "cluster": who.cluster} if who.role is not None else {}
        return {"admin": who.admin, "queue": who.queue, **roles}

    @app.get(
        "/v1/stats",
        tags=["server"],
        summary="Open watches and long polls, memory and threads",
        response_model=None,
        responses={200: {"model": Stats, "description": "The figures."}, **error_responses(401, 403)},
    )
    async def stats(who: Who) -> dict[str, Any]:
        if not who.admin:
            raise ForbiddenError(f"{who.describe()} may not read the server's stats")
        return {
            "watches": feed.clients(WATCHES),
            "longPolls": feed.clients(LONG_POLLS),
            "feedFollowing": feed.following,
            "rssBytes": psutil.Process().memory_info().rss,
            "threads": threading.active_count(),
        }

    @app.post(
        "/v1/apply",
        tags=["server"],
        summary="Apply many objects, all or none",
        openapi_extra=_apply_body(kinds),
        response_model=None,
        responses={
            200: json_answer(ref("AppliedList"), "What was done to each object."),
            **error_responses(400, 401, 403, 409, 413, 422),
        },
    )
    async def apply(
        request: Request,
        who: Who,
        dry_run: Annotated[
            bool,
            Query(
                alias="dryRun",
                description="true: check and report every object as a real apply would, store nothing.",
            ),
        ] = False,
    ) -> JSONResponse:
        def write(objects: list[Resource]) -> JSONResponse:
            unserved = [obj for obj in objects if obj.kind in _NOT_SERVED]
            if unserved:
                raise ValidationError(
                    f"{unserved[0].kind} objects are not stored", obj=unserved[0].describe()
                )
            applied = ops.apply(who, objects, dry_run=dry_run)
            # Encoded here, in the worker thread: an apply of thousands of objects answers with
            # them all, which would stall every other client if encoded on the event loop.
            return JSONResponse(
                {"items": [{"action": a.action, "object": a.object.to_dict()} for a in applied]}
            )

        return await with_body(request, all_objects, write)

    @app.post(
        "/v1/delete",
        tags=["server"],
        summary="Delete many objects, all or none",
        openapi_extra=_delete_body(),
        response_model=None,
        responses={
            200: json_answer(ref("DeletedList"), "Each object deleted, all of them or none."),
            **error_responses(400, 401, 403, 404, 409, 413, 422),
        },
    )
    async def delete_many(
        request: Request,
        who: Who,
        ignore_not_found: Annotated[bool, Query(alias="ignoreNotFound")] = False,
    ) -> JSONResponse:
        def write(refs: list[ObjectRef]) -> JSONResponse:
            for target in refs:
                _served(target.kind)
            deleted = ops.delete_many(who, refs, ignore_not_found=ignore_not_found)
            return deleted_response(deleted)

        return await with_body(request, object_refs, write)

    @app.get(
        "/v1/changes",
        tags=["server"],
        summary="Changes after a resourceVersion (long poll)",
        response_model=None,
        responses={
            200: json_answer(ref("ChangeList"), "The changes (none: the timeout passed)."),
            204: {"description": "The client went away while it waited."},
            **error_responses(400, 401, 403, 410, 422),
        },
    )
    async def changes(
        request: Request,
        who: Who,
        kind: Annotated[list[str] | None, Query(max_length=32)] = None,
        namespace: Annotated[str | None, Query(max_length=253)] = None,
        resource_version: Annotated[str | None, Query(alias="resourceVersion", max_length=32)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_EVENTS)] = 100,
        timeout_seconds: Annotated[float, Query(alias="timeoutSeconds", ge=0, le=MAX_WATCH_SECONDS)] = 0.0,
    ) -> Response:
        infos = [_served(name) for name in kind or ()]
        interest = Interest(frozenset(info.kind for info in infos) or None, namespace)
        deadline = time.monotonic() + timeout_seconds

        def page(since: str | None) -> tuple[list[dict[str, Any]], str]:
            # In a worker thread: the store read, and each event turned into its JSON form.
            events, cursor = ops.events(who, infos, since=since, namespace=namespace, limit=limit)
            return [event_dict(event) for event in events], cursor

        with feed.client(LONG_POLLS):
            items, cursor = await run_in_threadpool(page, resource_version)
            while not items and (remaining := deadline - time.monotonic()) > 0:
                # Nothing the caller may read yet: wait on the feed, not in a thread, and stop
                # waiting if the caller goes away.
                waiting = feed.wait(int(cursor), interest, remaining)
                if not await unless_disconnected(request.receive, waiting):
                    return Response(status_code=204)  # nobody is left to read it
                items, cursor = await run_in_threadpool(page, cursor)
        return JSONResponse({"resourceVersion": cursor, "items": items})

    @app.post(
        "/v1/tokens",
        tags=["server"],
        status_code=201,
        summary="Create a queue-scoped token or a federation token",
        response_model=None,
        responses={
            201: {"model": Token, "description": "The token."},
            **error_responses(400, 401, 403, 404, 422),
        },
    )
    def create_token(request: TokenRequest, who: Who) -> JSONResponse:
        if not who.admin:
            raise ForbiddenError(f"{who.describe()} may not create tokens")
        if (request.queue is None) == (request.role is None):
            raise BadRequestError("give either queue or role (with cluster)", field="queue")
        if request.queue is None:  # a federation token (`role`, checked above to be given)
            if request.role is None or request.cluster is None:
                raise BadRequestError(f"role {request.role} needs the worker cluster's name", field="cluster")
            minted = tokens.mint_role(
                request.role, request.cluster, ttl_seconds=request.ttlSeconds, replace=request.replace
            )
            answer = {
                "token": minted.token,
                "queue": None,
                "role": request.role,
                "cluster": request.cluster,
                "id": minted.id,
                "expires": None if minted.expires is None else minted.expires.isoformat(),
            }
            return JSONResponse(answer, status_code=201)
        admission.check_queue_exists(store, request.queue)
        token = tokens.create(request.queue)
        return JSONResponse({"token": token, "queue": request.queue}, status_code=201)

    @app.delete(
        "/v1/tokens",
        tags=["server"],
        summary="Revoke the federation token of a role for a cluster",
        response_model=None,
        responses={
            200: {"model": Revoked, "description": "How many tokens went."},
            **error_responses(401, 403, 422),
        },
    )
    def revoke_token(
        who: Who,
        role: Role,
        cluster: Annotated[str, Query(max_length=253)],
        keep: Annotated[
            str | None, Query(max_length=64, description="Revoke all but the token with this id.")
        ] = None,
        only: Annotated[
            str | None, Query(max_length=64, description="Revoke only the token with this id.")
        ] = None,
    ) -> dict[str, int]:
        if not who.admin:
            raise ForbiddenError(f"{who.describe()} may not revoke tokens")
        return {"revoked": tokens.revoke_role(role, cluster, keep=keep, only=only)}

    @app.get(
        "/v1/tokens",
        tags=["server"],
        summary="List the federation tokens of a role for a cluster (ids and times, never a token)",
        response_model=None,
        responses={
            200: {"model": RoleTokens, "description": "The tokens."},
            **error_responses(401, 403, 422),
        },
    )
    def list_tokens(who: Who, role: Role, cluster: Annotated[str, Query(max_length=253)]) -> dict[str, Any]:
        if not who.admin:
            raise ForbiddenError(f"{who.describe()} may not list tokens")
        return {"items": tokens.role_tokens(role, cluster)}

    @app.post(
        "/v1/faults",
        tags=["server"],
        status_code=202,
        summary="Make the digital twin play a fault",
        response_model=None,
        responses={
            202: {"model": FaultAccepted, "description": "Accepted: the twin plays it at its next step."},
            **error_responses(401, 403, 404, 422),
        },
    )
    def inject_fault(request: FaultRequest, who: Who) -> JSONResponse:
        if not who.admin:
            raise ForbiddenError(f"{who.describe()} may not inject faults")
        if faults is None:
            raise NotFoundError("this server runs no digital twin to inject faults into")
        if request.type in ("GpuFailure", "GpuRepair") and request.gpu is None:
            raise ValidationError(f"{request.type} needs the GPU's index", field="gpu")
        if request.type not in ("GpuFailure", "GpuRepair") and request.gpu is not None:
            raise ValidationError(f"{request.type} is about the whole node: give no gpu", field="gpu")
        node = store.get("Node", request.node) if kind_info("Node") else None
        gpus = getattr(getattr(node, "spec", None), "gpus", None)
        if request.gpu is not None and isinstance(gpus, int) and request.gpu >= gpus:
            have = f"GPUs 0..{gpus - 1}" if gpus else "no GPUs"
            raise ValidationError(f"node {request.node} has {have}, got {request.gpu}", field="gpu")
        faults(request)
        return JSONResponse({"accepted": request.model_dump()}, status_code=202)

    add_log_route(app, ops, logs, authenticate)
    for info in kinds:
        add_kind_routes(app, ops, feed, info, authenticate)
    _add_kind_schemas(app, kinds)
    return app


def _served(name: str) -> KindInfo:
    info = kind_info(name)
    if info is None or info.kind in _NOT_SERVED:
        known = ", ".join(sorted(k.kind for k in served_kinds()))
        raise ValidationError(f"unknown kind {name!r} (known: {known})", field="kind")
    return info


def short_names(info: KindInfo) -> list[str]:
    """The kind's short names, and this API's extra ones that no registered kind uses as a name."""
    taken = {
        name
        for other in registered_kinds()
        for name in (other.kind.lower(), other.plural, other.singular, *other.short_names)
    }
    extra = [name for name in _EXTRA_SHORT_NAMES.get(info.kind, ()) if name not in taken]
    return [*info.short_names, *extra]


def _resource(info: KindInfo) -> dict[str, Any]:
    return {
        "name": info.plural,
        "singularName": info.singular,
        "kind": info.kind,
        "namespaced": info.namespaced,
        "shortNames": short_names(info),
        "printerColumns": [
            {"name": c.name, "jsonPath": c.json_path, "type": c.type, "priority": c.priority}
            for c in info.printer_columns
        ],
    }


def _apply_body(kinds: list[KindInfo]) -> dict[str, Any]:
    one = {"anyOf": [{"$ref": f"#/components/schemas/{info.kind}"} for info in kinds]}
    return _items_body(one, "The objects, applied in this order.")


def _delete_body() -> dict[str, Any]:
    ref = {
        "type": "object",
        "required": ["kind", "metadata"],
        "description": (
            "An object to delete; a whole object (as applied) may be sent: only these fields are read."
        ),
        "properties": {
            "apiVersion": {"type": "string", "description": f"{API_VERSION}, if given."},
            "kind": {"type": "string", "description": "The object's kind, e.g. Queue."},
            "metadata": {
                "type": "object",
                "description": "Which object: its name and namespace.",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "description": "The object's name."},
                    "namespace": {
                        "type": "string",
                        "description": "Its namespace, for namespaced kinds (default: default).",
                    },
                    "resourceVersion": {
                        "type": "string",
                        "description": "If given, the object must still have it (else 409, nothing deleted).",
                    },
                },
            },
        },
    }
    return _items_body(ref, "The objects to delete.")


def _items_body(item: dict[str, Any], description: str) -> dict[str, Any]:
    """A request body of many objects: JSON `{"items": [...]}`, or the multi-document YAML of a file."""
    items = {"type": "array", "items": item, "description": description}
    many = {"type": "object", "required": ["items"], "properties": {"items": items}}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": many},
                "application/yaml": {"schema": {"type": "string", "description": "multi-document YAML"}},
            },
        }
    }


_DESCRIPTION = """The embedded control plane's API: Kubernetes-style paths for gpufleet's kinds.

Every request but `/healthz` needs `Authorization: Bearer <token>`: the admin token or a queue's.
Bodies are JSON or YAML (`Content-Type: application/yaml`), at most 8 MiB. Every answer that is not a
success has one body, `{"error": {"type", "message", "object", "field", "status"}}` (ErrorBody)."""


def _add_kind_schemas(app: FastAPI, kinds: list[KindInfo]) -> None:
    """Puts each kind's JSON schema (and the models it uses) into the OpenAPI components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        models: list[tuple[type[pydantic.BaseModel], JsonSchemaMode]] = [
            (info.model, "validation") for info in kinds
        ]
        # StatusAnswer too: a delete's answer names it beside the kind (FastAPI adds only the models
        # a response names alone).
        _, definitions = models_json_schema(
            [*models, (StatusAnswer, "serialization")], ref_template="#/components/schemas/{model}"
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, definition in {**definitions.get("$defs", {}), **envelopes(kinds)}.items():
            components.setdefault(name, definition)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
