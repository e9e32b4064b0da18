"""Multi-document YAML in and out.

Loading is all-or-nothing: if any document is malformed or invalid, nothing is returned, so a
caller that applies the objects never applies half a file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from gpufleet.api.errors import ValidationError
from gpufleet.api.resource import Resource
from gpufleet.api.validation import parse_object


def load_objects(
    source: str | os.PathLike[str], *, priority_classes: Mapping[str, int] | None = None
) -> list[Resource]:
    """Every object of a multi-document YAML text, or of a file when given a `Path`.

    A plain `str` is YAML text; pass `Path(...)` to read a file. Empty documents are skipped.
    Raises `ValidationError` naming the document (1-based) or the object and field at fault.
    """
    if isinstance(source, str):
        text, origin = source, None
    else:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValidationError(f"cannot read: {exc.strerror}", obj=str(path)) from None
        origin = str(path)
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ValidationError(f"not valid YAML: {_yaml_problem(exc)}", obj=origin) from None
    objects: list[Resource] = []
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue
        where = f"{origin} document {index}" if origin else f"document {index}"
        objects.append(parse_object(document, priority_classes=priority_classes, where=where))
    return objects


def dump_objects(objects: Iterable[Resource]) -> str:
    """Objects as multi-document YAML, in the field order of the models, unset fields left out."""
    return yaml.safe_dump_all(
        [obj.to_dict() for obj in objects], sort_keys=False, default_flow_style=False, explicit_start=True
    )


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return str(exc)
