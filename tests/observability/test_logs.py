"""Structured logs: the same context fields in text and in JSON."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.observability.logs import JsonFormatter, TextFormatter, setup_logging


def _record(msg: str = "admitted %s", *args: object, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("gpufleet.test")
    return logger.makeRecord(
        "gpufleet.test", logging.INFO, __file__, 1, msg, args or ("llm",), None, extra=extra
    )


def test_json_is_one_object_a_line_with_the_context_fields_in_order() -> None:
    record = _record(cycle=7, queue="team-a", workload="team-a/llm", trace_id="abc", attempt=2)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "admitted llm"
    assert entry["level"] == "INFO"
    assert entry["logger"] == "gpufleet.test"
    assert entry["time"].endswith("+00:00")
    assert list(entry)[4:] == ["workload", "queue", "cycle", "trace_id", "attempt"]
    assert entry["cycle"] == 7


def test_json_carries_the_traceback_in_one_field() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        info = sys.exc_info()
    record = logging.getLogger("x").makeRecord("x", logging.ERROR, __file__, 1, "failed", (), info)
    entry = json.loads(JsonFormatter().format(record))
    assert "RuntimeError: boom" in entry["exception"]


def test_text_puts_the_same_fields_after_the_message() -> None:
    line = TextFormatter().format(_record(queue="team a", node="n1"))
    assert " INFO gpufleet.test: admitted llm " in line
    assert line.endswith('queue="team a" node=n1')  # CONTEXT_FIELDS order, a space quoted


def test_setup_replaces_the_handlers_and_refuses_an_unknown_format() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        out = io.StringIO()
        setup_logging("json", level=logging.DEBUG, stream=out)
        setup_logging("json", level=logging.DEBUG, stream=out)
        logging.getLogger("gpufleet.test").debug("once", extra={"node": "n1"})
        lines = out.getvalue().splitlines()
        assert len(lines) == 1
        assert json.loads(lines[0])["node"] == "n1"
        with pytest.raises(ValidationError, match="json"):
            setup_logging("xml")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
