"""Errors as JSON: one shape for every failure, with the object and the field path at fault.

Every response that is not a success has the body
`{"error": {"type", "message", "object", "field", "status"}}`, whether the error came from the API
models, the store, the authorization rules, FastAPI's own request parsing or a bug. A bug is
reported as a 500 in the same shape (and logged); the tests make sure no request can cause one.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpufleet.api.errors import (
    ConflictError,
    DataError,
    GoneError,
    GpuFleetError,
    NotFoundError,
    QuantityError,
    ValidationError,
)

log = logging.getLogger("gpufleet.server")

MAX_BODY_MIB = 8
"""The largest request body, in MiB (`bodies.MAX_BODY_BYTES`)."""


class BadRequestError(GpuFleetError):
    """The request itself is malformed: a body that is not JSON or YAML, a bad query parameter."""


class UnauthorizedError(GpuFleetError):
    """No token, or a token the server does not know."""


class ForbiddenError(GpuFleetError):
    """A valid token that may not do this (e.g. a queue's token touching another queue's objects)."""


class PayloadTooLargeError(GpuFleetError):
    """A request body over the server's limit; refused before the rest of it is read."""


# Most specific first: QuantityError is a ValidationError, every one of them a GpuFleetError.
_STATUS: tuple[tuple[type[GpuFleetError], int], ...] = (
    (BadRequestError, 400),
    (PayloadTooLargeError, 413),
    (UnauthorizedError, 401),
    (ForbiddenError, 403),
    (NotFoundError, 404),
    (ConflictError, 409),
    (GoneError, 410),
    (QuantityError, 422),
    (ValidationError, 422),
    (DataError, 422),
    (GpuFleetError, 400),
)


def status_of(exc: GpuFleetError) -> int:
    """The HTTP status code of a user error."""
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code
    return 400  # pragma: no cover - GpuFleetError closes the table


class ErrorDetail(pydantic.BaseModel):
    """What went wrong, and where."""

    type: str = pydantic.Field(
        description="The kind of error: ValidationError, NotFoundError, ConflictError, ForbiddenError, "
        "UnauthorizedError, GoneError, BadRequestError, PayloadTooLargeError, MethodNotAllowed or "
        "InternalError."
    )
    message: str = pydantic.Field(description="What is wrong, in one line, for people.")
    object: str | None = pydantic.Field(
        description="The object at fault (`TrainingJob team-a/llm`, `Queue org`, or `document 3` of a "
        "request body), or null."
    )
    field: str | None = pydantic.Field(
        description="The field at fault, as a path in the YAML's names (`spec.worker.gpus`), or null."
    )
    status: int = pydantic.Field(description="The HTTP status code of the answer, repeated.")


class ErrorBody(pydantic.BaseModel):
    """The body of every answer that is not a success, whatever the path."""

    error: ErrorDetail = pydantic.Field(description="The error: its kind, message, object and field.")


_WHEN = {
    400: "The request is malformed: a body that is not JSON or YAML, a bad query parameter.",
    401: "No token, or a token the server does not know.",
    403: "The token may not do this (a queue's token touching another queue's objects).",
    404: "No such object, or one the token may not read.",
    409: "A conflict: the object exists, or changed since the resourceVersion given, or is in use "
    "(a queue with child queues or work).",
    410: "The resourceVersion is older than the events the server keeps: list again.",
    413: f"The body is larger than the server takes ({MAX_BODY_MIB} MiB).",
    422: "An object or a field is invalid; `object` and `field` name it.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of these error statuses, and of any other (`default`: a 500 is a bug),
    each with the error body."""
    answers: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorBody, "description": _WHEN[code]} for code in sorted(set(codes))
    }
    answers["default"] = {
        "model": ErrorBody,
        "description": "Any other failure, in the same shape (500: a bug in the server).",
    }
    return answers


def error_body(
    error_type: str, message: str, status: int, *, obj: str | None = None, field: str | None = None
) -> dict[str, Any]:
    return {
        "error": {"type": error_type, "message": message, "object": obj, "field": field, "status": status}
    }


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: an error repeats what the client sent, and a lone
    surrogate (`"\\ud800"` in a name) has no UTF-8 form, so the plain rendering would fail with a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(exc: GpuFleetError) -> JSONResponse:
    status = status_of(exc)
    body = error_body(type(exc).__name__, exc.detail, status, obj=exc.obj, field=exc.field)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 413:
        # The rest of the body is still coming: closing the connection is the only way not to read
        # it (the server would otherwise drain it to keep the connection for the next request).
        headers = {"Connection": "close"}
    return AsciiJSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Routes every kind of failure through `error_response`'s shape."""

    async def user_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, GpuFleetError)
        return error_response(exc)

    async def request_error(request: Request, exc: Exception) -> JSONResponse:
        # FastAPI's own parsing of path and query parameters (e.g. timeoutSeconds=abc).
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(part) for part in first.get("loc", ()) if part not in ("query", "path", "body")]
        message = str(first.get("msg", "invalid request"))
        return error_response(BadRequestError(message, field=".".join(loc) or None))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        # Unknown paths (404) and methods a path does not allow (405).
        assert isinstance(exc, StarletteHTTPException)
        kinds = {404: "NotFoundError", 405: "MethodNotAllowed"}
        body = error_body(kinds.get(exc.status_code, "HTTPError"), str(exc.detail), exc.status_code)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        body = error_body("InternalError", f"internal error: {type(exc).__name__}", 500)
        return JSONResponse(body, status_code=500)

    app.add_exception_handler(GpuFleetError, user_error)
    app.add_exception_handler(RequestValidationError, request_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, bug)
