"""Required node affinity in the placement filter: NodeSelector terms over node names and labels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic
import pytest
from placement_builders import FirstFit, fleet, gpus, node, workload

from gpufleet.api.dra_devices import NodeSelector
from gpufleet.api.validation import translate_error
from gpufleet.fleet.request import PodRequest, all_of, node_selector_matches
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.placement.filters import NODE_AFFINITY, filter_nodes, static_mask


def affinity(*terms: dict[str, Any]) -> NodeSelector:
    return NodeSelector.model_validate({"nodeSelectorTerms": list(terms)})


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def named(operator: str, name: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": operator, "values": [name]}]}


def zones() -> FleetState:
    return fleet(
        node("a0", labels={"zone": "a", "tier": "3"}),
        node("a1", labels={"zone": "a", "tier": "7"}),
        node("b0", labels={"zone": "b", "tier": "5"}),
        node("bare"),  # no labels at all
    )


def feasible(state: FleetState, request: PodRequest) -> list[str]:
    return [state.specs[row].name for row in filter_nodes(state, request).rows]


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ((expr("zone", "In", "b"),), ["b0"]),
        ((expr("zone", "In", "a", "b"),), ["a0", "a1", "b0"]),
        # A node without the label satisfies NotIn and DoesNotExist, as in Kubernetes.
        ((expr("zone", "NotIn", "a"),), ["b0", "bare"]),
        ((expr("zone", "DoesNotExist"),), ["bare"]),
        ((expr("zone", "Exists"),), ["a0", "a1", "b0"]),
        ((expr("tier", "Gt", "4"),), ["a1", "b0"]),
        ((expr("tier", "Lt", "4"),), ["a0"]),
        # Terms are ORed; the requirements of one term are ANDed.
        ((expr("zone", "In", "b"), expr("tier", "Lt", "4")), ["a0", "b0"]),
        (
            (
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]},
                        {"key": "tier", "operator": "Gt", "values": ["5"]},
                    ]
                },
            ),
            ["a1"],
        ),
        # matchFields names the node itself.
        ((named("In", "bare"),), ["bare"]),
        ((named("NotIn", "a0"),), ["a1", "b0", "bare"]),
        # An empty term matches no node; another term still may.
        (({},), []),
        (({}, expr("zone", "In", "a")), ["a0", "a1"]),
    ],
)
def test_only_nodes_that_satisfy_a_term_pass(terms: tuple[dict[str, Any], ...], expected: list[str]) -> None:
    assert feasible(zones(), gpus(1, node_affinity=affinity(*terms))) == expected


def test_nodes_rejected_by_affinity_are_counted_under_their_own_filter() -> None:
    state = zones()
    request = gpus(1, node_affinity=affinity(expr("zone", "In", "b")), node_selector=(("tier", "5"),))
    result = filter_nodes(state, request, explain=True)
    # The selector rejects three nodes first; of the fourth, affinity has nothing left to reject.
    assert result.rejected == {"NodeSelector": 3}
    request = gpus(1, node_affinity=affinity(expr("zone", "In", "b")), node_selector=(("zone", "a"),))
    assert filter_nodes(state, request, explain=True).rejected == {"NodeSelector": 2, NODE_AFFINITY: 2}
    assert not static_mask(state, request).any()


def test_a_gang_with_affinity_lands_only_on_matching_nodes_and_says_why_it_waits() -> None:
    state = zones()
    wanted = affinity(expr("zone", "In", "a"))
    result = place_workload(
        state,
        workload("w", ("p", 2, gpus(8, node_affinity=wanted))),
        policy=FirstFit(),
        rng=np.random.default_rng(0),
    )
    assert sorted(result.nodes().values()) == ["a0", "a1"]
    # Zone a is full: a third pod of that affinity waits, though b0 and bare are empty.
    more = place_workload(
        state,
        workload("x", ("p", 1, gpus(8, node_affinity=wanted))),
        policy=FirstFit(),
        rng=np.random.default_rng(0),
    )
    assert more.no_fit is not None
    assert more.no_fit.filters == {NODE_AFFINITY: 2, "InsufficientGPU": 2}
    assert "2 NodeAffinity" in more.no_fit.message


def test_requests_differing_only_in_affinity_are_not_confused_by_the_static_cache() -> None:
    state = zones()
    to_a = gpus(1, node_affinity=affinity(expr("zone", "In", "a")))
    to_b = gpus(1, node_affinity=affinity(expr("zone", "In", "b")))
    assert to_a != to_b and to_a == gpus(1, node_affinity=affinity(expr("zone", "In", "a")))
    assert hash(to_a) == hash(gpus(1, node_affinity=affinity(expr("zone", "In", "a"))))
    assert [state.specs[r].name for r in np.flatnonzero(static_mask(state, to_a))] == ["a0", "a1"]
    assert [state.specs[r].name for r in np.flatnonzero(static_mask(state, to_b))] == ["b0"]
    assert static_mask(state, gpus(1)).all()  # no affinity: no step at all


@pytest.mark.parametrize(
    ("requirement", "field", "message"),
    [
        ({"key": "zone", "operator": "Near", "values": ["a"]}, "operator", "must be one of"),
        ({"key": "zone", "operator": "In"}, "values", "must not be empty with operator In"),
        ({"key": "zone", "operator": "NotIn", "values": []}, "values", "must not be empty"),
        (
            {"key": "zone", "operator": "Exists", "values": ["a"]},
            "values",
            "must be empty with operator Exists",
        ),
        ({"key": "zone", "operator": "DoesNotExist", "values": ["a"]}, "values", "must be empty"),
        ({"key": "tier", "operator": "Gt", "values": ["1", "2"]}, "values", "exactly one value"),
        ({"key": "tier", "operator": "Lt"}, "values", "exactly one value"),
        ({"key": "tier", "operator": "Gt", "values": ["four"]}, "values[0]", "must be an integer"),
    ],
)
def test_a_malformed_requirement_is_refused_naming_its_field(
    requirement: dict[str, Any], field: str, message: str
) -> None:
    raw = {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}
    with pytest.raises(pydantic.ValidationError) as caught:
        NodeSelector.model_validate(raw)
    error = translate_error(caught.value, obj="Pod p")
    assert error.field == f"nodeSelectorTerms[0].matchExpressions[0].{field}"
    assert message in error.detail


def test_all_of_holds_where_every_selector_holds() -> None:
    zone_a_or_b = affinity(expr("zone", "In", "a"), expr("zone", "In", "b"))
    high_tier = affinity(expr("tier", "Gt", "4"))
    joined = all_of(zone_a_or_b, None, high_tier)
    assert joined is not None
    names = {spec.name: spec.labels for spec in zones().specs}
    assert [n for n, labels in names.items() if node_selector_matches(joined, n, labels)] == ["a1", "b0"]
    assert all_of(None, None) is None and all_of(high_tier) == high_tier
    # An empty term matches no node, joined or not.
    never = all_of(affinity({}), high_tier)
    assert never is not None and not any(node_selector_matches(never, n, lb) for n, lb in names.items())
