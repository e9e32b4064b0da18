"""The scheduler's and operator's metrics endpoints and log format in `gpufleet manifests all` (the
chart renders the same objects: tests/kube/test_manifests.py)."""

from __future__ import annotations

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.kube.manifests import render_all, values_from


def _by_key(values: dict) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render_all(values_from(values)) if o}


def _containers(objects: dict[tuple[str, str], dict]) -> dict[str, dict]:
    out = {}
    for key in (("Deployment", "gpufleet-scheduler"), ("DaemonSet", "gpufleet-agent")):
        for container in objects[key]["spec"]["template"]["spec"]["containers"]:
            out[container["name"]] = container
    return out


def test_the_scheduler_and_operator_serve_metrics_each_behind_its_own_service() -> None:
    objects = _by_key({})
    containers = _containers(objects)
    assert "--metrics-bind-address=:9402" in containers["scheduler"]["args"]
    assert "--metrics-bind-address=:9403" in containers["operator"]["args"]
    assert containers["scheduler"]["ports"] == [{"name": "sched-metrics", "containerPort": 9402}]
    assert containers["operator"]["ports"] == [{"name": "oper-metrics", "containerPort": 9403}]
    for process, port, target in (("scheduler", 9402, "sched-metrics"), ("operator", 9403, "oper-metrics")):
        service = objects[("Service", f"gpufleet-{process}-metrics")]
        assert service["spec"]["ports"] == [{"name": "metrics", "port": port, "targetPort": target}]
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == "scheduler"
    assert ("ServiceMonitor", "gpufleet-control-plane") not in objects
    monitored = _by_key({"serviceMonitor": {"enabled": True}})
    monitor = monitored[("ServiceMonitor", "gpufleet-control-plane")]
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]


def test_the_log_format_reaches_every_process_and_a_bad_one_is_refused() -> None:
    containers = _containers(_by_key({"logFormat": "json"}))
    for name in ("scheduler", "operator", "agent"):
        assert "--log-format=json" in containers[name]["args"], name
    with pytest.raises(ValidationError) as refused:
        values_from({"logFormat": "xml"})
    assert refused.value.field == "logFormat"
