"""The alert rules (deploy/prometheus/gpufleet-rules.yaml): `promtool check rules`, and `promtool test
rules` on synthetic series for every rule, each seen firing and not firing; and every series a rule
reads is one the project exports (or kube-state-metrics' and Prometheus' own `up`).

promtool comes from the Debian `prometheus` package (`make test` installs it through
scripts/ensure-prometheus.sh); without it these tests are skipped with that reason.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.agent.exporter import DEFAULT_COUNTERS
from gpufleet.kube.manifests import values_from
from gpufleet.observability import metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpufleet-rules.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian package prometheus; see scripts/ensure-prometheus.sh)",
)

# Series the rules read that others export: Prometheus itself, and kube-state-metrics for Node state.
FOREIGN = {"up", "kube_node_status_condition", "kube_node_status_capacity"}

GPU0 = 'gpu="0",Hostname="n1"'
GPU1 = 'gpu="1",Hostname="n1"'
GPU2 = 'gpu="2",Hostname="n1"'
HELD = 'pod="train-0",namespace="team-a"'
CHECKPOINT_AT = "gpufleet_trainingjob_last_checkpoint_timestamp_seconds"
INTERVAL = "gpufleet_trainingjob_checkpoint_interval_seconds"
CLOCK = "gpufleet_clock_timestamp_seconds"
WALL = 'instance="w:8000",job="gpufleet"'
FAST = 'instance="f:8000",job="gpufleet"'


def _gpu(labels: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', labels))


# alertname -> (input series, [(eval time, [labels of each alert expected then])]); each rule has at
# least one time where it fires and one where it does not (or for other series only).
CASES: dict[str, tuple[dict[str, str], list[tuple[str, list[dict[str, str]]]]]] = {
    "GpuAllocatedButIdle": (
        {
            f"DCGM_FI_DEV_GPU_UTIL{{{GPU0},{HELD}}}": "10x40",
            f'DCGM_FI_DEV_GPU_UTIL{{{GPU1},pod="train-1",namespace="team-a"}}': "90x40",
            f"DCGM_FI_DEV_GPU_UTIL{{{GPU2}}}": "0x40",  # idle but held by no pod
        },
        [("29m", []), ("31m", [{**_gpu(GPU0), **_gpu(HELD), "severity": "warning"}])],
    ),
    "GpuTooHot": (
        {
            f"DCGM_FI_DEV_GPU_TEMP{{{GPU0}}}": "90x10",
            f"DCGM_FI_DEV_GPU_TEMP{{{GPU1}}}": "70x10",
            f"DCGM_FI_DEV_MEMORY_TEMP{{{GPU1}}}": "80x10",
            f"DCGM_FI_DEV_MEMORY_TEMP{{{GPU2}}}": "96x10",
        },
        [
            ("4m", []),
            ("6m", [{**_gpu(GPU0), "severity": "warning"}, {**_gpu(GPU2), "severity": "warning"}]),
        ],
    ),
    "GpuClockThrottled": (
        {
            f"DCGM_FI_DEV_SM_CLOCK{{{GPU0}}}": "1980x20 1500x30",
            f"DCGM_FI_DEV_GPU_UTIL{{{GPU0}}}": "95x50",
            f"DCGM_FI_DEV_SM_CLOCK{{{GPU1}}}": "1980x20 1500x30",  # slowed down while idle: normal
            f"DCGM_FI_DEV_GPU_UTIL{{{GPU1}}}": "10x50",
        },
        [("30m", []), ("32m", [{**_gpu(GPU0), "severity": "warning"}])],
    ),
    "GpuXidError": (
        {
            f"DCGM_FI_DEV_XID_ERRORS{{{GPU0}}}": "0 0 94 94 94",
            f"DCGM_FI_DEV_XID_ERRORS{{{GPU1}}}": "0 79 79 79 79",
            f"DCGM_FI_DEV_XID_ERRORS{{{GPU2}}}": "0x4",
        },
        [("1m", []), ("3m", [{**_gpu(GPU0), "severity": "warning"}])],
    ),
    "GpuFallenOffTheBus": (
        {
            f"DCGM_FI_DEV_XID_ERRORS{{{GPU0}}}": "0 0 94 94 94",
            f"DCGM_FI_DEV_XID_ERRORS{{{GPU1}}}": "0 0 79 79 79",
        },
        [("1m", []), ("3m", [{**_gpu(GPU1), "severity": "critical"}])],
    ),
    "GpuUncorrectableMemoryError": (
        {
            f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{GPU0}}}": "0 0 0 1x30",
            f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{GPU1}}}": "2x33",  # old errors, none new
            f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{GPU1}}}": "0x33",
            f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{GPU2}}}": "0 0 0 1x30",
        },
        [
            ("2m", []),
            ("5m", [{**_gpu(GPU0), "severity": "critical"}, {**_gpu(GPU2), "severity": "critical"}]),
            # The remapped row is 15 minutes old: only the remapping failure still fires.
            ("30m", [{**_gpu(GPU2), "severity": "critical"}]),
        ],
    ),
    "GpuNodeNotReady": (
        {
            'kube_node_status_condition{node="n1",condition="Ready",status="true"}': "0x10",
            'kube_node_status_capacity{node="n1",resource="nvidia_com_gpu"}': "8x10",
            'kube_node_status_condition{node="n2",condition="Ready",status="true"}': "0x10",
            'kube_node_status_capacity{node="n2",resource="cpu"}': "64x10",  # no GPUs
            'kube_node_status_condition{node="n3",condition="Ready",status="true"}': "1x10",
            'kube_node_status_capacity{node="n3",resource="nvidia_com_gpu"}': "8x10",
        },
        [
            ("4m", []),
            (
                "6m",
                [{"node": "n1", "condition": "Ready", "status": "true", "severity": "critical"}],
            ),
        ],
    ),
    "GpufleetWorkloadPendingTooLong": (
        {
            'gpufleet_pending_oldest_seconds{queue="a",reason="QuotaExceeded"}': "3000+60x20",
            'gpufleet_pending_oldest_seconds{queue="b",reason="QueueNotFound"}': "9999x20",
            'gpufleet_pending_oldest_seconds{queue="c",reason="NoFit"}': "100x20",
        },
        [
            ("5m", []),
            ("11m", [{"queue": "a", "reason": "QuotaExceeded", "severity": "warning", "slo": "1h"}]),
        ],
    ),
    "GpufleetQueueStarved": (
        {
            'gpufleet_queue_used_gpus{queue="a",flavor="H100-80GB"}': "2x40",
            'gpufleet_queue_nominal_gpus{queue="a",flavor="H100-80GB"}': "8x40",
            'gpufleet_pending_workloads{queue="a",reason="NoFit"}': "3x40",
            # b: under its nominal quota but nothing waits; c: waits while at its nominal quota.
            'gpufleet_queue_used_gpus{queue="b",flavor="H100-80GB"}': "2x40",
            'gpufleet_queue_nominal_gpus{queue="b",flavor="H100-80GB"}': "8x40",
            'gpufleet_queue_used_gpus{queue="c",flavor="H100-80GB"}': "8x40",
            'gpufleet_queue_nominal_gpus{queue="c",flavor="H100-80GB"}': "8x40",
            'gpufleet_pending_workloads{queue="c",reason="QuotaExceeded"}': "2x40",
        },
        [("29m", []), ("31m", [{"queue": "a", "flavor": "H100-80GB", "severity": "warning"}])],
    ),
    "GpufleetCheckpointOverdue": (
        {
            # On the wall clock (target w): j checkpointed at time 0 every 30 minutes; k every minute.
            f"{CLOCK}{{{WALL}}}": "0+60x60",
            f'{CHECKPOINT_AT}{{{WALL},namespace="ns",trainingjob="j"}}': "0x60",
            f'{INTERVAL}{{{WALL},namespace="ns",trainingjob="j"}}': "1800x60",
            f'{CHECKPOINT_AT}{{{WALL},namespace="ns",trainingjob="k"}}': "0+60x60",
            f'{INTERVAL}{{{WALL},namespace="ns",trainingjob="k"}}': "600x60",
            # `gpufleet up --time-scale 10` (target f): ten fleet minutes a minute. g's checkpoints stop
            # at 0 with a 30-minute interval: overdue after 3 minutes of the wall clock (the age is
            # fleet time), not 30; h checkpoints every 10 fleet minutes against 15: never overdue, though
            # its checkpoint times run far ahead of Prometheus' time().
            f"{CLOCK}{{{FAST}}}": "0+600x60",
            f'{CHECKPOINT_AT}{{{FAST},namespace="ns",trainingjob="g"}}': "0x60",
            f'{INTERVAL}{{{FAST},namespace="ns",trainingjob="g"}}': "1800x60",
            f'{CHECKPOINT_AT}{{{FAST},namespace="ns",trainingjob="h"}}': "0+600x60",
            f'{INTERVAL}{{{FAST},namespace="ns",trainingjob="h"}}': "900x60",
        },
        [
            ("17m", []),
            ("20m", [{**_gpu(FAST), "namespace": "ns", "trainingjob": "g", "severity": "warning"}]),
            ("40m", [{**_gpu(FAST), "namespace": "ns", "trainingjob": "g", "severity": "warning"}]),
            (
                "47m",
                [
                    {**_gpu(FAST), "namespace": "ns", "trainingjob": "g", "severity": "warning"},
                    {**_gpu(WALL), "namespace": "ns", "trainingjob": "j", "severity": "warning"},
                ],
            ),
        ],
    ),
    "GpufleetSchedulerDown": (
        {
            'up{job="gpufleet-scheduler-metrics",instance="a"}': "1 1 0x10",
            'up{job="gpufleet-scheduler-metrics",instance="b"}': "0x12",
            'up{job="gpufleet-operator-metrics",instance="c"}': "1x12",
        },
        [("3m", []), ("8m", [{"job": "gpufleet-scheduler-metrics", "severity": "critical"}])],
    ),
    "GpufleetContainedFailure": (
        {
            f'gpufleet_contained_failures_total{{component="scheduler",{WALL}}}': "0x5 1x30",
            f'gpufleet_contained_failures_total{{component="operator",{WALL}}}': "0x35",
        },
        [("3m", []), ("8m", [{"component": "scheduler", "severity": "warning"}]), ("30m", [])],
    ),
    "GpufleetAgentDown": (
        {
            'up{job="gpufleet-agent-metrics",instance="n1"}': "0x10",
            'up{job="gpufleet-agent",instance="n2"}': "1x10",
        },
        [("4m", []), ("6m", [{"job": "gpufleet-agent-metrics", "instance": "n1", "severity": "warning"}])],
    ),
}

# A scheduler never scraped at all (no series) is down too.
ABSENT_SCHEDULER = ({'up{job="gpufleet-agent",instance="n1"}': "1x10"}, "6m")


def _all_rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _rules() -> dict[str, dict[str, Any]]:
    """The alerting rules by name."""
    return {rule["alert"]: rule for rule in _all_rules() if "alert" in rule}


# Recording rules: (input series, [(eval time, expression, [(labels, value)])]).
IDLE_HOUR = {
    # 8 idle GPUs for the first half hour, then 4 (6 at the turn): 6 idle GPU-hours in the hour (the 61
    # samples of an hour's window, ends included). Two scheduler replicas export the same series.
    'gpufleet_gpus{pool="p",model="H100-80GB",state="idle",instance="a"}': "8x29 6 4x30",
    'gpufleet_gpus{pool="p",model="H100-80GB",state="idle",instance="b"}': "8x29 6 4x30",
    'gpufleet_gpus{pool="p",model="H100-80GB",state="allocated",instance="a"}': "0x29 2 4x30",
    'gpufleet_pool_gpu_hour_price{pool="p",instance="c"}': "3x60",
    # Queue a holds 2 GPUs of pool p all hour, and half a GPU of pool q (price 1); b holds 4 of p.
    'gpufleet_queue_pool_gpus{queue="a",pool="p",instance="a"}': "2x60",
    'gpufleet_queue_pool_gpus{queue="a",pool="p",instance="b"}': "2x60",
    'gpufleet_queue_pool_gpus{queue="a",pool="q",instance="a"}': "0.5x60",
    'gpufleet_queue_pool_gpus{queue="b",pool="p",instance="a"}': "4x60",
    'gpufleet_pool_gpu_hour_price{pool="q",instance="c"}': "1x60",
}

# Recording rules: (input series, [(eval time, expression, [(labels, value)])]).
RECORDED: dict[str, tuple[dict[str, str], list[tuple[str, str, list[tuple[str, float]]]]]] = {
    "pool_model:gpufleet_idle_gpu_hours:1h": (
        IDLE_HOUR,
        [
            (
                "60m",
                "round(pool_model:gpufleet_idle_gpu_hours:1h, 0.001)",  # the mean is summed in floats
                [('{model="H100-80GB",pool="p"}', 6.0)],
            ),
        ],
    ),
    "pool:gpufleet_idle_gpu_cost:1h": (
        IDLE_HOUR,
        [("60m", "round(pool:gpufleet_idle_gpu_cost:1h, 0.001)", [('{pool="p"}', 18.0)])],
    ),
    "queue:gpufleet_gpu_cost:1h": (
        IDLE_HOUR,
        [
            (
                "60m",
                "queue:gpufleet_gpu_cost:1h",
                [
                    ('queue:gpufleet_gpu_cost:1h{queue="a"}', 6.5),
                    ('queue:gpufleet_gpu_cost:1h{queue="b"}', 12.0),
                ],
            )
        ],
    ),
}


def _expected(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    return {"exp_labels": labels, "exp_annotations": rule.get("annotations", {})}


def _tests() -> dict[str, Any]:
    rules = _rules()
    tests = []
    for name, (series, checks) in CASES.items():
        tests.append(
            {
                "name": name,
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": [
                    {
                        "alertname": name,
                        "eval_time": at,
                        "exp_alerts": [_expected(rules[name], labels) for labels in alerts],
                    }
                    for at, alerts in checks
                ],
            }
        )
    series, at = ABSENT_SCHEDULER
    tests.append(
        {
            "name": "GpufleetSchedulerDown when never scraped",
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [
                {
                    "alertname": "GpufleetSchedulerDown",
                    "eval_time": at,
                    "exp_alerts": [
                        _expected(
                            rules["GpufleetSchedulerDown"],
                            {"severity": "critical"},  # absent() of a regex names no job
                        )
                    ],
                }
            ],
        }
    )
    for name, (series, exprs) in RECORDED.items():
        tests.append(
            {
                "name": name,
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": at,
                        "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
                    }
                    for at, expr, samples in exprs
                ],
            }
        )
    return {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


def test_every_rule_has_a_case_that_fires_and_one_that_does_not() -> None:
    assert set(CASES) == set(_rules())
    assert set(RECORDED) == {rule["record"] for rule in _all_rules() if "record" in rule}
    for name, (_series, checks) in CASES.items():
        assert any(alerts for _at, alerts in checks), name
        assert any(not alerts for _at, alerts in checks), name


@needs_promtool
def test_the_rules_file_is_valid() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_each_rule_fires_on_its_synthetic_series_and_only_then(tmp_path: Path) -> None:
    tests = tmp_path / "gpufleet-rules.test.yaml"
    tests.write_text(yaml.safe_dump(_tests(), sort_keys=False), encoding="utf-8")
    result = _promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The harness itself can fail: an alert expected where the series say none."""
    broken = _tests()
    broken["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"gpu": "9"}}]
    tests = tmp_path / "broken.test.yaml"
    tests.write_text(yaml.safe_dump(broken, sort_keys=False), encoding="utf-8")
    assert _promtool("test", "rules", str(tests)).returncode != 0


_NOT_SERIES = {
    "and", "or", "unless", "on", "ignoring", "by", "without", "group_left", "group_right", "bool",
    "sum", "max", "min", "avg", "count", "max_over_time", "avg_over_time", "increase", "rate",
    "absent", "time",
}  # fmt: skip


def series_names(expr: str) -> set[str]:
    """The metric names an expression reads: identifiers outside label matchers, ranges and
    grouping lists, less PromQL's keywords and functions."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(?:on|ignoring|by|without)\s*\([^)]*\)", " ", expr)
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", bare))
    return {w for w in words if w not in _NOT_SERIES and not re.fullmatch(r"\d+[smhdwy]", w)}


def test_series_names_are_read_from_expressions() -> None:
    assert series_names('sum by (queue) (a_b{x="y"}[5m]) > on(node) c and absent(up{job="z"})') == {
        "a_b", "c", "up",
    }  # fmt: skip


def test_every_series_the_rules_read_is_exported() -> None:
    recorded = {rule["record"] for rule in _all_rules() if "record" in rule}
    exported = {counter.name for counter in DEFAULT_COUNTERS} | metrics.exported_names() | FOREIGN | recorded
    for rule in _all_rules():
        unknown = series_names(rule["expr"]) - exported
        assert not unknown, (
            f"{rule.get('alert') or rule['record']} reads {sorted(unknown)}, which nothing exports"
        )


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CHART = ROOT / "deploy" / "helm" / "gpufleet"


def test_the_charts_prometheusrule_is_generated_from_the_rules_file() -> None:
    generator = _load(ROOT / "scripts" / "gen-prometheusrule.py")
    shipped = (CHART / "templates" / "prometheusrule.yaml").read_text(encoding="utf-8")
    assert shipped == generator.template(RULES.read_text(encoding="utf-8")), (
        "regenerate with: .venv/bin/python scripts/gen-prometheusrule.py"
    )


def test_the_chart_renders_the_same_groups_when_asked() -> None:
    chart = _load(ROOT / "tests" / "kube" / "helm_subset.py").Chart
    values = values_from({"prometheusRule": {"enabled": True}, "namespace": "gpu"}).as_dict()
    rendered = [o for o in yaml.safe_load_all(chart(CHART, values).render()) if o]
    (rule,) = [o for o in rendered if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "gpu"
    assert rule["spec"] == yaml.safe_load(RULES.read_text(encoding="utf-8"))
    default = [o for o in yaml.safe_load_all(chart(CHART, values_from({}).as_dict()).render()) if o]
    assert not [o for o in default if o["kind"] == "PrometheusRule"]
