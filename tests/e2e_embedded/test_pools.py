"""GPUPool sizing: which pool grows for a waiting workload, maxNodes, racks, static convergence, restarts."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api.runtime import Node, Pod

from .conftest import World, make_world


def _pool(name: str, *, model: str = "H100-80GB", price: float = 3.0, extra: str = "") -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {{name: {name}}}
spec:
  gpuModel: {model}
  gpusPerNode: 8
  pricePerGPUHour: {price}
  autoscaling: {{minNodes: 0, maxNodes: 4, scaleDownDelaySeconds: 600}}
{extra}"""


def _job(
    name: str, *, replicas: int = 1, worker: str = "{gpus: 8}", extra: str = "", seconds: int = 600
) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  worker: {worker}
  durationSeconds: {seconds}
{extra}"""


def _nodes(world: World, pool: str | None = None) -> list[Node]:
    return [n for n in world.store.list(Node) if pool is None or n.spec.pool == pool]


def test_the_cheapest_pool_that_can_serve_the_workload_grows(world: World) -> None:
    world.apply(_pool("cheap-a100", model="A100-80GB", price=1.5))
    world.apply(_pool("h100", price=3.0))
    world.apply(
        _pool("mig", model="A100-80GB", price=1.0, extra="  sharing: {mig: {'*': [3g.40gb, 3g.40gb]}}")
    )
    world.apply(_job("wants-h100", worker="{gpus: 8, gpuModel: H100-80GB}"))
    world.apply(_job("any", worker="{gpus: 4}"))
    world.apply(_job("slice", worker="{mig: 3g.40gb}"))
    world.runtime.run_for(1)
    demand = world.get("Workload", "job-wants-h100").status
    assert demand.phase == "Admitted" and demand.node_demand is None
    assert [n.spec.pool for n in _nodes(world)].count("h100") == 1
    assert [n.spec.pool for n in _nodes(world)].count("cheap-a100") == 1  # not the MIG pool, not H100
    assert [n.spec.pool for n in _nodes(world)].count("mig") == 1
    for job in ("wants-h100", "any", "slice"):
        assert world.get("TrainingJob", job).status.phase == "Running", job


def test_a_queue_without_quota_for_a_model_never_grows_that_pool(world: World) -> None:
    world.apply(_pool("cheap-a100", model="A100-80GB", price=1.5))
    world.apply(_pool("h100", price=3.0))
    world.apply(
        """
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec: {quotas: {H100-80GB: {nominal: 16}}}
"""
    )
    world.apply(_job("ft", extra="  queue: team"))
    world.runtime.run_for(1)
    assert [n.spec.pool for n in _nodes(world)] == ["h100"]
    assert world.get("TrainingJob", "ft").status.phase == "Running"


def test_a_pool_never_grows_past_max_nodes_nor_for_a_workload_it_cannot_hold(world: World) -> None:
    world.apply(_pool("h100").replace("maxNodes: 4", "maxNodes: 3"))
    world.apply(_job("two", replicas=2))
    world.apply(_job("too-big", replicas=4))  # 4 nodes: more than the pool may ever have
    world.runtime.run_for(1)
    assert len(_nodes(world)) == 2
    assert world.get("TrainingJob", "two").status.phase == "Running"
    assert world.get("Workload", "job-too-big").status.node_demand.pools == ["h100"]
    world.apply(_job("a-one"))
    world.apply(_job("b-another"))
    world.runtime.run_for(1)
    assert len(_nodes(world)) == 3  # one more for a-one (first by name at one instant); b waits at maxNodes
    assert world.get("TrainingJob", "a-one").status.phase == "Running"
    assert world.get("TrainingJob", "b-another").status.phase == "Pending"
    world.runtime.run_for(3000)  # b-another runs when a node frees; too-big never does
    assert world.get("TrainingJob", "b-another").status.phase == "Succeeded"
    assert world.get("TrainingJob", "too-big").status.phase == "Pending"
    assert len(_nodes(world)) <= 3


def test_a_gang_that_requires_a_rack_gets_its_new_nodes_in_one_rack(world: World) -> None:
    world.apply(
        _pool("h100", extra="  topology: {block: b1, racks: 2}").replace("minNodes: 0", "minNodes: 2")
    )
    world.runtime.run_for(1)
    assert sorted(n.metadata.labels["rack"] for n in _nodes(world)) == ["b1-r0", "b1-r1"]
    world.apply(_job("gang", replicas=3, extra="  topology: {required: rack}"))
    world.runtime.run_for(1)
    racks = sorted(n.metadata.labels["rack"] for n in _nodes(world))
    # One idle node is claimed in b1-r0 and two more are made beside it.
    assert racks == ["b1-r0", "b1-r0", "b1-r0", "b1-r1"], racks
    assert world.get("TrainingJob", "gang").status.phase == "Running"
    used = {p.spec.node_name for p in world.store.list(Pod)}
    assert {world.get("Node", n).metadata.labels["rack"] for n in used} == {"b1-r0"}


def test_a_pool_without_autoscaling_converges_to_spec_nodes_idle_nodes_first(world: World) -> None:
    static = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: fixed}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 3}
"""
    world.apply(static)
    world.apply(_job("ft", seconds=3600))
    world.runtime.run_for(10)
    busy = world.store.list(Pod).items[0].spec.node_name
    world.apply(static.replace("nodes: 3", "nodes: 1"))
    world.runtime.run_for(1)
    assert [n.name for n in _nodes(world)] == [busy]
    assert world.get("TrainingJob", "ft").status.restarts == 0
    world.apply(static.replace("nodes: 3", "nodes: 2"))
    world.runtime.run_for(1)
    assert len(_nodes(world)) == 2


def test_a_waiting_workload_s_node_demand_follows_a_pool_s_new_price(world: World) -> None:
    def fixed(name: str, price: float) -> str:
        return f"""
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {{name: {name}}}
spec: {{gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1, pricePerGPUHour: {price}}}
"""

    world.apply(fixed("a", 3.0))
    world.apply(fixed("b", 4.0))
    world.apply(_job("wide", replicas=3))  # 3 nodes: more than the fleet's 2, so it waits for nodes
    world.runtime.run_for(60)
    assert world.get("Workload", "job-wide").status.node_demand.pools == ["a", "b"]
    world.apply(fixed("b", 2.0))  # nothing about the workload or the fleet's capacity changed
    world.runtime.run_for(60)
    status = world.get("Workload", "job-wide").status
    assert status.phase == "Pending" and status.node_demand.pools == ["b", "a"]  # cheapest first


def test_idle_timers_and_idle_hours_survive_a_restart(tmp_path: Path) -> None:
    first = make_world(tmp_path)
    first.apply(_pool("h100"))
    first.apply(_job("ft", replicas=2))
    first.runtime.run_for(1000)  # done at 600 s: both nodes idle since then
    assert first.get("TrainingJob", "ft").status.phase == "Succeeded"
    clock = first.clock
    first.store.close()

    second = make_world(tmp_path, clock=clock)
    second.runtime.run_for(100)  # 500 s idle: still there
    assert len(_nodes(second)) == 2
    second.runtime.run_for(150)  # past 600 s idle, counted from before the restart
    assert _nodes(second) == []
    pool = second.get("GPUPool", "h100")
    assert 2.5 <= pool.status.idle_gpu_hours <= 2.8  # 16 GPUs for 600 s, across the restart
    second.store.close()
