"""The Grafana dashboards (deploy/grafana, built by src/gpufleet/observability/dashboards.py): the files and
the chart's ConfigMaps are what the builder writes, and every PromQL query (panels and template
variables) parses and reads only series the project exports: the control plane's, the agent's DCGM-style
ones, the recording rules' and Prometheus' own `up`."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from gpufleet.agent.exporter import DEFAULT_COUNTERS
from gpufleet.kube.manifests import values_from
from gpufleet.observability import dashboards, metrics

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "grafana"
CHART = ROOT / "deploy" / "helm" / "gpufleet"
RULES = ROOT / "deploy" / "prometheus" / "gpufleet-rules.yaml"

# Grafana's own variables stand for a duration where they appear in these queries.
GRAFANA_DURATIONS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.DOTALL)


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def exported() -> frozenset[str]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    return frozenset({c.name for c in DEFAULT_COUNTERS} | metrics.exported_names() | recorded | {"up"})


def series_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads, from Prometheus' grammar (promql-parser)."""
    for variable, duration in GRAFANA_DURATIONS.items():
        expr = expr.replace(variable, duration)
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name is None:
                raise AssertionError(f"a selector without a metric name in {expr!r}")
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every label_values() variable."""
    for panel in board["panels"]:
        for target in panel["targets"]:
            yield f"{board['uid']} panel {panel['title']!r}", target["expr"]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            match = LABEL_VALUES.match(var["query"]["query"])
            assert match, f"{board['uid']} variable {var['name']}: only label_values(selector, label)"
            yield f"{board['uid']} variable {var['name']}", match.group(1)


BOARDS = {stem: json.loads((FOLDER / f"gpufleet-{stem}.json").read_text()) for stem in dashboards.DASHBOARDS}


def test_the_files_are_what_the_builder_writes() -> None:
    assert sorted(p.name for p in FOLDER.glob("*.json")) == sorted(
        f"gpufleet-{stem}.json" for stem in dashboards.DASHBOARDS
    )
    for stem in dashboards.DASHBOARDS:
        assert (FOLDER / f"gpufleet-{stem}.json").read_text() == dashboards.render(stem), (
            "regenerate with: .venv/bin/python scripts/gen-dashboards.py"
        )


def test_the_four_dashboards_and_their_variables() -> None:
    assert {b["uid"] for b in BOARDS.values()} == {
        "gpufleet-fleet", "gpufleet-queue", "gpufleet-trainingjob", "gpufleet-node",
    }  # fmt: skip
    variables = {stem: [v["name"] for v in b["templating"]["list"]] for stem, b in BOARDS.items()}
    assert variables == {
        "fleet": ["datasource"],
        "queue": ["datasource", "queue"],
        "trainingjob": ["datasource", "namespace", "trainingjob"],
        "node": ["datasource", "node"],
    }
    for board in BOARDS.values():
        defined = {v["name"] for v in board["templating"]["list"]}
        for where, expr in queries(board):
            used = set(re.findall(r"\$(\w+)", expr)) - {v.lstrip("$") for v in GRAFANA_DURATIONS}
            assert used <= defined, f"{where} uses undefined variables {sorted(used - defined)}"
        # Panels do not overlap in Grafana's 24-column grid.
        cells = set()
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24
            area = {
                (x, y)
                for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])
            }
            assert not cells & area, f"{board['uid']} panel {panel['title']!r} overlaps another"
            cells |= area


def test_every_query_reads_only_exported_series() -> None:
    known = exported()
    seen: set[str] = set()
    for board in BOARDS.values():
        for where, expr in queries(board):
            names = series_names(expr)
            assert names, f"{where} reads no series: {expr}"
            unknown = names - known
            assert not unknown, f"{where} reads {sorted(unknown)}, which nothing exports: {expr}"
            seen |= names
    # The dashboards show the control plane, the recording rules and the agents alike.
    assert "gpufleet_evictions_total" in seen and "queue:gpufleet_gpu_cost:1h" in seen
    assert "DCGM_FI_DEV_XID_ERRORS" in seen


def test_series_names_come_from_the_grammar() -> None:
    expr = (
        'sum by (queue) (rate(a_total{queue="$queue"}[$__rate_interval])) / on(pool) group_left max(x:y:1h)'
        ' and absent(up{job="by"}) + histogram_quantile(0.9, sum by (le) (rate(b_bucket[5m]))) or vector(0)'
    )
    assert series_names(expr) == {"a_total", "x:y:1h", "up", "b_bucket"}
    assert not series_names("time()")
    with pytest.raises(ValueError):
        series_names("sum(rate(a[5m])")


def test_an_unknown_series_is_caught() -> None:
    assert series_names('gpufleet_no_such_metric{queue="a"}') - exported() == {"gpufleet_no_such_metric"}


def test_the_charts_configmaps_carry_the_dashboards_for_the_sidecar() -> None:
    generator = _load(ROOT / "scripts" / "gen-dashboards.py")
    shipped = (CHART / "templates" / "grafana-dashboards.yaml").read_text(encoding="utf-8")
    assert shipped == generator.template(), "regenerate with: .venv/bin/python scripts/gen-dashboards.py"
    chart = _load(ROOT / "tests" / "kube" / "helm_subset.py").Chart
    values = values_from({"grafanaDashboards": {"enabled": True}, "namespace": "gpu"}).as_dict()
    rendered = [o for o in yaml.safe_load_all(chart(CHART, values).render()) if o]
    maps = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "ConfigMap"}
    assert set(maps) == {f"gpufleet-dashboard-{stem}" for stem in dashboards.DASHBOARDS}
    for stem, board in BOARDS.items():
        cm = maps[f"gpufleet-dashboard-{stem}"]
        assert cm["metadata"]["namespace"] == "gpu"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(cm["data"][f"gpufleet-{stem}.json"]) == board
    default = [o for o in yaml.safe_load_all(chart(CHART, values_from({}).as_dict()).render()) if o]
    assert not [
        o
        for o in default
        if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"].get("labels", {})
    ]
