"""A pending reason (`status.pendingReason`) in words, as people read it.

`gpufleet describe` prints it and the web console shows it; both take the lines from here, so a team
reads the same explanation wherever it looks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


def pending_lines(reason: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The reason's type, and the lines under it: its message, then its details (indented YAML)."""
    lines: list[str] = []
    if reason.get("message"):
        lines.append(f"  {reason['message']}")
    details = reason.get("details") or {}
    if details:
        lines.extend(indented(details).splitlines())
    return str(reason.get("type")), lines


def indented(data: Any) -> str:
    """`data` as block YAML, every line indented by two spaces."""
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip("\n")
    return "\n".join("  " + line for line in text.splitlines())
