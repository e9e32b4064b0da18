from __future__ import annotations

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
