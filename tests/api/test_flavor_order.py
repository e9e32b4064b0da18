"""A Queue's `flavorOrder`: the order its flavors are tried, checked against its quotas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.api import parse_object
from gpufleet.api.errors import ValidationError
from gpufleet.api.queue import Queue
from gpufleet.controllers.convert import quota_tree
from gpufleet.sim.scenario import load_file


def queue(name: str = "q", **spec: object) -> dict:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {
            "quotas": {
                "A100-80GB": {"nominal": 8},
                "H100-80GB/on-demand": {"nominal": 8},
                "H100-80GB/spot": {"nominal": 16},
            },
            **spec,
        },
    }


def test_flavor_order_is_read_camel_case_and_written_back() -> None:
    order = ["H100-80GB/spot", "H100-80GB/on-demand", "A100-80GB"]
    parsed = parse_object(queue(flavorOrder=order))
    assert isinstance(parsed, Queue)
    assert parsed.spec.flavor_order == order
    assert parsed.to_dict()["spec"]["flavorOrder"] == order
    assert "flavorOrder" not in parse_object(queue()).to_dict()["spec"]


@pytest.mark.parametrize(
    ("order", "message"),
    [
        (["H100-80GB/spot", "H100-80GB/on-demand", "A100-80GB", "B200"], "flavor 'B200' has no quota"),
        (
            ["H100-80GB/spot", "H100-80GB/spot", "H100-80GB/on-demand", "A100-80GB"],
            "'H100-80GB/spot' is listed more than once",
        ),
        (["H100-80GB/spot", "A100-80GB"], "flavor 'H100-80GB/on-demand' of quotas is missing"),
    ],
)
def test_a_flavor_order_that_is_not_the_quotas_flavors_is_refused(order: list[str], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_object(queue(flavorOrder=order))
    text = str(caught.value)
    assert "Queue q: field spec.flavorOrder:" in text and message in text


def test_the_quota_tree_tries_flavors_in_flavor_order_else_in_key_order() -> None:
    order = ["H100-80GB/spot", "A100-80GB", "H100-80GB/on-demand"]
    ordered = parse_object(queue("ordered", flavorOrder=order))
    plain = parse_object(queue("plain"))
    assert isinstance(ordered, Queue) and isinstance(plain, Queue)
    tree, _ = quota_tree([ordered, plain])
    assert list(tree.nodes["ordered"].quotas) == order
    assert list(tree.nodes["plain"].quotas) == ["A100-80GB", "H100-80GB/on-demand", "H100-80GB/spot"]
    assert tree.nodes["ordered"].quotas["H100-80GB/spot"].nominal == 16_000


def test_a_scenario_queue_takes_flavor_order_and_refuses_a_wrong_one(tmp_path: Path) -> None:
    scenario = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "order"},
        "spec": {
            "queues": [{"name": "q", **queue(flavorOrder=["A100-80GB", "H100-80GB/spot"])["spec"]}],
            "submit": [{"name": "w", "queue": "q", "podSets": [{"gpus": 1}]}],
            "expect": {"admitted": ["w"]},
        },
    }
    path = tmp_path / "order.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    with pytest.raises(
        ValidationError, match=r"spec\.queues\[0\]\.flavorOrder: flavor 'H100-80GB/on-demand'"
    ):
        load_file(path)
    scenario["spec"]["queues"][0]["flavorOrder"].insert(0, "H100-80GB/on-demand")
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    (loaded,) = load_file(path)
    queue_spec = loaded.scenario.spec.queues[0]
    assert [f for f, _ in queue_spec.ordered_quotas()] == [
        "H100-80GB/on-demand",
        "A100-80GB",
        "H100-80GB/spot",
    ]
