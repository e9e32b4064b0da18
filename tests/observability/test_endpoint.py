"""The scheduler's and operator's own /metrics endpoint (`--metrics-bind-address`)."""

from __future__ import annotations

import logging
import socket
import urllib.request

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.observability import metrics
from gpufleet.observability.endpoint import parse_bind_address, serve_metrics


def test_bind_addresses_are_host_port_or_port_and_zero_turns_metrics_off() -> None:
    assert parse_bind_address(":9402") == ("0.0.0.0", 9402)
    assert parse_bind_address("9402") == ("0.0.0.0", 9402)
    assert parse_bind_address("127.0.0.1:9403") == ("127.0.0.1", 9403)
    assert parse_bind_address("[::1]:9403") == ("::1", 9403)
    assert parse_bind_address("0") is None
    assert parse_bind_address(":0") is None
    assert parse_bind_address("") is None
    with pytest.raises(ValidationError, match="HOST:PORT"):
        parse_bind_address("localhost:http")
    with pytest.raises(ValidationError, match="65535"):
        parse_bind_address(":70000")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_default_registry_is_served_and_a_port_in_use_is_only_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics.CYCLES.inc()
    host, port = serve_metrics(f"127.0.0.1:{_free_port()}") or ("", 0)
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert "gpufleet_scheduling_cycles_total" in text
    # A second process on the same port runs on without metrics, and says so.
    with caplog.at_level(logging.WARNING, logger="gpufleet.observability"):
        assert serve_metrics(f"127.0.0.1:{port}") is None
    assert f"cannot listen on 127.0.0.1:{port}" in caplog.text
    assert "--metrics-bind-address" in caplog.text
    assert serve_metrics("0") is None
