"""Capacity type as part of a flavor: names, the order flavors are tried in, the nodes a flavor selects."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufleet.api.labels import CAPACITY_TYPE_LABEL
from gpufleet.api.queue import QueueSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.flavors import candidate_models, model_of, pinned, split_flavor
from gpufleet.scheduler.workload import PodSet, Workload

H100, A100 = "H100-80GB", "A100-80GB"


def _workload(*models: str) -> Workload:
    return Workload("w", (PodSet("main", 2, PodRequest(gpus=1, gpu_models=models)),))


def test_flavor_names_split_into_model_and_capacity_type() -> None:
    assert split_flavor("H100-80GB/spot") == (H100, "spot")
    assert split_flavor("H100-80GB/on-demand") == (H100, "on-demand")
    assert split_flavor(H100) == (H100, None)
    assert split_flavor("1g.10gb") == ("1g.10gb", None)
    assert model_of("A100-80GB/spot") == A100 and model_of(None) is None


def test_flavors_go_model_by_model_in_the_pods_order_and_the_queues_order_within_a_model() -> None:
    queue = [f"{H100}/spot", f"{A100}/on-demand", f"{H100}/on-demand", A100]
    got = candidate_models(_workload(A100, H100), queue_flavors=queue, fleet_models=[], unlimited=False)
    assert got == [f"{A100}/on-demand", A100, f"{H100}/spot", f"{H100}/on-demand"]
    got = candidate_models(_workload(), queue_flavors=queue, fleet_models=[], unlimited=False)
    assert got == queue
    assert candidate_models(_workload(), queue_flavors=[], fleet_models=[H100], unlimited=True) == [H100]


def test_a_capacity_typed_flavor_selects_nodes_by_label_and_keeps_other_selectors() -> None:
    request = PodRequest(gpus=1, node_selector=(("zone", "a"),))
    workload = Workload("w", (PodSet("main", 1, request),))
    shaped = pinned(workload, f"{H100}/spot", (1,)).pod_sets[0].request
    assert shaped.gpu_models == (H100,)
    assert dict(shaped.node_selector) == {"zone": "a", CAPACITY_TYPE_LABEL: "spot"}
    plain = pinned(workload, H100, (1,)).pod_sets[0].request
    assert dict(plain.node_selector) == {"zone": "a"}


@pytest.mark.parametrize("name", ["H100-80GB/preemptible", "/spot", "H100-80GB/"])
def test_queue_refuses_a_flavor_with_an_unknown_capacity_type(name: str) -> None:
    with pytest.raises(ValidationError, match="capacity type"):
        QueueSpec.model_validate({"quotas": {name: {"nominal": 1}}})
    QueueSpec.model_validate({"quotas": {"H100-80GB/spot": {"nominal": 1}, "1g.10gb": {"nominal": 2}}})
