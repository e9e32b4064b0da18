"""Where an InferenceService's load comes from: a Prometheus query, or the replicas' metrics endpoints.

- `PrometheusSource`: two instant queries against the HTTP API (`/api/v1/query`), requests per second
  (the vector summed) and p99 latency in milliseconds (its largest element). `$namespace` and
  `$service` in a query are replaced by the service's.
- `PodMetricsSource`: each ready replica's endpoint (`http://{podIP}:{port}{path}`) in the Prometheus
  text format; the requests-per-second gauges are summed, the latency gauges' largest is taken.

A service may name its own queries, port or path in annotations (`gpufleet.io/metrics-*`), over the
operator's flags. A source that cannot be reached, answers an error or something unreadable raises
`MetricsUnavailable`, naming the service, the source and why; the operator reports it on the
service and keeps the replica count, it does not stop.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from string import Template
from typing import Protocol

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.numerals import plain_digits
from gpufleet.controllers.serving import LoadSample
from gpufleet.kube.config import DEFAULT_LATENCY_QUERY, DEFAULT_RPS_QUERY
from gpufleet.kube.transport import Json

RPS_QUERY_ANNOTATION = "gpufleet.io/metrics-rps-query"
LATENCY_QUERY_ANNOTATION = "gpufleet.io/metrics-latency-query"
PORT_ANNOTATION = "gpufleet.io/metrics-port"
PATH_ANNOTATION = "gpufleet.io/metrics-path"

DEFAULT_RPS_METRIC = "gpufleet_requests_per_second"
DEFAULT_LATENCY_METRIC = "gpufleet_p99_latency_ms"

Fetch = Callable[[str, float], bytes]


class MetricsUnavailable(GpuFleetError):
    """The load of a service could not be read from its metric source."""


def fetch_url(url: str, timeout: float) -> bytes:
    """GET a URL; any failure (unreachable, refused, an HTTP error) is `MetricsUnavailable`."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body: bytes = answer.read()
            return body
    except urllib.error.HTTPError as exc:
        raise MetricsUnavailable(f"{url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MetricsUnavailable(f"{url} unreachable: {reason}") from None


class MetricSource(Protocol):
    def sample(self, service: Json, pods: Sequence[Json], *, now: float) -> LoadSample:
        """The service's load now, from `pods` (its ready replicas) or elsewhere."""
        ...


def _annotation(service: Json, key: str) -> str | None:
    return (service["metadata"].get("annotations") or {}).get(key) or None


def _who(service: Json) -> str:
    meta = service["metadata"]
    return f"InferenceService {meta.get('namespace') or 'default'}/{meta['name']}"


@dataclass(frozen=True, slots=True)
class PrometheusSource:
    url: str
    rps_query: str = DEFAULT_RPS_QUERY
    latency_query: str = DEFAULT_LATENCY_QUERY
    timeout: float = 3.0
    fetch: Fetch = fetch_url

    def __post_init__(self) -> None:
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise MetricsUnavailable(f"not an http(s) URL: {self.url!r}", field="--prometheus-url")

    def sample(self, service: Json, pods: Sequence[Json], *, now: float) -> LoadSample:
        meta = service["metadata"]
        names = {"namespace": meta.get("namespace") or "default", "service": meta["name"]}
        rps_query = _annotation(service, RPS_QUERY_ANNOTATION) or self.rps_query
        latency_query = _annotation(service, LATENCY_QUERY_ANNOTATION) or self.latency_query
        rps = self._query(service, Template(rps_query).safe_substitute(names), sum)
        latency = self._query(service, Template(latency_query).safe_substitute(names), max)
        return LoadSample(now, rps, latency)

    def _query(self, service: Json, query: str, combine: Callable[[list[float]], float]) -> float:
        url = f"{self.url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        try:
            answer = json.loads(self.fetch(url, self.timeout))
        except MetricsUnavailable as exc:
            raise MetricsUnavailable(f"Prometheus: {exc.detail}", obj=_who(service)) from None
        except ValueError:
            raise MetricsUnavailable(f"Prometheus answered no JSON to {query!r}", obj=_who(service)) from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            error = answer.get("error", "unknown error") if isinstance(answer, dict) else "unknown error"
            raise MetricsUnavailable(f"Prometheus refused {query!r}: {error}", obj=_who(service))
        values = _vector_values(answer.get("data") or {})
        if values is None:
            raise MetricsUnavailable(
                f"Prometheus answered no vector or scalar to {query!r}", obj=_who(service)
            )
        finite = [v for v in values if math.isfinite(v)]
        return max(0.0, combine(finite)) if finite else 0.0


def _vector_values(data: Json) -> list[float] | None:
    kind, result = data.get("resultType"), data.get("result")
    try:
        if kind == "vector" and isinstance(result, list):
            return [float(item["value"][1]) for item in result]
        if kind == "scalar" and isinstance(result, list):
            return [float(result[1])]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def text_samples(text: str, name: str) -> list[float]:
    """The values of metric `name` in a Prometheus text exposition (every label set)."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or match.group(1) != name:
            continue
        try:
            out.append(float(match.group(3)))
        except ValueError:
            continue
    return [v for v in out if math.isfinite(v)]


@dataclass(frozen=True, slots=True)
class PodMetricsSource:
    port: int = 8080
    path: str = "/metrics"
    rps_metric: str = DEFAULT_RPS_METRIC
    latency_metric: str = DEFAULT_LATENCY_METRIC
    timeout: float = 2.0
    fetch: Fetch = fetch_url

    def sample(self, service: Json, pods: Sequence[Json], *, now: float) -> LoadSample:
        port = _annotation(service, PORT_ANNOTATION) or str(self.port)
        path = _annotation(service, PATH_ANNOTATION) or self.path
        if not plain_digits(port):
            raise MetricsUnavailable(
                f"not a port number: {port!r}",
                obj=_who(service),
                field=f"metadata.annotations[{PORT_ANNOTATION}]",
            )
        rps, latency = 0.0, 0.0
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip:
                continue
            url = f"http://{ip}:{port}/{path.lstrip('/')}"
            try:
                text = self.fetch(url, self.timeout).decode("utf-8", "replace")
            except MetricsUnavailable as exc:
                raise MetricsUnavailable(
                    f"pod {pod['metadata']['name']}: {exc.detail}", obj=_who(service)
                ) from None
            rps += sum(text_samples(text, self.rps_metric))
            latency = max([latency, *text_samples(text, self.latency_metric)])
        return LoadSample(now, rps, latency)
