"""Multi-document YAML in and out.

Loading is all-or-nothing: if any document is malformed or invalid, nothing is returned, so a
caller that applies the objects never applies half a file. An error about a field of a file names the
file and the line of that field (`pool.yaml:6: GPUPool p1: field spec.gpusPerNode: ...`): each document
is kept as PyYAML's composed node tree, whose nodes carry their line, and the error's field path is
followed down that tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml

from gpufleet.api.docshape import MAX_DEPTH, ShapeError, check_shape
from gpufleet.api.errors import ValidationError
from gpufleet.api.resource import Resource
from gpufleet.api.text import decode_text as decode_text  # re-exported: where readers look for them
from gpufleet.api.text import read_text as read_text
from gpufleet.api.text import yaml_problem as yaml_problem
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
        text, origin = read_text(source), str(source)
    documents = compose_documents(text, origin)
    objects: list[Resource] = []
    for index, (document, node) in enumerate(documents, start=1):
        if document is None:
            continue
        where = f"{origin} document {index}" if origin else f"document {index}"
        try:
            check_shape(document, f"document {index}")
            objects.append(parse_object(document, priority_classes=priority_classes, where=where))
        except ValidationError as exc:
            if origin is None:
                raise
            raise locate_error(exc, source=origin, node=node) from None
    return objects


def compose_documents(text: str, source: str | None = None) -> list[tuple[Any, yaml.Node | None]]:
    """Every document of a YAML text as (plain Python data, its node tree with line marks). A text that
    is not YAML, or nests deeper than Python reads (thousands of levels), is a ValidationError naming
    `source`; each document's shape is for the caller to check (`docshape.check_shape`)."""
    try:
        return list(_compose(text))
    except yaml.YAMLError as exc:
        raise ValidationError(f"not valid YAML: {yaml_problem(exc)}", obj=source) from None
    except RecursionError:
        raise ShapeError(
            f"not read: values are nested more than {MAX_DEPTH} levels deep", obj=source
        ) from None


def load_yaml(text: str, source: str) -> Any:
    """The one YAML document of `text` as plain data (None for an empty text), its shape checked
    (`docshape.check_shape`): a text that is not YAML, holds several documents, nests too deep, stands
    for too many values or holds a NaN is a ValidationError naming `source`."""
    documents = compose_documents(text, source)
    if len(documents) > 1:
        raise ValidationError(f"holds {len(documents)} YAML documents where one is read", obj=source)
    data = documents[0][0] if documents else None
    check_shape(data, source)
    return data


def _compose(text: str) -> Iterator[tuple[Any, yaml.Node | None]]:
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            yield (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def field_line(node: yaml.Node | None, field: str) -> int | None:
    """The 1-based line of a field path such as `spec.nodes[0].gpuModel` in a document's node tree.

    A path that leaves the tree (a missing field) gives the line of the deepest part that is there.
    """
    if node is None:
        return None
    line = node.start_mark.line + 1
    for match in _PATH_PART.finditer(field):
        key, index = match.group(1), match.group(2)
        if isinstance(node, yaml.MappingNode):
            name = key if key is not None else index
            found = next(((k, v) for k, v in node.value if str(k.value) == name), None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and index is not None and int(index) < len(node.value):
            node = node.value[int(index)]
            line = node.start_mark.line + 1
        else:
            break
    return line


def locate_error(exc: ValidationError, *, source: str, node: yaml.Node | None) -> ValidationError:
    """`exc` with the file and, when it names a field, the field's line put in front of its object."""
    line = field_line(node, exc.field) if exc.field else None
    where = f"{source}:{line}" if line is not None else source
    if exc.obj == source:
        obj = where
    elif exc.obj:
        obj = f"{where}: {exc.obj}"
    else:
        # An error about the document as a whole already names the file in its message.
        return exc
    return ValidationError(exc.detail, obj=obj, field=exc.field)


def dump_objects(objects: Iterable[Resource]) -> str:
    """Objects as multi-document YAML, in the field order of the models, unset fields left out."""
    return yaml.safe_dump_all(
        [obj.to_dict() for obj in objects], sort_keys=False, default_flow_style=False, explicit_start=True
    )
