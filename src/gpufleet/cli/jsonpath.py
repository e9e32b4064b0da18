"""kubectl's JSONPath templates for `-o jsonpath=...` and paths for `--sort-by`.

A template is text with expressions in braces, as kubectl writes them:
`{.items[*].metadata.name}`, `{.status.conditions[?(@.type=="Admitted")].status}`,
`{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}`. The expressions are evaluated by
jsonpath-ng (its extended parser, for filters); this module reads the template around them: literal
text, quoted strings (`{"\\n"}`), and `{range EXPR}...{end}` blocks, which may nest. As in kubectl,
several results of one expression print separated by a space, strings as they are and anything else
as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext.parser import parse

from gpufleet.api.errors import ValidationError

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


@dataclass
class _Block:
    """A `{range}` block (or the template itself): what it iterates over and what it prints."""

    over: JSONPath | None
    parts: list[str | JSONPath | _Block] = field(default_factory=list)


def compile_path(expression: str, *, option: str = "-o jsonpath") -> JSONPath:
    """A kubectl path (`.status.phase`, `{.status.phase}`, `$.a[0]`) as a jsonpath-ng expression."""
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("."):
        text = "$" + text
    elif text.startswith("@."):
        text = "@" + text[1:]
    try:
        return parse(text)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:  # it raises plain ones too
        raise ValidationError(f"not a JSONPath expression {expression!r}: {exc}", field=option) from None


def _tokens(template: str) -> list[tuple[str, str]]:
    """("text", ...) and ("expr", ...) pieces of a template; braces inside quotes do not count."""
    pieces: list[tuple[str, str]] = []
    index = 0
    while index < len(template):
        start = template.find("{", index)
        if start < 0:
            pieces.append(("text", template[index:]))
            break
        if start > index:
            pieces.append(("text", template[index:start]))
        depth, quote, end = 0, False, start
        while end < len(template):
            char = template[end]
            if char == '"' and template[end - 1] != "\\":
                quote = not quote
            elif not quote and char in "{}":
                depth += 1 if char == "{" else -1
                if depth == 0:
                    break
            end += 1
        if end >= len(template):
            raise ValidationError(
                f"unclosed '{{' at character {start + 1} of {template!r}", field="-o jsonpath"
            )
        pieces.append(("expr", template[start + 1 : end].strip()))
        index = end + 1
    return pieces


def _literal(text: str) -> str:
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            index += 1
            out.append(_ESCAPES.get(text[index], "\\" + text[index]))
        else:
            out.append(char)
        index += 1
    return "".join(out)


def compile_template(template: str) -> _Block:
    """The template's parts, `{range}` blocks nested; unbalanced `{end}`s are errors."""
    root = _Block(None)
    stack = [root]
    for kind, text in _tokens(template):
        if kind == "text":
            stack[-1].parts.append(text)
        elif text.startswith('"') and text.endswith('"') and len(text) >= 2:
            stack[-1].parts.append(_literal(text[1:-1]))
        elif text == "end":
            if len(stack) == 1:
                raise ValidationError(f"{{end}} without {{range}} in {template!r}", field="-o jsonpath")
            stack.pop()
        elif text.startswith("range ") or text == "range":
            block = _Block(compile_path(text[len("range") :].strip() or "@"))
            stack[-1].parts.append(block)
            stack.append(block)
        elif not text:
            raise ValidationError(f"an empty {{}} in {template!r}", field="-o jsonpath")
        else:
            stack[-1].parts.append(compile_path(text))
    if len(stack) > 1:
        raise ValidationError(f"{{range}} without {{end}} in {template!r}", field="-o jsonpath")
    return root


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _render(block: _Block, data: Any, out: list[str]) -> None:
    for part in block.parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, _Block):
            assert part.over is not None
            matches = part.over.find(data)
            # `{range .items}` walks the list; `{range .items[*]}` each match
            one_list = len(matches) == 1 and isinstance(matches[0].value, list)
            for item in matches[0].value if one_list else [match.value for match in matches]:
                _render(_Block(None, part.parts), item, out)
        else:
            out.append(" ".join(_text(match.value) for match in part.find(data)))


def render(template: str, data: Any) -> str:
    """The template filled in from `data` (an object, or a List of them)."""
    out: list[str] = []
    _render(compile_template(template), data, out)
    return "".join(out)


def first(path: JSONPath, obj: Any) -> Any:
    """The first value `path` finds in `obj`, or None."""
    found = path.find(obj)
    return found[0].value if found else None
