"""OpenTelemetry traces of the control plane: one trace per workload, one span per scheduling cycle.

Off unless configured: `configure` sets up the SDK only when an OTLP endpoint is given (`--otlp-endpoint`)
or named by the standard environment variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), or a test hands it an exporter. Until then every function here
returns after one test of a module global, and the SDK is not even imported: tracing that is off
costs the scheduler nothing it could measure.

A workload's life crosses processes (the scheduler and the operator are two in Kubernetes) and
restarts of them, so no span can stay open for it. Its trace is instead named after it: the trace id
and the id of its root span are derived from the workload's uid (`trace_id`), and each step of its
life (`STEPS`) is a short span under that root, emitted by whichever process saw the step. When the
workload finishes, the root span itself is emitted, from its submission to its end, with the same
ids, and the trace is whole. Every process therefore joins the same trace without passing a context.

Times are the world's clock (seconds), so a virtual-clock twin's trace reads like its timeline.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.api.errors import ValidationError

if TYPE_CHECKING:  # the SDK is imported only when tracing is configured
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import Link, Span, Tracer

STEPS = (
    "submitted",
    "queued",
    "admitted",
    "placed",
    "bound",
    "running",
    "checkpointed",
    "preempted",
    "restarted",
    "finished",
)
"""The steps of a workload's life, each a span named `workload.<step>` in the workload's trace."""

OTLP_HELP = (
    "OTLP/HTTP collector for traces, e.g. http://collector:4318 [env OTEL_EXPORTER_OTLP_ENDPOINT]; "
    "unset: no tracing."
)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The standard variables that name where OTLP traces go; either one turns tracing on."""

AttributeValue = str | int | float | bool | Sequence[str]
Attributes = Mapping[str, AttributeValue]

_provider: TracerProvider | None = None
_tracer: Tracer | None = None
# The ids the next span must have: the root span of a workload is emitted with ids derived from its
# uid, which only the SDK's id generator can give a span (see `_fixed_ids`).
_next_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "gpufleet_next_span_ids", default=None
)


def enabled() -> bool:
    """Whether spans are recorded (tracing was configured); callers test it before any work."""
    return _tracer is not None


def wanted(endpoint: str | None, env: Mapping[str, str] | None = None) -> bool:
    """Whether tracing is asked for: an `--otlp-endpoint`, or one of `ENDPOINT_VARIABLES` set (and
    the SDK not disabled by `OTEL_SDK_DISABLED=true`)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(endpoint) or any(env.get(name) for name in ENDPOINT_VARIABLES)


def configure(
    *,
    service: str,
    endpoint: str | None = None,
    exporter: SpanExporter | None = None,
    env: Mapping[str, str] | None = None,
) -> bool:
    """Sets tracing up for this process, if asked (`wanted`), and says whether it did.

    `endpoint` is the OTLP/HTTP base URL (`http://collector:4318`, as `OTEL_EXPORTER_OTLP_ENDPOINT`
    means it): spans go to its `/v1/traces`. Without it the exporter reads the standard variables.
    `exporter` (tests) replaces OTLP and exports each span as it ends. `service` is the
    `service.name` resource attribute (`OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` may add to
    it). A second call replaces the first setup, flushing it; the SDK flushes the last at exit. An
    endpoint that is not an http(s) URL is a `ValidationError` naming `--otlp-endpoint`."""
    if exporter is None and not wanted(endpoint, env):
        return False
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise ValidationError(
            f"expected an http:// or https:// URL, got {endpoint!r}", field="--otlp-endpoint"
        )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    shutdown()
    provider = TracerProvider(resource=Resource.create({"service.name": service}), id_generator=_fixed_ids())
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = endpoint.rstrip("/") + "/v1/traces" if endpoint else None
        # Batches leave from the processor's own thread: a cycle never waits on the collector.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    _set(provider)
    return True


def shutdown() -> None:
    """Flushes and ends the current setup, if any; tracing is off afterwards."""
    provider = _provider
    _set(None)
    if provider is not None:
        provider.shutdown()


def _set(provider: TracerProvider | None) -> None:
    global _provider, _tracer
    _provider = provider
    _tracer = provider.get_tracer("gpufleet") if provider is not None else None


# ----------------------------------------------------------------------------------- ids
def _ids(uid: str) -> tuple[int, int]:
    digest = hashlib.sha256(f"gpufleet/workload/{uid}".encode()).digest()
    # Neither id may be 0 (the invalid id); a digest of zeros is not to be expected, but costs nothing.
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def trace_id(uid: str) -> str:
    """The workload's trace id, 32 hex digits, as log lines carry it (`trace_id`) and backends show
    it: the same in every process and every attempt, traced or not."""
    return f"{_ids(uid)[0]:032x}"


def _nanos(seconds: float) -> int:
    return int(seconds * 1e9)


# --------------------------------------------------------------------------------- spans
def step(
    uid: str | None,
    name: str,
    *,
    at: float,
    attributes: Attributes | None = None,
    links: Sequence[Link] = (),
) -> None:
    """Records step `name` (one of `STEPS`) of the workload with this uid at world time `at`."""
    tracer = _tracer
    if tracer is None or not uid:
        return
    from opentelemetry import trace

    trace_number, root = _ids(uid)
    parent = trace.NonRecordingSpan(
        trace.SpanContext(trace_number, root, is_remote=True, trace_flags=trace.TraceFlags(1))
    )
    span = tracer.start_span(
        f"workload.{name}",
        context=trace.set_span_in_context(parent),
        attributes={"gpufleet.step": name, **(attributes or {})},
        links=links,
        start_time=_nanos(at),
    )
    span.end(end_time=_nanos(at))


def finished(
    uid: str | None, *, submitted_at: float, at: float, attributes: Attributes | None = None
) -> None:
    """Records the `finished` step and the workload's root span, from `submitted_at` to `at`: the
    span every step of its trace hangs under."""
    if _tracer is None or not uid:
        return
    step(uid, "finished", at=at, attributes=attributes)
    from opentelemetry.context import Context

    token = _next_ids.set(_ids(uid))
    try:
        root = _tracer.start_span(
            "workload", context=Context(), attributes=attributes, start_time=_nanos(submitted_at)
        )
    finally:
        _next_ids.reset(token)
    root.end(end_time=_nanos(max(at, submitted_at)))


def cycle_span(number: int, *, at: float) -> Span | None:
    """Starts the span of scheduling cycle `number` at world time `at`; None when tracing is off.
    The caller sets its results and ends it with `end_cycle`."""
    if _tracer is None:
        return None
    from opentelemetry.context import Context

    return _tracer.start_span(
        "scheduling.cycle", context=Context(), attributes={"gpufleet.cycle": number}, start_time=_nanos(at)
    )


def end_cycle(span: Span, *, at: float, seconds: float, attributes: Mapping[str, Any]) -> None:
    """Ends a cycle span `seconds` (its measured wall time) after the world time it started at."""
    span.set_attributes({"gpufleet.cycle.duration_seconds": seconds, **attributes})
    span.end(end_time=_nanos(at) + int(seconds * 1e9))


def link_to(span: Span | None) -> list[Link]:
    """A link from a workload's step to the cycle that decided it."""
    if span is None:
        return []
    from opentelemetry.trace import Link

    return [Link(span.get_span_context())]


def _fixed_ids() -> IdGenerator:
    """Random ids, except for a span started while `_next_ids` is set: a workload's root span."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class FixedIds(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            fixed = _next_ids.get()
            return fixed[0] if fixed is not None else super().generate_trace_id()

        def generate_span_id(self) -> int:
            fixed = _next_ids.get()
            return fixed[1] if fixed is not None else super().generate_span_id()

    return FixedIds()
