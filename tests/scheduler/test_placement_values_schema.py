"""The chart's values.schema.json, which helm applies to the values before rendering: a placement choice
the scheduler would refuse at start is refused at `helm install`, with the scheduler's own names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpufleet.api.errors import ValidationError
from gpufleet.scheduler.config import WORKLOAD_CLASSES
from gpufleet.scheduler.placement.policies import POLICY_NAMES
from gpufleet.scheduler.policy_choice import check_policy

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpufleet"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
PLACEMENT = SCHEMA["properties"]["scheduler"]["properties"]


def runnable_policies() -> list[str]:
    """The registered policies a live scheduler can build (fgd needs a benchmark's typical workload)."""
    names = []
    for name in POLICY_NAMES:
        try:
            check_policy(name, field="placement")
        except ValidationError:
            continue
        names.append(name)
    return names


def with_scheduler(**scheduler: Any) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    values["scheduler"].update(scheduler)
    return values


def test_the_schema_names_the_policies_and_classes_the_scheduler_takes() -> None:
    names = runnable_policies()
    assert "fgd+" in names and "fgd" not in names
    assert PLACEMENT["placement"]["enum"] == ["", *names]
    pattern = PLACEMENT["placementByClass"]["items"]["pattern"]
    classes, policies = re.fullmatch(r"\^\((.*)\)=\((.*)\)\$", pattern).groups()  # type: ignore[union-attr]
    assert classes.split("|") == list(WORKLOAD_CLASSES)
    assert [re.sub(r"\\(.)", r"\1", p) for p in policies.split("|")] == names


def test_the_default_values_and_good_choices_pass() -> None:
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), SCHEMA)
    good = with_scheduler(placement="bestfit", placementByClass=["inference=packing", "training=fgd+"])
    jsonschema.validate(good, SCHEMA)


@pytest.mark.parametrize(
    "scheduler",
    [
        {"placement": "bestfitt"},  # a typo
        {"placement": "fgd"},  # needs a typical workload only a benchmark gives
        {"placementByClass": {"inference": "packing"}},  # the map form
        {"placementByClass": ["inference=packin"]},
        {"placementByClass": ["serving=spread"]},
        {"placementByClass": ["inference"]},
    ],
)
def test_a_choice_the_scheduler_would_refuse_is_refused_by_the_schema(scheduler: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(with_scheduler(**scheduler), SCHEMA)


def test_the_rest_of_the_values_is_left_to_the_chart() -> None:
    values = with_scheduler(extra={"anything": 1})
    values["newTopLevel"] = [1, 2]
    jsonschema.validate(values, SCHEMA)
