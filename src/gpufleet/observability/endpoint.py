"""Serving prometheus_client's default registry on its own port, for processes without an HTTP API of
their own (`gpufleet kube scheduler` and `operator`; `gpufleet up` serves it on its API)."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

from gpufleet.api.errors import ValidationError

log = logging.getLogger("gpufleet.observability")


def parse_bind_address(value: str, *, option: str = "--metrics-bind-address") -> tuple[str, int] | None:
    """`HOST:PORT` or `:PORT` (all addresses) as (host, port); None for port 0 or an empty value
    (metrics off)."""
    text = value.strip()
    if text in ("", "0"):
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ValidationError(f"expected HOST:PORT or :PORT, got {value!r}", field=option) from None
    if not 0 <= port <= 65535:
        raise ValidationError(f"port must be 0..65535 (0: no metrics), got {port}", field=option)
    return None if port == 0 else (host or "0.0.0.0", port)


def serve_metrics(value: str, *, option: str = "--metrics-bind-address") -> tuple[str, int] | None:
    """Starts serving `/metrics` on the address `value` names (daemon threads); the bound address,
    or None when metrics are off or cannot be served.

    A malformed address is an error naming the option. An address that cannot be listened on (a
    port another process holds: a second scheduler on one machine, as benchmarks start them) is
    logged as a warning and the process runs on without metrics: scheduling matters more than its
    figures, and a scrape that finds nothing raises the scheduler-down alert."""
    address = parse_bind_address(value, option=option)
    if address is None:
        return None
    host, port = address
    try:
        server, _thread = start_http_server(port, addr=host)
    except OSError as exc:
        log.warning(
            "metrics not served: cannot listen on %s:%d (%s; %s)", host, port, exc.strerror or exc, option
        )
        return None
    bound = server.server_address
    log.info("metrics on http://%s:%d/metrics", bound[0], bound[1])
    return str(bound[0]), int(bound[1])
