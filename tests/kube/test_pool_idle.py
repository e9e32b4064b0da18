"""GPUPools' idle GPU-hours and their cost kept by the operator, against the in-memory API server: by
the embedded pool controller's rule, from the moment each change is seen, across an operator restart."""

from __future__ import annotations

import pytest

from gpufleet.api.accounting import held_milli, idle_account
from gpufleet.api.runtime import MigAssignment, Pod, PodSpec
from gpufleet.controllers.poolview import pod_use
from gpufleet.kube.console import held_milli as console_held_milli
from gpufleet.kube.operator import Operator

from .fakeapi import FakeApiServer
from .test_fleet import MERGE, POOLS, make_pool, place
from .test_operator import Clock
from .test_scheduler import NODES, add_node


def settle(op: Operator) -> None:
    """What the operator's loop does after informer events: relist, then one round."""
    for informer in (op.nodes, op.pools, op.bound):
        informer.relist()
    op.reconcile_once()


def idle(api: FakeApiServer, name: str = "h100") -> tuple[float, float, float]:
    status = api.get(f"{POOLS}/{name}")["status"]
    return status["idleGpus"], status["idleGpuHours"], status["idleCost"]


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.now = float(int(clock.now))  # the status keeps whole seconds
    return clock


def test_idle_gpus_are_integrated_from_each_change_and_priced_at_the_pool_s_price(
    api: FakeApiServer, clock: Clock
) -> None:
    make_pool(api, "h100", pricePerGPUHour=2.5)
    add_node(api, "n1", labels={"pool": "h100"})
    op = Operator(api, clock=clock)
    settle(op)
    assert idle(api) == (8.0, 0.0, 0.0)
    # Half an hour with 8 idle GPUs, then a pod holds 2 of them.
    clock.now += 1800
    place(api, "p1", "n1", gpus=2)
    settle(op)
    assert idle(api) == (6.0, 4.0, 10.0)
    # Nothing changes for an hour: the periodic pass runs the hours on at 6 idle GPUs.
    clock.now += 3600
    settle(op)
    assert idle(api) == (6.0, 10.0, 25.0)
    # The node goes NotReady: its GPUs are not idle capacity any more (the embedded rule: Ready nodes).
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    api.request("PATCH", f"{NODES}/n1/status", body=patch, content_type=MERGE)
    clock.now += 360
    settle(op)
    assert idle(api) == (0.0, 10.6, 26.5)


def test_a_new_operator_runs_the_integral_on_from_the_status(api: FakeApiServer, clock: Clock) -> None:
    make_pool(api, "h100", pricePerGPUHour=1.0)
    add_node(api, "n1", labels={"pool": "h100"})
    settle(Operator(api, clock=clock))
    clock.now += 7200
    settle(Operator(api, clock=clock))  # a restart, or another replica elected: no hour lost or counted twice
    assert idle(api) == (8.0, 16.0, 16.0)


def test_the_same_rule_as_the_embedded_pool_controller() -> None:
    """Both worlds call `idle_account`; here its arithmetic, as a user reads it off a pool."""
    start = idle_account(
        hours=0.0, idle_gpus=0.0, counted_at=None, now=100.0, ready_gpus=16, allocated_milli=4500,
        price_per_gpu_hour=3.0,
    )  # fmt: skip
    assert (start.idle_gpus, start.idle_gpu_hours) == (11.5, 0.0)
    later = idle_account(
        hours=start.idle_gpu_hours, idle_gpus=start.idle_gpus, counted_at=100.0, now=100.0 + 1800,
        ready_gpus=16, allocated_milli=16000, price_per_gpu_hour=3.0,
    )  # fmt: skip
    assert (later.idle_gpus, later.idle_gpu_hours, later.idle_cost) == (0.0, 5.75, 17.25)


def test_a_mig_instance_holds_its_slices_of_a_gpu_in_both_worlds() -> None:
    """Seven `1g` instances fill one GPU: a pool of MIG GPUs is not counted as held seven times over."""
    assert held_milli(gpus=0, gpu_milli=1000, mig_profile="1g.10gb") * 7 == 1001  # rounding of 1/7
    assert held_milli(gpus=0, gpu_milli=1000, mig_profile="3g.40gb") == 429
    assert held_milli(gpus=2, gpu_milli=250, mig_profile=None) == 500
    spec = {"nodeName": "n1", "mig": {"gpu": 0, "profile": "3g.40gb"}}
    assert console_held_milli(spec) == 429
    mig = MigAssignment(gpu=0, profile="3g.40gb", start=0)
    embedded = Pod.model_construct(
        spec=PodSpec.model_construct(node_name="n1", gpus=[], gpu_milli=1000, mig=mig)
    )
    assert pod_use(embedded).gpu_milli == 429


def test_a_pass_before_the_informer_shows_the_last_write_counts_on_from_that_write(
    api: FakeApiServer, clock: Clock
) -> None:
    make_pool(api, "h100", pricePerGPUHour=1.0)
    add_node(api, "n1", labels={"pool": "h100"})
    op = Operator(api, clock=clock)
    settle(op)
    clock.now += 3600
    place(api, "p1", "n1", gpus=8)
    op.bound.relist()  # the pod is seen, the pool's new status (written below) not yet
    op.mark("GPUPoolIdle", "*")
    op.reconcile_once()
    assert idle(api) == (0.0, 8.0, 8.0)
    clock.now += 3600  # an hour with every GPU held: nothing more is idle
    op.mark("GPUPoolIdle", "*")
    op.reconcile_once()  # still on the pool's old copy (idleGpus 8 since the start)
    settle(op)
    assert idle(api) == (0.0, 8.0, 8.0)
