"""Traces leave over OTLP/HTTP to the endpoint configured, by the standard variable or the option: a
stand-in collector receives the protobuf POSTs on /v1/traces and decodes them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gpufleet.observability import tracing


class Collector:
    """An OTLP/HTTP receiver on a free local port that keeps every request it decodes."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, ExportTraceServiceRequest]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.requests.append((self.path, request))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[tuple[str, str, str]]:
        """(path, service.name, span name) of every span received."""
        out = []
        for path, request in self.requests:
            for resource_spans in request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    out.extend((path, attributes["service.name"], s.name) for s in scope.spans)
        return out

    def trace_ids(self) -> set[str]:
        return {
            s.trace_id.hex()
            for _, r in self.requests
            for rs in r.resource_spans
            for scope in rs.scope_spans
            for s in scope.spans
        }


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    tracing.shutdown()
    c.server.shutdown()


def _emit() -> None:
    span = tracing.cycle_span(7, at=1_900_000_000.0)
    assert span is not None
    tracing.end_cycle(span, at=1_900_000_000.0, seconds=0.002, attributes={"gpufleet.workloads.admitted": 1})
    tracing.step("uid-1", "admitted", at=1_900_000_000.0, links=tracing.link_to(span))
    tracing.shutdown()  # flushes the batch


def test_the_standard_variable_sends_traces_to_its_v1_traces(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    assert tracing.configure(service="gpufleet-scheduler")
    _emit()
    assert sorted(collector.spans()) == [
        ("/v1/traces", "gpufleet-scheduler", "scheduling.cycle"),
        ("/v1/traces", "gpufleet-scheduler", "workload.admitted"),
    ]
    assert tracing.trace_id("uid-1") in collector.trace_ids()


def test_the_option_names_the_collector_without_the_variable(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert tracing.configure(service="gpufleet-up", endpoint=collector.url + "/")
    _emit()
    assert {(path, service) for path, service, _ in collector.spans()} == {("/v1/traces", "gpufleet-up")}
