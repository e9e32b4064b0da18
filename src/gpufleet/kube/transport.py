"""The few HTTP calls gpufleet makes to an API server, as a protocol over plain JSON.

Everything in `kube/` talks to the API server through `Transport`: requests with JSON bodies and
streamed watches, answered with the JSON the server sends (real-shaped objects, not generated
model classes). `kube.client` implements it with the official `kubernetes` client, the only module
that imports it; tests implement it with an in-memory stand-in that keeps the same semantics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

Json = dict[str, Any]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A request the API server refused (or could not be reached for: status 0).

    `reason` is the machine-readable reason of the server's Status (`NotFound`, `Conflict`,
    `AlreadyExists`, `Expired`, `TooManyRequests`...), `body` the Status itself when there was one.
    """

    def __init__(self, status: int, reason: str = "", message: str = "", body: Json | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")

    @property
    def retryable(self) -> bool:
        """Whether trying again later may succeed: the server was unreachable, busy or failing."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @classmethod
    def from_status(cls, status: int, body: Json | None) -> ApiError:
        """The error for an HTTP status and the `Status` object the server answered with."""
        body = body if isinstance(body, dict) else {}
        return cls(status, str(body.get("reason", "")), str(body.get("message", "")), body)


class Transport(Protocol):
    """JSON over HTTP to one API server. Both methods raise `ApiError` for any refusal."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> Json:
        """One request; the decoded JSON answer (`{}` for an empty one)."""
        ...

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        """A streamed `watch=true` request: one `{"type", "object"}` per line until the server ends it.

        An `ERROR` line (a `Status`, e.g. 410 Expired) is raised as `ApiError`, not yielded.
        """
        ...
