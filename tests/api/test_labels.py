from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.api.errors import ValidationError
from gpufleet.api.labels import LabelSelector

LABELS = {"app": "web", "tier": "front", "env": "prod"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("env in (prod, staging)", True),
        ("env notin (prod)", False),
        ("missing notin (x)", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("app=web,env in (dev,prod),!legacy", True),
        ("app=web,tier=back", False),
    ],
)
def test_selector_semantics(selector: str, expected: bool) -> None:
    assert LabelSelector.parse(selector).matches(LABELS) is expected


def test_mapping_means_all_equal() -> None:
    assert LabelSelector.parse({"app": "web", "env": "prod"}).matches(LABELS)
    assert not LabelSelector.parse({"app": "web", "env": "dev"}).matches(LABELS)


@pytest.mark.parametrize("bad", ["app==", "a b", "env in prod", "=x"])
def test_malformed_selectors_are_rejected(bad: str) -> None:
    if bad == "app==":  # `app=` with an empty value is legal in Kubernetes: the label must be ""
        assert LabelSelector.parse(bad).matches({"app": ""})
        return
    with pytest.raises(ValidationError, match="label selector"):
        LabelSelector.parse(bad)


keys = st.sampled_from(["a", "b", "c"])
values = st.sampled_from(["x", "y", "z"])


@given(st.dictionaries(keys, values), st.dictionaries(keys, values))
def test_equality_string_matches_like_the_mapping(labels: dict[str, str], wanted: dict[str, str]) -> None:
    text = ",".join(f"{k}={v}" for k, v in wanted.items())
    assert LabelSelector.parse(text).matches(labels) == LabelSelector.parse(wanted).matches(labels)
    assert LabelSelector.parse(wanted).matches(labels) == all(labels.get(k) == v for k, v in wanted.items())


def test_each_gpufleet_label_name_is_defined_once() -> None:
    """A name defined in two modules can drift apart: the world writing a label and the one reading it
    would no longer agree. Module-level constants naming `gpufleet.io/...` are counted by value."""
    source = Path(__file__).resolve().parents[2] / "src" / "gpufleet"
    defined: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(source.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            name = _gpufleet_name(node)
            if name is not None:
                defined[name].append(str(path.relative_to(source)))
    assert defined["gpufleet.io/capacity-type"] == ["api/labels.py"]
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}


def _gpufleet_name(statement: ast.stmt) -> str | None:
    """The `gpufleet.io/...` string a module-level assignment defines, if it defines one."""
    value = statement.value if isinstance(statement, ast.Assign | ast.AnnAssign) else None
    text = value.value if isinstance(value, ast.Constant) else None
    return text if isinstance(text, str) and text.startswith("gpufleet.io/") else None
