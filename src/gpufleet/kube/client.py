"""The Transport protocol on the official `kubernetes` client: the only module that imports it.

Only the client's configuration loading, authentication and connection pool are used; requests go
out as plain paths with JSON bodies on the client's own pool manager (TLS, client certificates and
proxies as the client set them up) and answers come back as JSON, never through the generated model
classes. That is also how `pods/binding` must be called: the generated
`create_namespaced_pod_binding` may fail to decode the server's answer after the binding succeeded.

The client's per-request path (`param_serialize`, `call_api`) asks its kubeconfig loader to refresh
the credentials on every request, which re-reads the proxy environment each time: a third of the
CPU a request costs here. The credentials are read once and kept for `AUTH_SECONDS` instead, and
read again at once when the server answers 401 (an expired token).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.watch import watch as _watch

from gpufleet.kube.transport import JSON, ApiError, Json

CONNECT_SECONDS = 10.0
REQUEST_SECONDS = 30.0
POOL_SIZE = 64
"""Connections kept to the API server: the binder's and the operator's workers plus every informer's
watch, so no request waits for a connection and none is opened only to be thrown away."""

FOLLOW_SECONDS = 86400.0
"""How long a followed pod log may stay silent before the read gives up."""

AUTH_SECONDS = 30.0
"""How long credentials read from the client's configuration are used before they are read again."""

_config: Any = k8s_config  # the client's loaders are unannotated
_lines: Any = _watch.iter_resp_lines


def load_api_client(
    *, kubeconfig: str | None = None, context: str | None = None, pool_size: int = POOL_SIZE
) -> Any:
    """An ApiClient from the in-cluster service account, else from a kubeconfig (KUBECONFIG).

    urllib3 does not retry: every caller already retries with its own backoff (informers, the binder,
    leader election) and says so once per attempt, and hidden retries would hold a shutdown while the
    API server is unreachable."""
    configuration = k8s.Configuration()
    loaded = False
    if kubeconfig is None and context is None:
        try:
            _config.load_incluster_config(client_configuration=configuration)
            loaded = True
        except _config.ConfigException:
            pass
    if not loaded:
        _config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    configuration.retries = False
    configuration.connection_pool_maxsize = pool_size
    return k8s.ApiClient(configuration)


def api_client_from_kubeconfig(config: Mapping[str, Any], *, pool_size: int = 8) -> Any:
    """An ApiClient from a kubeconfig held as data (a federation worker's, read from a Secret), with
    the same settings as `load_api_client`. Few connections: the manager makes a handful of requests
    to each worker per pass."""
    configuration = k8s.Configuration()
    _config.load_kube_config_from_dict(config_dict=dict(config), client_configuration=configuration)
    configuration.retries = False
    configuration.connection_pool_maxsize = pool_size
    return k8s.ApiClient(configuration)


class KubeTransport:
    """JSON requests and streamed watches through a `kubernetes.client.ApiClient`."""

    def __init__(
        self,
        api_client: Any,
        *,
        connect_seconds: float = CONNECT_SECONDS,
        request_seconds: float = REQUEST_SECONDS,
    ) -> None:
        self._client = api_client
        self._connect_seconds = connect_seconds
        self._request_seconds = request_seconds
        configuration = api_client.configuration
        self._host = str(configuration.host).rstrip("/")
        self._pool = api_client.rest_client.pool_manager
        self._auth: dict[str, str] = {}
        self._auth_until = 0.0
        self._auth_lock = threading.Lock()

    @classmethod
    def from_environment(cls, *, kubeconfig: str | None = None, context: str | None = None) -> KubeTransport:
        return cls(load_api_client(kubeconfig=kubeconfig, context=context))

    @classmethod
    def from_kubeconfig_data(
        cls, config: Mapping[str, Any], *, timeout: float = REQUEST_SECONDS
    ) -> KubeTransport:
        """A connection from a kubeconfig held as data; `timeout` bounds connecting and each request."""
        return cls(api_client_from_kubeconfig(config), connect_seconds=timeout, request_seconds=timeout)

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
        raw, status = self._read(method, path, query, body, content_type, timeout or self._request_seconds)
        data = _decode(raw)
        if not 200 <= status < 300:
            raise ApiError.from_status(status, data)
        return data

    def metrics_text(self) -> str:
        """The API server's own `/metrics` (Prometheus text), for benchmarks that compare its load."""
        raw, status = self._read("GET", "/metrics", None, None, JSON, REQUEST_SECONDS)
        if not 200 <= status < 300:
            raise ApiError.from_status(status, _decode(raw))
        return raw.decode("utf-8", "replace")

    def lines(self, path: str, *, query: Mapping[str, str | int | bool]) -> Iterator[str]:
        """The lines of a plain-text answer (a pod's log), as they arrive; a followed log is read with
        a day's timeout between lines, since it ends only with the pod."""
        timeout = FOLLOW_SECONDS if query.get("follow") else REQUEST_SECONDS
        for line in self._stream(path, query, timeout):
            yield line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line)

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        for line in self._stream(path, {**query, "watch": True}, timeout):
            if not line:
                continue
            event = _loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                raise ApiError.from_status(int(status.get("code") or 500), status)
            yield event

    def _stream(self, path: str, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Any]:
        """The lines of a GET's answer as they arrive; a refusal, or a connection lost on the way, is an
        ApiError (status 0 for the connection), and the connection goes back to the pool either way."""
        response = self._send("GET", path, query, None, JSON, timeout)
        if not 200 <= response.status < 300:
            raw = response.data
            response.release_conn()
            raise ApiError.from_status(response.status, _decode(raw))
        try:
            yield from _lines(response)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, "Unavailable", str(exc)) from None
        finally:
            response.release_conn()

    def _read(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str,
        timeout: float,
    ) -> tuple[bytes, int]:
        """One request read whole: the answer's bytes and status."""
        response = self._send(method, path, query, body, content_type, timeout)
        try:
            return bytes(response.data or b""), int(response.status)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, "Unavailable", str(exc)) from None
        finally:
            response.release_conn()

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str,
        timeout: float,
    ) -> Any:
        url = self._host + path
        if query:
            url += "?" + urlencode([(key, _query_value(value)) for key, value in query.items()])
        data = None if body is None else _dumps(body)
        for attempt in range(2):
            headers = {"Accept": JSON, **self._credentials(fresh=attempt > 0)}
            if data is not None:
                headers["Content-Type"] = content_type
            try:
                response = self._pool.request(
                    method,
                    url,
                    body=data,
                    headers=headers,
                    timeout=urllib3.Timeout(connect=self._connect_seconds, read=timeout),
                    preload_content=False,
                )
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise ApiError(0, "Unavailable", str(exc)) from None
            if response.status != 401 or attempt:
                return response
            response.drain_conn()  # expired credentials: read them again, once
            response.release_conn()
        raise AssertionError("unreachable")

    def _credentials(self, *, fresh: bool = False) -> dict[str, str]:
        """The authentication headers, read from the client's configuration at most every AUTH_SECONDS
        (reading refreshes an expiring token through the client's loader)."""
        now = time.monotonic()
        with self._auth_lock:
            if fresh or now >= self._auth_until:
                settings = self._client.configuration.auth_settings()
                self._auth = {
                    str(s["key"]): str(s["value"])
                    for s in settings.values()
                    if s.get("in") == "header" and s.get("value")
                }
                self._auth_until = now + AUTH_SECONDS
            return self._auth


def _loads(raw: bytes | str) -> Any:
    """JSON as the server sends it. orjson decodes a watch line in well under half the time the standard
    library takes (decoding is a fifth of the scheduler's CPU while it binds). What orjson refuses and the
    standard library takes (an escaped lone surrogate, `NaN`) is decoded by the standard library."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _dumps(body: Any) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:  # what orjson cannot write (an integer wider than 64 bits)
        return json.dumps(body).encode()


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decode(raw: bytes | str | None) -> Json:
    if not raw:
        return {}
    try:
        data = _loads(raw)
    except ValueError:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return {"message": text[:500]}
    return data if isinstance(data, dict) else {"items": data}
