"""How the control commands print objects: tables from the kinds' printer columns, YAML, JSON."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # client imports this module to hand over the server's time
    from gpufleet.cli.client import ResourceType

FORMATS = ("table", "wide", "yaml", "json")
PIPE_WIDTH = 240
"""Columns of output that goes to a file or a pipe, where no terminal says how wide it is."""


def console(*, stderr: bool = False) -> Console:
    """A console that wraps at the terminal's width, and not at 80 columns when piped."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, width=width, emoji=False)


def lookup(obj: Any, json_path: str) -> Any:
    """The value at a printer column's path such as `.status.pendingReason.type`, or None."""
    value = obj
    for part in json_path.strip(".").split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


_server_now: list[datetime] = []


def set_server_time(value: str | None) -> None:
    """Remembers the server's clock (it may run faster than real time) for `age`."""
    if not value:
        return
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return
    _server_now[:] = [parsed]


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """`3d4h`, `12m`, `40s`: how long ago, kubectl-style, by the server's clock when it told it."""
    now = now or (_server_now[0] if _server_now else None)
    if not timestamp:
        return "-"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours and days < 10 else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes and hours < 10 else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs and minutes < 10 else f"{minutes}m"
    return f"{secs}s"


def cell(value: Any, column_type: str) -> str:
    if value is None or value == "":
        return "-"
    if column_type == "date":
        return age(str(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def objects_table(rtype: ResourceType, items: list[dict[str, Any]], *, namespaces: bool, wide: bool) -> Table:
    """A table of objects: NAME (and NAMESPACE), then the kind's printer columns."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    if namespaces and rtype.namespaced:
        table.add_column("NAMESPACE")
    table.add_column("NAME", style="cyan", no_wrap=True)
    columns = [c for c in rtype.columns if wide or c[3] == 0]
    for name, _, _, _ in columns:
        table.add_column(name.upper())
    if wide:
        table.add_column("MESSAGE", overflow="fold")
    for obj in items:
        meta = obj.get("metadata", {})
        row = [meta.get("namespace", "-")] if namespaces and rtype.namespaced else []
        row.append(meta.get("name", "?"))
        row.extend(_styled(cell(lookup(obj, path), kind)) for _, path, kind, _ in columns)
        if wide:
            row.append(cell(lookup(obj, ".status.pendingReason.message"), "string"))
        table.add_row(*row)
    return table


_PHASE_STYLE = {
    "Running": "green",
    "Succeeded": "green",
    "Ready": "green",
    "Complete": "green",
    "Admitted": "blue",
    "Pending": "yellow",
    "Failed": "red",
    "NotReady": "red",
}


def _styled(text: str) -> str:
    style = _PHASE_STYLE.get(text)
    return f"[{style}]{text}[/]" if style else text


def print_objects(items: list[dict[str, Any]], fmt: str, *, single: bool) -> None:
    """Objects as YAML documents or as JSON (the object, or a List), written plainly for programs."""
    if fmt == "json":
        data: Any = items[0] if single and items else {"apiVersion": "v1", "kind": "List", "items": items}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(
            yaml.safe_dump_all(items, sort_keys=False, default_flow_style=False, explicit_start=True)
        )


def print_figures(
    title: str, figures: dict[str, Any], *, as_json: bool, extra: dict[str, str] | None = None
) -> None:
    """A benchmark's result: one JSON object, or a two-column table (a figure not measured reads n/a)."""
    if as_json:
        print(json.dumps(figures))
        return
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, "n/a" if value is None else str(value))
    for key, value in (extra or {}).items():
        table.add_row(key, value)
    Console().print(table)
