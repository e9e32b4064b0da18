"""The scenario runner charges a running workload as the other worlds do (decision 21): to the first of its
queue's flavors that selects its nodes, by GPU model and capacity-type label."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.scheduler.flavors import node_flavor
from gpufleet.sim.scenario import build_world, load_scenarios

H100 = "H100-80GB"

SCENARIO = """\
apiVersion: gpufleet.io/v1alpha1
kind: Scenario
metadata: {name: s}
spec:
  nodes:
    - {name: od1, gpus: 8, gpuModel: H100-80GB, capacityType: on-demand}
    - {name: sp1, gpus: 8, gpuModel: H100-80GB, capacityType: spot}
    - {name: plain, gpus: 8, gpuModel: H100-80GB}
  queues:
    - name: q
      quotas: QUOTAS
  running:
    - {name: on-spot, queue: q, nodes: [sp1], podSets: [{gpus: 2}]}
    - {name: on-od, queue: q, nodes: [od1], podSets: [{gpus: 2}]}
    - {name: on-plain, queue: q, nodes: [plain], podSets: [{gpus: 2}]}
"""


def _charged(tmp_path: Path, quotas: str) -> dict[str, str | None]:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("QUOTAS", quotas))
    (item,) = load_scenarios([path])
    world = build_world(item.scenario, source=str(path))
    return {name: a.assignment.model for name, a in world.cache.admitted.items()}


def test_node_flavor_is_the_first_flavor_that_selects_the_node() -> None:
    flavors = [f"{H100}/on-demand", H100, f"{H100}/spot"]
    assert node_flavor(flavors, H100, "spot") == H100  # the plain model selects every node of it
    assert node_flavor(flavors, H100, "on-demand") == f"{H100}/on-demand"
    assert node_flavor([f"{H100}/on-demand", f"{H100}/spot"], H100, "spot") == f"{H100}/spot"
    assert node_flavor([f"{H100}/on-demand", f"{H100}/spot"], H100, None) is None
    assert node_flavor([f"{H100}/spot"], "A100-80GB", "spot") is None


def test_running_workloads_are_charged_by_the_nodes_capacity_type(tmp_path: Path) -> None:
    quotas = "{H100-80GB/on-demand: {nominal: 8}, H100-80GB: {nominal: 8}, H100-80GB/spot: {nominal: 8}}"
    charged = _charged(tmp_path, quotas)
    assert charged == {"on-spot": H100, "on-od": f"{H100}/on-demand", "on-plain": H100}
    quotas = "{H100-80GB/on-demand: {nominal: 8}, H100-80GB/spot: {nominal: 8}, H100-80GB: {nominal: 8}}"
    charged = _charged(tmp_path, quotas)
    assert charged == {"on-spot": f"{H100}/spot", "on-od": f"{H100}/on-demand", "on-plain": H100}


def test_a_running_workload_no_flavor_selects_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="selects all of on-plain's nodes"):
        _charged(tmp_path, "{H100-80GB/on-demand: {nominal: 8}, H100-80GB/spot: {nominal: 8}}")
