"""A renderer for the small part of Helm's template language the gpufleet chart uses.

There is no helm binary on the build machines; this renders `deploy/helm/gpufleet/templates` so a
test can hold the chart and `gpufleet manifests all` to the same objects. Supported: `{{ .Values.x }}`,
`{{ $.Values.x }}`, `{{ . }}`, `include "name" ARG`, `toYaml ARG`, `| nindent N`, `if/else`, `range`,
`with`, `define`, and `{{-`/`-}}` whitespace trimming. Anything else fails loudly, so the chart cannot
quietly use more.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.DOTALL)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    trim_next = False
    for match in _ACTION.finditer(text):
        chunk = text[pos : match.start()]
        if trim_next:
            chunk = chunk.lstrip()
        if match.group(1):
            chunk = chunk.rstrip()
        out.append(("text", chunk))
        out.append(("action", match.group(2)))
        trim_next = bool(match.group(3))
        pos = match.end()
    tail = text[pos:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def _parse(
    tokens: list[tuple[str, str]], i: int, defines: dict[str, list[Any]]
) -> tuple[list[Any], int, str]:
    nodes: list[Any] = []
    while i < len(tokens):
        kind, value = tokens[i]
        i += 1
        if kind == "text":
            nodes.append(("text", value))
            continue
        word = value.split()[0] if value else ""
        if word in ("end", "else"):
            return nodes, i, word
        if word in ("if", "range", "with"):
            body, i, stop = _parse(tokens, i, defines)
            other: list[Any] = []
            if stop == "else":
                other, i, _ = _parse(tokens, i, defines)
            nodes.append((word, value[len(word) :].strip(), body, other))
        elif word == "define":
            body, i, _ = _parse(tokens, i, defines)
            defines[value.split('"')[1]] = body
        else:
            nodes.append(("expr", value))
    return nodes, i, ""


class Chart:
    def __init__(self, path: Path, values: dict[str, Any]) -> None:
        self.path = path
        self.root = {"Values": values}
        self.defines: dict[str, list[Any]] = {}
        for helper in sorted((path / "templates").glob("_*.tpl")):
            _parse(_tokens(helper.read_text()), 0, self.defines)

    def render(self) -> str:
        docs = []
        for template in sorted((self.path / "templates").glob("*.yaml")):
            nodes, _, _ = _parse(_tokens(template.read_text()), 0, self.defines)
            docs.append(self._run(nodes, self.root))
        return "\n---\n".join(docs)

    def _run(self, nodes: list[Any], dot: Any) -> str:
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "expr":
                out.append(self._stringify(self._pipeline(node[1], dot)))
            elif kind == "if":
                out.append(self._run(node[2] if self._arg(node[1], dot) else node[3], dot))
            elif kind == "with":
                value = self._arg(node[1], dot)
                out.append(self._run(node[2], value) if value else self._run(node[3], dot))
            elif kind == "range":
                out.append("".join(self._run(node[2], item) for item in self._arg(node[1], dot) or []))
        return "".join(out)

    def _pipeline(self, text: str, dot: Any) -> Any:
        stages = [s.strip() for s in text.split("|")]
        value = self._command(stages[0], dot)
        for stage in stages[1:]:
            name, *args = stage.split()
            if name == "nindent":
                pad = " " * int(args[0])
                value = "\n" + "\n".join(pad + line if line else line for line in str(value).split("\n"))
            else:
                raise ValueError(f"unsupported template function {name!r}")
        return value

    def _command(self, text: str, dot: Any) -> Any:
        if text.startswith("include "):
            name = text.split('"')[1]
            arg = text.split('"', 2)[2].strip()
            return self._run(self.defines[name], self._arg(arg, dot)).strip("\n")
        if text.startswith("toYaml "):
            value = self._arg(text[len("toYaml ") :], dot)
            return yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip("\n")
        return self._arg(text, dot)

    def _arg(self, text: str, dot: Any) -> Any:
        text = text.strip()
        if text == ".":
            return dot
        if text.startswith('"'):
            return text.strip('"')
        if text.startswith((".Values", "$.Values")):  # `$` is the root, also inside range and with
            value: Any = self.root
            for part in text.lstrip("$")[1:].split("."):
                value = value[part]
            return value
        raise ValueError(f"unsupported template expression {text!r}")

    @staticmethod
    def _stringify(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
