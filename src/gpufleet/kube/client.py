"""The Transport protocol on the official `kubernetes` client: the only module that imports it.

Only the client's configuration loading, authentication and HTTP plumbing are used; requests go out
as plain paths with JSON bodies and answers come back as JSON, never through the generated model
classes. That is also how `pods/binding` must be called: the generated
`create_namespaced_pod_binding` may fail to decode the server's answer after the binding succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import watch as _watch

from gpufleet.kube.transport import JSON, ApiError, Json

CONNECT_SECONDS = 10.0
REQUEST_SECONDS = 30.0
POOL_SIZE = 64
"""Connections kept to the API server: the binder's and the operator's workers plus every informer's
watch, so no request waits for a connection and none is opened only to be thrown away."""

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


class KubeTransport:
    """JSON requests and streamed watches through a `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: Any) -> None:
        self._client = api_client

    @classmethod
    def from_environment(cls, *, kubeconfig: str | None = None, context: str | None = None) -> KubeTransport:
        return cls(load_api_client(kubeconfig=kubeconfig, context=context))

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
        response = self._send(
            method, path, query, body, content_type, (CONNECT_SECONDS, timeout or REQUEST_SECONDS)
        )
        try:
            raw = response.read()
        finally:
            response.response.release_conn()
        data = _decode(raw)
        if not 200 <= response.status < 300:
            raise ApiError.from_status(response.status, data)
        return data

    def metrics_text(self) -> str:
        """The API server's own `/metrics` (Prometheus text), for benchmarks that compare its load."""
        response = self._send("GET", "/metrics", None, None, JSON, (CONNECT_SECONDS, REQUEST_SECONDS))
        try:
            raw = response.read()
        finally:
            response.response.release_conn()
        if not 200 <= response.status < 300:
            raise ApiError.from_status(response.status, _decode(raw))
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        response = self._send("GET", path, {**query, "watch": True}, None, JSON, (CONNECT_SECONDS, timeout))
        if not 200 <= response.status < 300:
            raw = response.read()
            response.response.release_conn()
            raise ApiError.from_status(response.status, _decode(raw))
        try:
            for line in _lines(response.response):
                if not line:
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiError.from_status(int(status.get("code") or 500), status)
                yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, "Unavailable", str(exc)) from None
        finally:
            response.response.release_conn()

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str,
        timeout: tuple[float, float],
    ) -> Any:
        params = [(key, _query_value(value)) for key, value in (query or {}).items()]
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            serialized = self._client.param_serialize(
                method=method,
                resource_path=path,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            return self._client.call_api(*serialized, _request_timeout=timeout)
        except ApiException as exc:
            raise ApiError.from_status(int(exc.status or 0), _decode(exc.body)) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, "Unavailable", str(exc)) from None


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decode(raw: bytes | str | None) -> Json:
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return {"message": text[:500]}
    return data if isinstance(data, dict) else {"items": data}
