"""`--placement` and `--placement-class`: what the user says wins, and bad names fail before anything runs."""

from __future__ import annotations

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.cli.placement import scheduler_config
from gpufleet.scheduler.config import SchedulerConfig


def test_no_option_leaves_the_built_in_defaults() -> None:
    config = scheduler_config(None, [])
    for workload_class in ("training", "inference", "batch"):
        assert config.policy_for(workload_class) == SchedulerConfig().policy_for(workload_class)


def test_placement_applies_to_every_class_and_a_class_option_wins_over_it() -> None:
    config = scheduler_config("bestfit", ["inference=packing"])
    assert config.policy_for("training") == "bestfit"
    assert config.policy_for("batch") == "bestfit"
    assert config.policy_for("inference") == "packing"


@pytest.mark.parametrize(
    ("placement", "by_class", "option", "words"),
    [
        ("nosuch", [], "--placement", "unknown placement policy 'nosuch'"),
        (None, ["train=fgd+"], "--placement-class", "unknown workload class 'train'"),
        (None, ["training"], "--placement-class", "not CLASS=POLICY"),
        (None, ["training=spread", "training=bestfit"], "--placement-class", "given twice"),
        (None, ["batch=fgd"], "--placement-class", "cannot run in a scheduler"),
    ],
)
def test_bad_names_are_refused_naming_the_option(
    placement: str | None, by_class: list[str], option: str, words: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        scheduler_config(placement, by_class)
    assert raised.value.field == option
    assert words in str(raised.value)
