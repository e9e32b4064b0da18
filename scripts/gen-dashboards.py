#!/usr/bin/env python3
"""Writes gpufleet's Grafana dashboards from their builder (src/gpufleet/observability/dashboards.py):
deploy/grafana/gpufleet-<name>.json, and the Helm chart's ConfigMaps of them for Grafana's dashboard
sidecar. Edit the builder, then run `.venv/bin/python scripts/gen-dashboards.py`
(tests/observability/test_dashboards.py fails while either copy is out of date)."""

from __future__ import annotations

import sys
from pathlib import Path

from gpufleet.observability import dashboards

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "deploy" / "grafana"
TEMPLATE = ROOT / "deploy" / "helm" / "gpufleet" / "templates" / "grafana-dashboards.yaml"

HEAD = """\
{{- if .Values.grafanaDashboards.enabled }}
# Generated from src/gpufleet/observability/dashboards.py by scripts/gen-dashboards.py; edit that file.
"""
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: gpufleet-dashboard-{stem}
  namespace: {{{{ .Values.namespace }}}}
  labels:
    {{{{- include "gpufleet.labels" "dashboards" | nindent 4 }}}}
    grafana_dashboard: "1"
data:
  {file}: |
{body}"""


def file_name(stem: str) -> str:
    return f"gpufleet-{stem}.json"


def template() -> str:
    """The chart's template: one ConfigMap a dashboard, the JSON verbatim in a block scalar."""
    maps = []
    for stem in dashboards.DASHBOARDS:
        text = dashboards.render(stem)
        if "{{" in text:
            raise ValueError(f"dashboard {stem}: '{{{{' would be read by Helm as a template action")
        body = "".join(f"    {line}" for line in text.splitlines(keepends=True))
        maps.append(CONFIGMAP.format(stem=stem, file=file_name(stem), body=body))
    return HEAD + "---\n".join(maps) + "{{- end }}\n"


def main() -> int:
    FOLDER.mkdir(parents=True, exist_ok=True)
    for stem in dashboards.DASHBOARDS:
        (FOLDER / file_name(stem)).write_text(dashboards.render(stem), encoding="utf-8")
    TEMPLATE.write_text(template(), encoding="utf-8")
    print(f"wrote {FOLDER.relative_to(ROOT)}/*.json and {TEMPLATE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
