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
