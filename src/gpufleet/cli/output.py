"""How the control commands print objects: tables from the kinds' printer columns, YAML, JSON.

Tables print as kubectl prints them. On a terminal: a table whose rows stay one line each, cut to the
terminal's width. Anywhere else (a pipe, a file): plain columns three spaces apart, the last one not
padded, no colour and nothing wrapped, for `grep`, `awk` and `cut`. In both, a message is cut at
`MESSAGE_WIDTH` characters (`describe` and `-o yaml` show it whole).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from gpufleet.api.errors import ValidationError
from gpufleet.api.resource import GROUP

if TYPE_CHECKING:  # client imports this module to hand over the server's time
    from gpufleet.cli.client import ResourceType

FORMATS = ("table", "wide", "yaml", "json", "name", "jsonpath=TEMPLATE")
"""What `-o` takes on the commands that print objects (`jsonpath=` followed by a template)."""
MESSAGE_WIDTH = 80
"""Characters of a message that a table shows; a longer one is cut, ending in `...`."""
GAP = "   "
"""Between two columns of a plain table (kubectl's three spaces)."""


def console(*, stderr: bool = False) -> Console:
    """A console that wraps at the terminal's width, and neither wraps nor cuts lines when piped."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=not stream.isatty())


def one_line(text: str, width: int | None = MESSAGE_WIDTH) -> str:
    """`text` on one line (line breaks become spaces), cut to `width` characters with `...`."""
    flat = " ".join(text.split())
    if width is None or len(flat) <= width:
        return flat
    return flat[: max(width - 3, 1)].rstrip() + "..."


Cell = str | Text
"""A table cell: plain text (never read as markup: a message may hold brackets), or styled Text."""


class Columns:
    """A table printed as kubectl prints one (see the module docstring).

    `right` names the columns aligned right (numbers); `cut` the columns whose text is cut at
    `MESSAGE_WIDTH` (messages); `indent` goes before every line.
    """

    def __init__(
        self,
        *headers: str,
        header: bool = True,
        title: str | None = None,
        indent: str = "",
        right: Collection[str] = (),
        cut: Collection[str] = ("MESSAGE",),
        styles: dict[str, str] | None = None,
    ) -> None:
        self.headers = list(headers)
        self.header = header
        self.title = title
        self.indent = indent
        self.right = frozenset(right)
        self.cut = frozenset(cut)
        self.styles = styles or {}
        self.rows: list[list[Text]] = []

    def add_row(self, *cells: Cell) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"a row of {len(cells)} cells for {len(self.headers)} columns")
        row = []
        for heading, cell in zip(self.headers, cells, strict=True):
            text = cell.copy() if isinstance(cell, Text) else Text(cell)
            if heading in self.cut and len(text.plain) > MESSAGE_WIDTH:
                text = Text(one_line(text.plain), style=text.style)
            elif "\n" in text.plain:
                text = Text(one_line(text.plain, None), style=text.style)
            row.append(text)
        self.rows.append(row)

    def __len__(self) -> int:
        return len(self.rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        terminal = console.is_terminal
        if self.title:
            yield Text(self.title, style="bold" if terminal else "")
        for line in self._lines(styled=terminal):
            if terminal:  # one line per row: what passes the terminal's width ends in an ellipsis
                line.no_wrap, line.overflow = True, "ellipsis"
                yield line
            else:  # as it is, however long: the console neither wraps nor cuts it
                yield Segment(line.plain)
                yield Segment.line()

    def _lines(self, *, styled: bool) -> list[Text]:
        rows = (
            [[Text(heading, style="bold" if styled else "") for heading in self.headers]]
            if self.header
            else []
        )
        for row in self.rows:
            rows.append([text if styled else Text(text.plain) for text in row])
        for index, heading in enumerate(self.headers):
            if styled and heading in self.styles:
                for row in rows[1 if self.header else 0 :]:
                    row[index].stylize(self.styles[heading])
        widths = [max((cell_len(row[i].plain) for row in rows), default=0) for i in range(len(self.headers))]
        lines = []
        for row in rows:
            line = Text(self.indent)
            for index, (text, width) in enumerate(zip(row, widths, strict=True)):
                pad = " " * (width - cell_len(text.plain))
                if index:
                    line.append(GAP)
                if self.headers[index] in self.right:
                    line.append(pad)
                    line.append_text(text)
                else:
                    line.append_text(text)
                    if index < len(widths) - 1:
                        line.append(pad)
            line.rstrip()
            lines.append(line)
        return lines


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


def server_now() -> datetime:
    """The server's clock as its last answer told it (it may run faster than real time), else ours."""
    return _server_now[0] if _server_now else datetime.now(UTC)


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
    """A printer column's value as text: `-` for none, an age for a date, the length of a list
    for an integer column (`.status.unhealthyGpus`: how many)."""
    if value is None or value == "":
        return "-"
    if column_type == "date":
        return age(str(value))
    if column_type == "integer" and isinstance(value, list):
        return str(len(value))
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value) or "-"  # names (a job's nodes), as kubectl's wide columns list them
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # 2.0 as 2; a float as large as 1e308 stays short (`:g`), below
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e15 else str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def objects_table(
    rtype: ResourceType, items: list[dict[str, Any]], *, namespaces: bool, wide: bool, qualified: bool = False
) -> Columns:
    """A table of objects: NAME (and NAMESPACE), then the kind's printer columns (and, wide, the
    pending reason's message, cut to `MESSAGE_WIDTH`). `qualified` names each object with its kind,
    `trainingjob.gpufleet.io/NAME`, as kubectl does when it lists several kinds."""
    with_namespace = namespaces and rtype.namespaced
    columns = [c for c in rtype.columns if wide or c[3] == 0]
    headers = [*(["NAMESPACE"] if with_namespace else []), "NAME", *(c[0].upper() for c in columns)]
    right = {c[0].upper() for c in columns if c[2] in ("integer", "number")}
    table = Columns(*headers, *(["MESSAGE"] if wide else []), right=right, styles={"NAME": "cyan"})
    for obj in items:
        meta = obj.get("metadata", {})
        row: list[Cell] = [meta.get("namespace", "-")] if with_namespace else []
        row.append(object_name({"kind": rtype.kind, **obj}) if qualified else meta.get("name", "?"))
        row.extend(_styled(_value(rtype, obj, path, kind)) for _, path, kind, _ in columns)
        if wide:
            row.append(cell(lookup(obj, ".status.pendingReason.message"), "string"))
        table.add_row(*row)
    return table


def _value(rtype: ResourceType, obj: dict[str, Any], path: str, column_type: str) -> str:
    """A printer column's cell; a cordoned node's phase reads `Ready,SchedulingDisabled`, as kubectl
    shows a cordoned node's status."""
    text = cell(lookup(obj, path), column_type)
    if rtype.kind == "Node" and path == ".status.phase" and lookup(obj, ".spec.unschedulable") is True:
        return f"{text},SchedulingDisabled"
    return text


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


def _styled(text: str) -> Text:
    return Text(text, style=_PHASE_STYLE.get(text.split(",")[0], ""))


def output_format(output: str, *, allowed: Collection[str] = FORMATS) -> tuple[str, str]:
    """`-o`'s value as (format, argument): `("jsonpath", "{.a}")` for `jsonpath={.a}`, else (`output`, "").

    The template of a jsonpath is checked here, before anything is asked of the server.
    """
    fmt, _, argument = output.partition("=")
    names = [f.partition("=")[0] for f in allowed]
    if fmt not in names or (fmt == "jsonpath") != bool(argument):
        raise ValidationError(f"must be one of {', '.join(allowed)}, got {output!r}", field="--output")
    if fmt == "jsonpath":
        from gpufleet.cli.jsonpath import compile_template

        compile_template(argument)
    return fmt, argument


def object_name(obj: dict[str, Any]) -> str:
    """`trainingjob.gpufleet.io/llm-pretrain`: what `-o name` prints, as kubectl prints a resource."""
    return f"{str(obj.get('kind', '?')).lower()}.{GROUP}/{obj.get('metadata', {}).get('name', '?')}"


def print_objects(items: list[dict[str, Any]], fmt: str, *, single: bool, argument: str = "") -> None:
    """Objects as YAML documents, JSON (the object, or a List), names or a JSONPath template, written
    plainly for programs."""
    if fmt == "name":
        sys.stdout.write("".join(object_name(obj) + "\n" for obj in items))
        return
    if fmt == "jsonpath":
        from gpufleet.cli.jsonpath import render

        data: Any = items[0] if single and items else {"apiVersion": "v1", "kind": "List", "items": items}
        sys.stdout.write(render(argument, data))
        return
    if fmt == "json":
        data = items[0] if single and items else {"apiVersion": "v1", "kind": "List", "items": items}
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
