"""A document's shape, checked before its fields wherever it comes from: a file or a request body."""

from __future__ import annotations

import pytest

from gpufleet.api.docshape import MAX_DEPTH, MAX_VALUES, ShapeError, check_shape
from gpufleet.api.documents import load_yaml
from gpufleet.api.errors import ValidationError


def nested(levels: int) -> object:
    value: object = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_an_ordinary_document_passes() -> None:
    check_shape({"spec": {"worker": {"gpus": 8, "cpu": 1.5}, "list": [1, 2, {"a": None}]}}, "doc")


def test_nesting_is_counted_to_the_limit_and_refused_past_it() -> None:
    check_shape({"a": nested(MAX_DEPTH - 1)}, "doc")
    with pytest.raises(ShapeError) as caught:
        check_shape({"a": nested(MAX_DEPTH)}, "doc")
    assert f"nested more than {MAX_DEPTH} levels" in str(caught.value)
    assert caught.value.field is not None and caught.value.field.startswith("a[0][0]")


def test_values_shared_by_aliases_are_counted_each_time_they_are_reached() -> None:
    shared = list(range(1000))
    check_shape([shared] * (MAX_VALUES // 1001 - 1), "doc")
    with pytest.raises(ShapeError, match=f"more than {MAX_VALUES} values"):
        check_shape([shared] * (MAX_VALUES // 1001 + 1), "doc")


def test_a_list_that_holds_itself_is_refused_not_walked_for_ever() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ShapeError, match="nested more than"):
        check_shape(loop, "doc")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinities_are_refused_by_field(value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        check_shape({"spec": {"x": [0, value]}}, "doc")
    assert not isinstance(caught.value, ShapeError)
    assert caught.value.field == "spec.x[1]"
    assert "must be a finite number" in str(caught.value)


def test_load_yaml_reads_one_document_and_checks_it() -> None:
    assert load_yaml("a: 1\nb: [x, y]\n", "f.yaml") == {"a": 1, "b": ["x", "y"]}
    assert load_yaml("", "f.yaml") is None
    with pytest.raises(ValidationError, match=r"f\.yaml: holds 2 YAML documents"):
        load_yaml("a: 1\n---\nb: 2\n", "f.yaml")
    with pytest.raises(ValidationError, match=r"f\.yaml: not valid YAML"):
        load_yaml("a: [1\n", "f.yaml")
    with pytest.raises(ShapeError, match=r"f\.yaml: not read: values are nested more than"):
        load_yaml("a: " + "[" * 5000 + "]" * 5000, "f.yaml")
    with pytest.raises(ValidationError, match=r"f\.yaml: field a: must be a finite number"):
        load_yaml("a: .inf\n", "f.yaml")
