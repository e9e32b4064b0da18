"""Log setup for the long-running commands (`gpufleet up`, `gpufleet kube scheduler|operator`,
`gpufleet agent`): text for a terminal, one JSON object a line (`--log-format json`) for a log
collector.

Both formats carry the same fields. A record's context is passed with `extra=`:
`log.info("admitted", extra={"workload": "team-a/llm", "queue": "team-a", "cycle": 12})`; the known
fields (`CONTEXT_FIELDS`) are written under those names in every format, in that order, and any
other extra value too (after them), so a collector can filter on `queue` or `trace_id` whatever
logger wrote the line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from gpufleet.api.errors import ValidationError

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")

CONTEXT_FIELDS = ("workload", "queue", "node", "pool", "namespace", "job", "cycle", "trace_id")
"""The context fields every component uses for the same things, in the order they are written."""

# What every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def context(record: logging.LogRecord) -> dict[str, Any]:
    """The record's context fields: the known ones first, in `CONTEXT_FIELDS` order, then the rest
    of its extra values by name."""
    extra = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
    known = {name: extra.pop(name) for name in CONTEXT_FIELDS if name in extra}
    return known | dict(sorted(extra.items()))


class JsonFormatter(logging.Formatter):
    """One JSON object a line: `time` (RFC 3339, UTC), `level`, `logger`, `message`, the context
    fields, and `exception` (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(context(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER: MESSAGE key=value ...`: the same fields as JSON, for a person."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = context(record)
        if not fields:
            return text
        first, newline, rest = text.partition("\n")  # a traceback stays below the line
        pairs = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        return f"{first} {pairs}{newline}{rest}"


def _text_value(value: object) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c.isspace() or c in '"=' for c in text) else text


def formatter(kind: LogFormat) -> logging.Formatter:
    return JsonFormatter() if kind == "json" else TextFormatter()


def setup_logging(
    kind: str = "text", *, level: int | str = logging.INFO, stream: TextIO | None = None
) -> None:
    """Sends the root logger's records, at `level` and above, to `stream` (stderr) in `kind` (`text`
    or `json`), replacing any handler set before (a second call reconfigures rather than doubling
    lines). An unknown format is a `ValidationError` naming `--log-format`."""
    if kind not in FORMATS:
        raise ValidationError(f"expected {' or '.join(FORMATS)}, got {kind!r}", field="--log-format")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(kind))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
