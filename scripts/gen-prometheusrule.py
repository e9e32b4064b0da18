#!/usr/bin/env python3
"""Writes the Helm chart's PrometheusRule template from the plain rules file, so the alert rules have one
source: edit deploy/prometheus/gpufleet-rules.yaml, then run `.venv/bin/python scripts/gen-prometheusrule.py`
(tests/observability/test_alert_rules.py fails while the template is out of date)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "gpufleet-rules.yaml"
TEMPLATE = ROOT / "deploy" / "helm" / "gpufleet" / "templates" / "prometheusrule.yaml"

HEAD = """\
{{- if .Values.prometheusRule.enabled }}
# Generated from deploy/prometheus/gpufleet-rules.yaml by scripts/gen-prometheusrule.py; edit that file.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gpufleet
  namespace: {{ .Values.namespace }}
  labels:
    {{- include "gpufleet.labels" "alerts" | nindent 4 }}
spec:
"""


def template(rules: str) -> str:
    """The template: the rules file's `groups:` and what follows, verbatim, under the object's spec."""
    if "{{" in rules:
        raise ValueError(f"{RULES}: '{{{{' would be read by Helm as a template action")
    start = rules.index("\ngroups:") + 1
    body = "".join(f"  {line}" if line.strip() else line for line in rules[start:].splitlines(keepends=True))
    return HEAD + body + "{{- end }}\n"


def main() -> int:
    TEMPLATE.write_text(template(RULES.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {TEMPLATE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
