"""Malformed scenarios fail with the file and the field, before anything runs."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.sim.scenario import load_scenarios, run_scenario

GOOD = """\
apiVersion: gpufleet.io/v1alpha1
kind: Scenario
metadata: {name: s}
spec:
  nodes: [{name: n1, gpus: 8, gpuModel: H100-80GB}]
  queues:
    - {name: root}
    - {name: a, parent: root, quotas: {H100-80GB: {nominal: 4}}}
  running:
    - {name: r, queue: a, podSets: [{gpus: 1}], nodes: [n1]}
  submit:
    - {name: w, queue: a, podSets: [{gpus: 1}]}
  expect: {admitted: [w]}
"""


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("parent: root", "parent: nope", "spec.queues[1].parent", "unknown queue 'nope'"),
        ("{name: w, queue: a,", "{name: w, queue: b,", "spec.submit[0].queue", "unknown queue 'b'"),
        ("nodes: [n1]", "nodes: [n9]", "spec.running[0].nodes[0]", "unknown node 'n9'"),
        (
            "{gpus: 1}], nodes",
            "{gpus: 1, gpuz: 2}], nodes",
            "spec.running[0].podSets[0].gpuz",
            "unknown field",
        ),
        ("gpuModel: H100-80GB}", "gpuModel: H100-80GB, memory: 12Qi}", "spec.nodes[0].memory", "unit"),
        ("admitted: [w]", "admitted: [zz]", "spec.expect.admitted", "unknown workload 'zz'"),
        ("{name: w, queue: a,", "{name: w, queue: root,", "spec.submit[0].queue", "not a leaf"),
        (
            "spec:\n",
            "spec:\n  scheduler: {placementByClass: {inference: spreed}}\n",
            "spec.scheduler.placementByClass.inference",
            "unknown placement policy 'spreed'",
        ),
        (
            "spec:\n",
            "spec:\n  scheduler: {placementByClass: {serving: spread}}\n",
            "spec.scheduler.placementByClass.serving",
            "",
        ),
        (
            "{name: w, queue: a,",
            "{name: w, workloadClass: web, queue: a,",
            "spec.submit[0].workloadClass",
            "",
        ),
    ],
)
def test_errors_name_file_and_field(tmp_path: Path, old: str, new: str, field: str, words: str) -> None:
    assert old in GOOD
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(old, new))
    (tmp_path / "good.yaml").write_text(GOOD.replace("name: s}", "name: other}"))
    with pytest.raises(ValidationError) as err:
        load_scenarios([tmp_path])
    message = str(err.value)
    assert re.search(rf"{re.escape(str(path))}:\d+: ", message), message
    assert field in message
    assert words in message


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        ("parent: root", "parent: nope", 8),  # a reference, checked after parsing
        ("nodes: [n1]", "nodes: [n9]", 10),
        ("gpuModel: H100-80GB}", "gpuModel: H900-80GB}", 5),  # a field's own check
        ("admitted: [w]", "admitted: [zz]", 13),
    ],
)
def test_errors_give_the_line_of_the_field(tmp_path: Path, old: str, new: str, line: int) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(ValidationError) as err:
        load_scenarios([path])
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)


def test_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    assert [item.name for item in load_scenarios([path])] == ["s"]


def test_a_scenario_whose_scheduler_raises_fails_whatever_it_expects(
    tmp_path: Path, placement_bug: Callable[[Callable[[str], bool]], dict[str, bool]]
) -> None:
    # The workload it raised on waits with `SchedulingError` and the others start, as in every world;
    # a scenario that expects nothing of it must still not pass over a bug.
    path = tmp_path / "s.yaml"
    path.write_text(
        "apiVersion: gpufleet.io/v1alpha1\nkind: Scenario\nmetadata: {name: s}\n"
        "spec:\n  nodes: [{name: n1, gpus: 8, gpuModel: H100-80GB}]\n"
        "  queues: [{name: q, quotas: {H100-80GB: {nominal: 8}}}]\n"
        "  submit:\n    - {name: a, queue: q, podSets: [{gpus: 2}]}\n"
        "    - {name: bad, queue: q, podSets: [{gpus: 2}]}\n"
        "  expect: {admitted: [a]}\n"
    )
    placement_bug(lambda name: name == "bad")
    (item,) = load_scenarios([path])
    outcome = run_scenario(item)
    assert not outcome.passed
    assert outcome.failures == ["the scheduler raised on bad: OverflowError: a number placement cannot take"]
