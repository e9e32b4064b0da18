"""The chart's `otlpEndpoint` reaches the scheduler and the operator as `--otlp-endpoint`, in the chart
and in `gpufleet manifests all` alike; unset, neither is told anything."""

from __future__ import annotations

import json

import jsonschema
import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.kube.manifests import render_all, values_from

from .test_manifests import CHART, by_key, helm


def _args(objects: dict[tuple[str, str], dict]) -> dict[str, list[str]]:
    out = {}
    for key in (("Deployment", "gpufleet-scheduler"), ("DaemonSet", "gpufleet-agent")):
        for container in objects[key]["spec"]["template"]["spec"]["containers"]:
            out[container["name"]] = container["args"]
    return out


def test_the_endpoint_reaches_the_scheduler_and_the_operator_only() -> None:
    values = values_from({"otlpEndpoint": "http://otel-collector.observability:4318"})
    rendered = by_key(render_all(values))
    assert helm(values.as_dict()) == rendered
    args = _args(rendered)
    for name in ("scheduler", "operator"):
        assert "--otlp-endpoint=http://otel-collector.observability:4318" in args[name], name
    assert not [a for a in args["agent"] if a.startswith("--otlp-endpoint")]


def test_without_an_endpoint_no_process_is_given_one() -> None:
    args = _args(by_key(render_all(values_from({}))))
    assert not [a for name in args for a in args[name] if a.startswith("--otlp-endpoint")]


def test_an_endpoint_the_processes_would_refuse_is_refused_naming_the_value() -> None:
    with pytest.raises(ValidationError) as refused:
        values_from({"otlpEndpoint": "otel-collector:4318"})
    assert refused.value.field == "otlpEndpoint"


def test_helm_refuses_such_an_endpoint_too() -> None:
    """The chart's values.schema.json, which helm applies before rendering."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.validate({"otlpEndpoint": ""}, schema)
    jsonschema.validate({"otlpEndpoint": "https://collector:4318"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"otlpEndpoint": "collector:4318"}, schema)
