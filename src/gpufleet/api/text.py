"""Reading a user's file as text, and saying what is wrong with its YAML, in one line naming it.

Apart from `documents` (which turns the text into objects) so that a command that reads a kubeconfig
or a profile needs neither the API's models nor their validation.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from gpufleet.api.errors import ValidationError

__all__ = ["decode_text", "read_text", "yaml_problem"]


def read_text(path: str | os.PathLike[str]) -> str:
    """The text of a UTF-8 file; one that cannot be read, or is not UTF-8, is a ValidationError naming it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read: {exc.strerror}", obj=str(path)) from None
    return decode_text(raw, str(path))


def decode_text(raw: bytes, source: str) -> str:
    """`raw` as UTF-8 text; bytes that are not UTF-8 are a ValidationError naming `source` and the byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValidationError(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line} (offset {exc.start}); "
            "save the file as UTF-8",
            obj=source,
        ) from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML parser's error as one line: the problem and where it is."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return str(exc)
