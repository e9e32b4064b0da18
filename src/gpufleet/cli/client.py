"""The CLI's side of the HTTP API: where the server is, which token to send, and errors as one line.

Settings come from options, then environment variables, then the state directory:

- server: `--server URL`, `GPUFLEET_SERVER`, the `server.url` a running `gpufleet up` wrote into the
  state directory, else http://127.0.0.1:8765;
- token: `--token`, `GPUFLEET_TOKEN`, else the admin token in the state directory;
- state directory: `--state DIR`, `GPUFLEET_STATE`, else ~/.local/share/gpufleet.

Every error the server reports becomes the matching `GpuFleetError`, so the CLI prints it as one line
naming the object and the field, and exits non-zero.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpufleet.api.errors import ConflictError, GoneError, GpuFleetError, NotFoundError, ValidationError
from gpufleet.api.resource import API_VERSION
from gpufleet.cli.output import set_server_time

DEFAULT_SERVER = "http://127.0.0.1:8765"
DEFAULT_STATE = Path("~/.local/share/gpufleet")
URL_FILE = "server.url"
ADMIN_TOKEN_FILE = "admin-token"
PREFIX = f"/apis/{API_VERSION}"
TIME_HEADER = "X-Gpufleet-Time"


class ServerUnreachableError(GpuFleetError):
    """No server answers at the address the CLI uses."""


class AuthError(GpuFleetError):
    """The server refused the token (401) or what the token asked for (403)."""


class ApiError(GpuFleetError):
    """Any other error the server reported."""


_ERRORS: dict[str, type[GpuFleetError]] = {
    "ValidationError": ValidationError,
    "QuantityError": ValidationError,
    "DataError": ValidationError,
    "NotFoundError": NotFoundError,
    "ConflictError": ConflictError,
    "GoneError": GoneError,
    "UnauthorizedError": AuthError,
    "ForbiddenError": AuthError,
}


def state_dir(option: str | Path | None = None) -> Path:
    """The state directory the options and environment name."""
    chosen = option or os.environ.get("GPUFLEET_STATE") or DEFAULT_STATE
    return Path(chosen).expanduser()


def server_url(option: str | None, state: Path) -> str:
    if option:
        return option.rstrip("/")
    if os.environ.get("GPUFLEET_SERVER"):
        return os.environ["GPUFLEET_SERVER"].rstrip("/")
    written = _read(state / URL_FILE)
    return written or DEFAULT_SERVER


def token(option: str | None, state: Path) -> str | None:
    return option or os.environ.get("GPUFLEET_TOKEN") or _read(state / ADMIN_TOKEN_FILE)


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


@dataclass(frozen=True, slots=True)
class ResourceType:
    """A kind as the server's discovery document describes it."""

    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...]
    columns: tuple[tuple[str, str, str, int], ...] = field(default=())
    """(name, jsonPath, type, priority) of each printer column."""

    def names(self) -> set[str]:
        # `pools` for the short name `pool`, as `gpufleet get pools` reads naturally.
        return {
            self.kind.lower(),
            self.plural,
            self.singular,
            *self.short_names,
            *(s + "s" for s in self.short_names),
        }

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = (
            f"{PREFIX}/namespaces/{namespace}/{self.plural}"
            if self.namespaced and namespace
            else f"{PREFIX}/{self.plural}"
        )
        return f"{base}/{name}" if name else base


class Client:
    """A connection to the API with the CLI's settings."""

    def __init__(self, server: str, token: str | None, *, timeout: float = 30.0) -> None:
        self.server = server
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=server, headers=headers, timeout=timeout)
        self._types: list[ResourceType] | None = None

    @classmethod
    def from_options(cls, *, server: str | None, token_option: str | None, state: str | None) -> Client:
        directory = state_dir(state)
        return cls(server_url(server, directory), token(token_option, directory))

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------------------ requests

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of a request; errors raise the matching GpuFleetError."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise self._unreachable() from None
        except httpx.TimeoutException:
            raise ServerUnreachableError(f"the server at {self.server} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ServerUnreachableError(f"cannot talk to the server at {self.server}: {exc}") from None
        set_server_time(response.headers.get(TIME_HEADER))
        return _answer(response)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def stream(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Lines of a watch, as dicts."""
        import json

        try:
            with self._http.stream("GET", path, params=params, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    _answer(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.ConnectError:
            raise self._unreachable() from None

    def _unreachable(self) -> ServerUnreachableError:
        return ServerUnreachableError(
            f"cannot reach the gpufleet server at {self.server}: start it with `gpufleet up` "
            "(or point --server / GPUFLEET_SERVER at a running one)"
        )

    # ------------------------------------------------------------------------------ discovery

    def resource_types(self) -> list[ResourceType]:
        if self._types is None:
            found = self.get(PREFIX)
            self._types = [
                ResourceType(
                    kind=r["kind"],
                    plural=r["name"],
                    singular=r["singularName"],
                    namespaced=r["namespaced"],
                    short_names=tuple(r.get("shortNames", ())),
                    columns=tuple(
                        (c["name"], c["jsonPath"], c["type"], c.get("priority", 0))
                        for c in r.get("printerColumns", ())
                    ),
                )
                for r in found["resources"]
            ]
        return self._types

    def resource_type(self, name: str) -> ResourceType:
        """The kind a user named: its kind, plural, singular or a short name, in any case."""
        wanted = name.lower()
        for candidate in self.resource_types():
            if wanted in candidate.names():
                return candidate
        known = ", ".join(sorted(t.plural for t in self.resource_types()))
        raise ValidationError(f"unknown kind {name!r} (known: {known})", field="kind")

    def has_kind(self, kind: str) -> bool:
        return any(t.kind == kind for t in self.resource_types())

    # ------------------------------------------------------------------------------ verbs

    def list_objects(
        self, rtype: ResourceType, namespace: str | None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        answer = self.get(rtype.path(namespace), labelSelector=selector)
        items: list[dict[str, Any]] = answer["items"]
        return items

    def read(self, rtype: ResourceType, name: str, namespace: str | None) -> dict[str, Any]:
        result: dict[str, Any] = self.get(rtype.path(namespace, name))
        return result

    def apply(self, objects: Sequence[dict[str, Any]], *, dry_run: bool = False) -> list[dict[str, Any]]:
        """Applies the objects, all or none; a dry run has the server check and report them only."""
        params = {"dryRun": "true"} if dry_run else None
        answer = self.request("POST", "/v1/apply", json={"items": list(objects)}, params=params)
        items: list[dict[str, Any]] = answer["items"]
        return items

    def delete(self, rtype: ResourceType, name: str, namespace: str | None) -> dict[str, Any]:
        result: dict[str, Any] = self.request("DELETE", rtype.path(namespace, name))
        return result

    def delete_many(
        self, refs: Sequence[dict[str, Any]], *, ignore_not_found: bool = False
    ) -> list[dict[str, Any]]:
        """Deletes the objects `{kind, metadata: {name, namespace}}` names, all or none; what each became."""
        params = {"ignoreNotFound": "true"} if ignore_not_found else None
        answer = self.request("POST", "/v1/delete", json={"items": list(refs)}, params=params)
        items: list[dict[str, Any]] = answer["items"]
        return items

    def delete_collection(
        self, rtype: ResourceType, namespace: str | None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Deletes every object of the kind (in `namespace`, or all) the selector matches, all or none."""
        params = {"labelSelector": selector} if selector else None
        answer = self.request("DELETE", rtype.path(namespace), params=params)
        items: list[dict[str, Any]] = answer["items"]
        return items


def _answer(response: httpx.Response) -> Any:
    if response.status_code < 400:
        return response.json() if response.content else None
    try:
        error = response.json()["error"]
        kind, message = str(error["type"]), str(error["message"])
        obj, field_path = error.get("object"), error.get("field")
    except (ValueError, KeyError, TypeError):
        raise ApiError(f"the server answered {response.status_code}: {response.text[:200]}") from None
    raise _ERRORS.get(kind, ApiError)(message, obj=obj, field=field_path)
