"""GetPreferredAllocation's answer keeps to the protocol's rules for any request, careless or hostile."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.config import parse_config
from gpufleet.agent.deviceplugin.allocation import AllocationError, preferred_allocation
from gpufleet.agent.deviceplugin.resources import Resource, build_resources
from gpufleet.agent.nvml import NodeInfo, RecordedNvml


def _plugins(profile: str, config: dict[str, Any]) -> list[tuple[Resource, NodeInfo]]:
    node = RecordedNvml.from_profile(profile).discover()
    return [(resource, node) for resource in build_resources(node, parse_config(config))]


REPLICAS = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}}
# Whole GPUs (NVLink/NUMA search), time-sliced replicas (greedy) and MIG devices of several profiles.
PLUGINS = (
    _plugins("hgx-h100", {})
    + _plugins("pcie-l4", REPLICAS)
    + _plugins("a100-80gb-mig", {"flags": {"migStrategy": "mixed"}})
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[Resource, NodeInfo, list[str], list[str], int, str]:
    resource, node = draw(st.sampled_from(PLUGINS))
    ids = st.sampled_from([d.id for d in resource.devices])
    count = len(resource.devices)
    available = draw(st.lists(ids, max_size=count + 3))
    must = draw(st.lists(ids, max_size=count + 3))
    size = draw(st.integers(min_value=-1, max_value=count + 2))
    policy = draw(st.sampled_from(["distributed", "packed"]))
    return resource, node, available, must, size, policy


def _unique(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))


@settings(max_examples=300, deadline=None)
@given(requests())
def test_answer_has_no_repeats_fits_the_size_and_puts_must_include_first(
    case: tuple[Resource, NodeInfo, list[str], list[str], int, str],
) -> None:
    resource, node, available, must, size, policy = case
    offered = set(available)
    must_here = [i for i in _unique(must) if i in offered]
    try:
        answer = preferred_allocation(resource, node, available, must, size, policy=policy)
    except AllocationError:
        # Refused only when even the must-include devices leave the size unreachable.
        assert len(must_here) < size
        assert len(offered) < size
        return
    assert len(answer) == len(set(answer)), answer
    assert len(answer) == max(size, 0)
    assert set(answer) <= offered
    if len(must_here) >= size:
        assert answer == must_here[: max(size, 0)]
    else:
        assert set(answer[: len(must_here)]) == set(must_here)


def test_repeated_must_include_counts_once() -> None:
    node = RecordedNvml.from_profile("hgx-h100").discover()
    (resource,) = build_resources(node, parse_config({}))
    u = [g.uuid for g in node.gpus]
    answer = preferred_allocation(resource, node, u, [u[5], u[5], u[5]], 2)
    assert answer[0] == u[5]
    assert len(answer) == 2 and len(set(answer)) == 2
    assert preferred_allocation(resource, node, u, [u[1], u[1], u[2], u[3]], 2) == [u[1], u[2]]


def test_must_include_outside_available_is_left_out() -> None:
    node = RecordedNvml.from_profile("hgx-h100").discover()
    (resource,) = build_resources(node, parse_config({}))
    u = [g.uuid for g in node.gpus]
    answer = preferred_allocation(resource, node, u[4:], [u[0], u[6]], 2)
    assert answer[0] == u[6]
    assert u[0] not in answer and set(answer) <= set(u[4:])


def test_unknown_ids_and_sizes_beyond_available_are_refused() -> None:
    node = RecordedNvml.from_profile("hgx-h100").discover()
    (resource,) = build_resources(node, parse_config({}))
    u = [g.uuid for g in node.gpus]
    with pytest.raises(AllocationError, match="unknown device: GPU-x"):
        preferred_allocation(resource, node, u, ["GPU-x"], 1)
    with pytest.raises(AllocationError, match="cannot prefer 3 devices"):
        preferred_allocation(resource, node, [u[0], u[0], u[1]], [], 3)
    assert preferred_allocation(resource, node, u, [u[0]], 0) == []
