"""Request bodies: JSON or YAML (one or many documents) in, validated objects out.

A body is read with a running count (`read_body`), so one over `MAX_BODY_BYTES` is refused as soon
as it passes the limit, not after the server has taken all of it in. Parsing a large YAML takes
seconds of CPU: `with_body` parses in a worker thread, so the event loop goes on serving others
meanwhile, and large bodies queue for a few parser threads (`off_loop`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import yaml
from anyio import CapacityLimiter
from anyio.lowlevel import RunVar
from starlette.requests import Request

from gpufleet.api.docshape import ShapeError, check_shape
from gpufleet.api.errors import ValidationError
from gpufleet.api.numerals import plain_digits
from gpufleet.api.resource import API_VERSION, KindInfo, Resource
from gpufleet.api.validation import parse_object
from gpufleet.server.errors import MAX_BODY_MIB, BadRequestError, PayloadTooLargeError
from gpufleet.store.protocol import ObjectRef

T = TypeVar("T")
R = TypeVar("R")

MAX_BODY_BYTES = MAX_BODY_MIB * 1024 * 1024
PARSERS = 4
"""Bodies parsed at once; more wait their turn without a thread, so that large bodies cannot take
every worker thread from the reads and writes of other clients."""
SMALL_BODY = 16 * 1024
"""Bodies up to this size (tens of milliseconds of parsing at most, as YAML) are parsed and acted on
in one worker-thread call, which saves a hop between threads on every ordinary request; only larger
ones queue for the parsers."""
_YAML_TYPES = ("yaml", "yml")


_parsers: RunVar[CapacityLimiter] = RunVar("gpufleet_body_parsers")


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, refused with 413 as soon as it is known to exceed `limit` bytes.

    A declared Content-Length over the limit is refused before any of the body is read; a chunked
    body is counted as it arrives and refused at the chunk that passes the limit, the rest unread.
    """
    declared = request.headers.get("content-length", "")
    if plain_digits(declared) and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def _too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"the body is larger than {limit} bytes")


async def off_loop(parse: Callable[..., T], *args: Any) -> T:
    """`parse(*args)` in a worker thread, at most `PARSERS` at a time (per event loop)."""
    try:
        limiter = _parsers.get()
    except LookupError:
        limiter = CapacityLimiter(PARSERS)
        _parsers.set(limiter)
    return await anyio.to_thread.run_sync(parse, *args, limiter=limiter)


async def with_body(request: Request, parse: Callable[[bytes, str | None], T], act: Callable[[T], R]) -> R:
    """Reads the request's body (within the limit), parses it and acts on the result, all off the
    event loop: a body of up to `SMALL_BODY` bytes in one worker-thread call, a larger one parsed
    first among the few parsers `off_loop` allows."""
    body = await read_body(request)
    content_type = request.headers.get("content-type")
    if len(body) <= SMALL_BODY:
        return await anyio.to_thread.run_sync(lambda: act(parse(body, content_type)))
    parsed = await off_loop(parse, body, content_type)
    return await anyio.to_thread.run_sync(act, parsed)


def documents(body: bytes, content_type: str | None) -> list[Any]:
    """The documents of a body: a JSON value (a list or a `{"items": [...]}` list is many) or YAML.

    YAML is read when the content type says so; a body without a content type may be either.
    """
    if len(body) > MAX_BODY_BYTES:  # read_body refuses it first; this guards other callers
        raise _too_large(MAX_BODY_BYTES)
    media = (content_type or "").split(";")[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestError("the body is not UTF-8 text") from None
    if any(media.endswith(suffix) for suffix in _YAML_TYPES) or not media:
        docs = _yaml_documents(text)
    else:
        docs = [_json_value(text)]
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    elif len(docs) == 1 and isinstance(docs[0], dict) and isinstance(docs[0].get("items"), list):
        docs = docs[0]["items"]
    docs = [doc for doc in docs if doc is not None]
    for index, doc in enumerate(docs, start=1):
        _check_values(doc, f"document {index}" if len(docs) > 1 else None)
    return docs


def _check_values(doc: Any, where: str | None) -> None:
    """`api.docshape.check_shape`, with a document too deep or too large a bad request (400) rather
    than an invalid object."""
    try:
        check_shape(doc, where)
    except ShapeError as exc:
        raise BadRequestError(exc.detail, obj=exc.obj, field=exc.field) from None


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequestError(f"the body is not valid JSON: {exc}") from None


def _yaml_documents(text: str) -> list[Any]:
    try:
        return list(yaml.safe_load_all(text))
    except (yaml.YAMLError, RecursionError) as exc:
        raise BadRequestError(f"the body is not valid YAML: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def parse_documents(docs: list[Any]) -> list[Resource]:
    """Every document as a validated object; the first invalid one fails them all, naming itself."""
    if not docs:
        raise ValidationError("the body holds no objects")
    objects = []
    for index, doc in enumerate(docs, start=1):
        where = f"document {index}" if len(docs) > 1 else None
        try:
            objects.append(parse_object(doc, where=where))
        except RecursionError:
            raise BadRequestError("the object is nested too deeply", obj=where) from None
    seen: set[tuple[str, str | None, str]] = set()
    for obj in objects:
        key = (obj.kind, obj.namespace, obj.name)
        if key in seen:
            raise ValidationError("appears twice in one request", obj=obj.describe())
        seen.add(key)
    return objects


def all_objects(body: bytes, content_type: str | None) -> list[Resource]:
    """Every object of a body sent to /v1/apply."""
    return parse_documents(documents(body, content_type))


def object_refs(body: bytes, content_type: str | None) -> list[ObjectRef]:
    """The objects a body sent to /v1/delete names: whole objects (the file they were applied from)
    or just `{kind, metadata: {name, namespace, resourceVersion}}`; only those fields are read."""
    docs = documents(body, content_type)
    if not docs:
        raise ValidationError("the body names no objects")
    refs = []
    for index, doc in enumerate(docs, start=1):
        where = f"document {index}" if len(docs) > 1 else None
        if not isinstance(doc, dict):
            raise ValidationError("must be a mapping with kind and metadata.name", obj=where)
        version = doc.get("apiVersion", API_VERSION)
        if version != API_VERSION:
            raise ValidationError(f"must be {API_VERSION}, got {version!r}", obj=where, field="apiVersion")
        kind, meta = doc.get("kind"), doc.get("metadata")
        if not isinstance(kind, str) or not kind:
            raise ValidationError("must name the object's kind", obj=where, field="kind")
        if not isinstance(meta, dict):
            raise ValidationError("must be a mapping with the object's name", obj=where, field="metadata")
        fields = {key: meta.get(key) for key in ("name", "namespace", "resourceVersion")}
        for key, value in fields.items():
            if value is not None and not isinstance(value, str):
                raise ValidationError(f"must be a string, got {value!r}", obj=where, field=f"metadata.{key}")
        if not fields["name"]:
            raise ValidationError("must name the object", obj=where, field="metadata.name")
        refs.append(ObjectRef(kind, fields["name"], fields["namespace"], fields["resourceVersion"]))
    return refs


def one_object(body: bytes, content_type: str | None, info: KindInfo, namespace: str | None) -> Resource:
    """The single object of a body sent to a path of kind `info` (in `namespace`, if namespaced).

    An object that names no namespace takes the path's, as with `kubectl -n`.
    """
    docs = documents(body, content_type)
    if len(docs) != 1:
        raise ValidationError(f"expected one {info.kind}, got {len(docs)} objects")
    doc = docs[0]
    if isinstance(doc, dict):
        if doc.get("kind") != info.kind:
            raise ValidationError(f"this path takes a {info.kind}, not {doc.get('kind')!r}", field="kind")
        metadata = doc.get("metadata")
        if namespace is not None and isinstance(metadata, dict) and metadata.get("namespace") is None:
            doc["metadata"] = {**metadata, "namespace": namespace}
    return parse_documents(docs)[0]


MERGE_PATCH = "application/merge-patch+json"
_OTHER_PATCHES = ("application/json-patch+json", "application/strategic-merge-patch+json")


def status_body(body: bytes, content_type: str | None, info: KindInfo, *, patch: bool) -> dict[str, Any]:
    """The one document of a status write to a path of kind `info`, with `status` a mapping.

    A PUT sends the whole object, as read (its spec is ignored, as Kubernetes does); a PATCH sends
    a JSON merge patch (RFC 7386) in which only `status` may change.
    """
    media = (content_type or "").split(";")[0].strip().lower()
    if patch and media in _OTHER_PATCHES:
        raise BadRequestError(f"status patches are JSON merge patches ({MERGE_PATCH}), not {media}")
    docs = documents(body, content_type)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValidationError(f"expected one {info.kind} object with a status")
    doc: dict[str, Any] = docs[0]
    if doc.get("kind", info.kind) != info.kind:
        raise ValidationError(f"this path takes a {info.kind}, not {doc.get('kind')!r}", field="kind")
    if not isinstance(doc.get("status"), dict):
        raise ValidationError("the status to write is missing or not a mapping", field="status")
    if patch:
        others = sorted(set(doc) - {"apiVersion", "kind", "metadata", "status"})
        if others:
            raise ValidationError("a status patch changes only status", field=others[0])
    return doc


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: mappings merge key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged
