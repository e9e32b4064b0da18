"""Kubernetes-style paths for every registered kind.

    /apis/gpufleet.io/v1alpha1/{plural}                                   list (all namespaces), watch,
                                                                          delete (DELETE, as below)
    /apis/gpufleet.io/v1alpha1/namespaces/{ns}/{plural}                   list, watch, create (POST),
                                                                          delete those labelSelector
                                                                          matches (DELETE), all or none
    /apis/gpufleet.io/v1alpha1/namespaces/{ns}/{plural}/{name}            get, apply (PUT), delete
    /apis/gpufleet.io/v1alpha1/namespaces/{ns}/{plural}/{name}/status     the status alone: read,
                                                                          replace (PUT) or merge-patch
                                                                          (PATCH), admin only

Cluster-wide kinds (pools, queues) drop the `namespaces/{ns}` part. Routes are made per kind, not
from one `{plural}` pattern, so that the OpenAPI document gives each path its kind's body schema.
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations at run
# time, and those that name the per-app dependency are local to `add_kind_routes`.
import inspect
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from gpufleet.api.resource import API_VERSION, KindInfo, Resource
from gpufleet.server.auth import Principal
from gpufleet.server.bodies import MERGE_PATCH, one_object, status_body, with_body
from gpufleet.server.changefeed import ChangeFeed, Interest
from gpufleet.server.errors import error_responses
from gpufleet.server.operations import Deleted, Operations, check_namespace
from gpufleet.server.schemas import NDJSON, json_answer, ref
from gpufleet.server.watches import EventStream, watch_lines

PREFIX = f"/apis/{API_VERSION}"
MAX_WATCH_SECONDS = 600.0

Authenticate = Callable[..., Awaitable[Principal]]
Endpoint = Callable[..., Awaitable[Any]]
Answers = dict[Any, dict[str, Any]]
"""OpenAPI responses by status code."""
Selector = Annotated[str | None, Query(alias="labelSelector", max_length=4096)]
Watch = Annotated[bool, Query()]
Version = Annotated[str | None, Query(alias="resourceVersion", max_length=32)]
Timeout = Annotated[float, Query(alias="timeoutSeconds", ge=0, le=MAX_WATCH_SECONDS)]


def add_kind_routes(
    app: FastAPI, ops: Operations, feed: ChangeFeed, info: KindInfo, authenticate: Authenticate
) -> None:
    """Registers the paths of one kind.

    Every body is read with its size limit enforced as it arrives and parsed in a worker thread;
    every store access runs in a worker thread; watches wait on the change feed, not in a thread.
    """
    Who = Annotated[Principal, Depends(authenticate)]
    tag: list[str | Enum] = [info.kind]
    body = _body_schema(info)
    base = (
        f"{PREFIX}/namespaces/{{namespace}}/{info.plural}" if info.namespaced else f"{PREFIX}/{info.plural}"
    )
    item = base + "/{name}"

    async def list_all(
        who: Who,
        label_selector: Selector = None,
        watch: Watch = False,
        resource_version: Version = None,
        timeout_seconds: Timeout = 60.0,
    ) -> Any:
        if watch:
            return await _watch(ops, feed, who, info, None, resource_version, timeout_seconds)
        return await run_in_threadpool(_list, ops, who, info, None, label_selector)

    async def list_in(
        namespace: str,
        who: Who,
        label_selector: Selector = None,
        watch: Watch = False,
        resource_version: Version = None,
        timeout_seconds: Timeout = 60.0,
    ) -> Any:
        if watch:
            return await _watch(ops, feed, who, info, namespace, resource_version, timeout_seconds)
        return await run_in_threadpool(_list, ops, who, info, namespace, label_selector)

    async def create(request: Request, who: Who, namespace: str | None = None) -> JSONResponse:
        def write(obj: Resource) -> JSONResponse:
            check_namespace(info, obj, namespace, None)
            return JSONResponse(ops.create(who, obj).to_dict(), status_code=201)

        return await with_body(request, _parser(info, namespace), write)

    async def get(name: str, who: Who, namespace: str | None = None) -> dict[str, Any]:
        obj = await run_in_threadpool(ops.get, who, info, name, namespace)
        return obj.to_dict()

    async def get_status(name: str, who: Who, namespace: str | None = None) -> dict[str, Any]:
        obj = await run_in_threadpool(ops.get, who, info, name, namespace)
        return _status_view(obj)

    async def put(name: str, request: Request, who: Who, namespace: str | None = None) -> JSONResponse:
        def write(obj: Resource) -> JSONResponse:
            check_namespace(info, obj, namespace, name)
            applied = ops.put(who, obj)
            code = 201 if applied.action == "created" else 200
            return JSONResponse(
                applied.object.to_dict(), status_code=code, headers={"X-Gpufleet-Action": applied.action}
            )

        return await with_body(request, _parser(info, namespace), write)

    async def put_status(name: str, request: Request, who: Who, namespace: str | None = None) -> Any:
        def write(doc: dict[str, Any]) -> dict[str, Any]:
            return _status_view(ops.write_status(who, info, name, namespace, doc, patch=False))

        return await with_body(request, _status_parser(info, patch=False), write)

    async def patch_status(name: str, request: Request, who: Who, namespace: str | None = None) -> Any:
        def write(doc: dict[str, Any]) -> dict[str, Any]:
            return _status_view(ops.write_status(who, info, name, namespace, doc, patch=True))

        return await with_body(request, _status_parser(info, patch=True), write)

    async def delete_collection(
        who: Who, namespace: str | None = None, label_selector: Selector = None
    ) -> JSONResponse:
        def write() -> JSONResponse:
            return deleted_response(ops.delete_collection(who, info, namespace, label_selector))

        return await run_in_threadpool(write)

    async def delete(
        name: str, who: Who, namespace: str | None = None, resource_version: Version = None
    ) -> dict[str, Any]:
        held = await run_in_threadpool(ops.delete, who, info, name, namespace, resource_version)
        if held is not None:  # finalizers keep it until they are removed
            return held.to_dict()
        return {
            "kind": "Status",
            "status": "Success",
            "details": {"kind": info.kind, "name": name, "namespace": namespace},
        }

    def route(
        path: str,
        endpoint: Endpoint,
        method: str,
        operation: str,
        summary: str,
        answers: Answers,
        errors: tuple[int, ...],
        **extra: Any,
    ) -> None:
        if "{namespace}" not in path and "namespace" in inspect.signature(endpoint).parameters:
            endpoint = _without_namespace(endpoint)
        app.add_api_route(
            path,
            endpoint,
            methods=[method],
            tags=tag,
            summary=summary,
            operation_id=operation,
            response_model=None,
            responses={**answers, **error_responses(*errors)},
            **extra,
        )

    one = ref(info.kind)
    status_view = json_answer(ref(f"{info.kind}StatusView"), f"The {info.kind}'s metadata and status.")
    listed = {
        200: {
            "description": f"The {info.plural} (a watch: NDJSON lines, one per change, until its timeout).",
            "content": {
                "application/json": {"schema": ref(f"{info.kind}List")},
                NDJSON: {"schema": ref(f"{info.kind}WatchEvent")},
            },
        }
    }
    deleted = {200: json_answer(ref("DeletedList"), "Each object deleted, all of them or none.")}
    reading = (400, 401, 403, 410, 422)
    writing = (400, 401, 403, 409, 413, 422)
    if info.namespaced:
        route(
            f"{PREFIX}/{info.plural}",
            list_all,
            "GET",
            f"list{info.kind}AllNamespaces",
            f"List or watch {info.plural} of all namespaces",
            listed,
            reading,
        )
        route(base, list_in, "GET", f"list{info.kind}", f"List or watch {info.plural}", listed, reading)
        route(
            f"{PREFIX}/{info.plural}",
            delete_collection,
            "DELETE",
            f"deletecollection{info.kind}AllNamespaces",
            f"Delete the {info.plural} of all namespaces that labelSelector matches, all or none",
            deleted,
            (400, 401, 403, 409, 422),
        )
    else:
        route(base, list_all, "GET", f"list{info.kind}", f"List or watch {info.plural}", listed, reading)
    route(
        base,
        create,
        "POST",
        f"create{info.kind}",
        f"Create a {info.kind}",
        {201: json_answer(one, f"The {info.kind} as stored.")},
        writing,
        status_code=201,
        openapi_extra=body,
    )
    route(
        base,
        delete_collection,
        "DELETE",
        f"deletecollection{info.kind}",
        f"Delete the {info.plural} that labelSelector matches (all without one), all or none",
        deleted,
        (400, 401, 403, 409, 422),
    )
    route(
        item,
        get,
        "GET",
        f"read{info.kind}",
        f"Read a {info.kind}",
        {200: json_answer(one, f"The {info.kind}.")},
        (400, 401, 403, 404),
    )
    route(
        item + "/status",
        get_status,
        "GET",
        f"readStatus{info.kind}",
        f"Read the status of a {info.kind}",
        {200: status_view},
        (400, 401, 403, 404),
    )
    route(
        item + "/status",
        put_status,
        "PUT",
        f"replaceStatus{info.kind}",
        f"Replace the status of a {info.kind} (admin only; the spec sent is ignored)",
        {200: status_view},
        (*writing, 404),
        openapi_extra=body,
    )
    route(
        item + "/status",
        patch_status,
        "PATCH",
        f"patchStatus{info.kind}",
        f"Merge-patch the status of a {info.kind} (admin only; RFC 7386)",
        {200: status_view},
        (*writing, 404),
        openapi_extra=_status_patch_schema(info),
    )
    route(
        item,
        put,
        "PUT",
        f"apply{info.kind}",
        f"Apply a {info.kind}: create it or replace its spec",
        {
            200: json_answer(
                one, f"The {info.kind} as stored (header X-Gpufleet-Action: configured or unchanged)."
            ),
            201: json_answer(one, f"The {info.kind} as stored (header X-Gpufleet-Action: created)."),
        },
        (*writing, 404),
        openapi_extra=body,
    )
    route(
        item,
        delete,
        "DELETE",
        f"delete{info.kind}",
        f"Delete a {info.kind}",
        {
            200: json_answer(
                {
                    "anyOf": [ref("StatusAnswer"), one],
                    "description": "Status when the object is gone; the object itself while finalizers "
                    "hold it (metadata.deletionTimestamp set).",
                },
                "Deleted, or being deleted.",
            )
        },
        (400, 401, 403, 404, 409),
    )


def deleted_response(deleted: list[Deleted]) -> JSONResponse:
    """The answer to a delete of many objects: each one's last state, `deleted` or `deleting` (held
    by finalizers). Encoded in the worker thread: thousands of objects would stall the event loop."""
    return JSONResponse({"items": [{"action": d.action, "object": d.object.to_dict()} for d in deleted]})


def _without_namespace(endpoint: "Endpoint") -> "Endpoint":
    """The endpoint for a cluster-wide kind: the same handler, with no namespace parameter."""

    async def cluster_wide(**kwargs: Any) -> Any:
        return await endpoint(namespace=None, **kwargs)

    signature = inspect.signature(endpoint)
    params = [p for p in signature.parameters.values() if p.name != "namespace"]
    cluster_wide.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return cluster_wide


async def _watch(
    ops: Operations,
    feed: ChangeFeed,
    who: Principal,
    info: KindInfo,
    namespace: str | None,
    since: str | None,
    timeout: float,
) -> EventStream:
    # The start is checked (kind readable, resourceVersion valid and not compacted) before the
    # answer starts, so that a bad one is a 4xx rather than a broken stream.
    start = await run_in_threadpool(ops.start_watch, who, info, since=since, namespace=namespace)
    interest = Interest(frozenset({info.kind}), namespace)
    return EventStream(watch_lines(feed, ops, who, interest, start, timeout))


def _list(
    ops: Operations, who: Principal, info: KindInfo, namespace: str | None, selector: str | None
) -> JSONResponse:
    # Written to JSON here, in the worker thread: a list of thousands of objects would otherwise
    # be encoded on the event loop, stalling every other client meanwhile.
    return JSONResponse(ops.list_objects(who, info, namespace, selector))


def _parser(info: KindInfo, namespace: str | None) -> Callable[[bytes, str | None], Resource]:
    return lambda body, content_type: one_object(body, content_type, info, namespace)


def _status_parser(info: KindInfo, *, patch: bool) -> Callable[[bytes, str | None], dict[str, Any]]:
    return lambda body, content_type: status_body(body, content_type, info, patch=patch)


def _status_view(obj: Resource) -> dict[str, Any]:
    data = obj.to_dict()
    return {
        "apiVersion": data["apiVersion"],
        "kind": data["kind"],
        "metadata": data["metadata"],
        "status": data.get("status", {}),
    }


def _body_schema(info: KindInfo) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{info.kind}"}
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref}, "application/yaml": {"schema": ref}},
        }
    }


def _status_patch_schema(info: KindInfo) -> dict[str, Any]:
    status = info.model.model_fields.get("status")
    ref = getattr(getattr(status, "annotation", None), "__name__", None)
    patch = {
        "type": "object",
        "required": ["status"],
        "properties": {
            "metadata": {
                "type": "object",
                "description": "Only resourceVersion is read.",
                "properties": {
                    "resourceVersion": {
                        "type": "string",
                        "description": "If given, the object must still have it (else 409).",
                    }
                },
            },
            "status": {
                **({"$ref": f"#/components/schemas/{ref}"} if ref else {"type": "object"}),
                "description": "Merged into the status: a key set to null is removed, a mapping is merged, "
                "anything else replaces.",
            },
        },
    }
    return {"requestBody": {"required": True, "content": {MERGE_PATCH: {"schema": patch}}}}
