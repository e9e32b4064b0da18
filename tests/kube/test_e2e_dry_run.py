"""The e2e suite's scheduling tests, run against the in-memory API server.

Not the e2e proof (that is `pytest -m k8s` against a cluster): this keeps the suite's own helpers
(node lifecycle, waits, reading reasons) working between the runs that have a cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from e2e_k8s import test_operator as e2e_operator
from e2e_k8s import test_scheduling as e2e
from e2e_k8s.conftest import Cluster, Recorded
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler

from .fakeapi import FakeApiServer


@pytest.fixture
def cluster(api: FakeApiServer) -> Iterator[Cluster]:
    made = Cluster(api, "e2e")
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": made.queue},
        "spec": {"quotas": {"H100-80GB": {"nominal": 1000}}},
    }
    api.request("POST", "/apis/gpufleet.io/v1alpha1/queues", body=body)
    yield made


@pytest.fixture
def scheduler(api: FakeApiServer, cluster: Cluster) -> Iterator[KubeScheduler]:
    sched = KubeScheduler(api, config=KubeConfig(scheduler_name=cluster.scheduler_name), period=0.2)
    for informer in (sched.nodes, sched.pods, sched.queues):
        informer._watch_seconds = 1
    stop = threading.Event()
    sched.informers.start(stop)
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    thread.start()
    yield sched
    stop.set()
    thread.join(5)


@pytest.mark.parametrize(
    "case",
    [
        e2e.test_a_pod_is_bound_through_the_binding_subresource,
        e2e.test_a_gang_is_bound_only_when_all_members_fit,
        e2e.test_required_topology_keeps_the_gang_in_one_rack,
        e2e.test_a_pod_stating_a_cuda_version_goes_only_where_the_driver_runs_it,
        e2e.test_preemption_goes_through_evictions_and_the_preemptor_follows,
        e2e.test_not_ready_nodes_are_left_alone,
        e2e.test_a_queue_left_out_of_the_quota_tree_says_so_and_its_pods_wait_for_it,
    ],
    ids=lambda case: case.__name__.removeprefix("test_"),
)
def test_e2e_case_on_the_stand_in(case, cluster: Cluster, scheduler: KubeScheduler) -> None:
    case(cluster, scheduler)


@pytest.fixture
def operator(api: FakeApiServer, cluster: Cluster) -> Iterator[Operator]:
    selector = ",".join(f"{k}={v}" for k, v in cluster.selector.items())
    op = Operator(
        Recorded(api),
        config=KubeConfig(scheduler_name=cluster.scheduler_name, namespace=cluster.namespace),
        period=0.2,
        node_selector=selector,
    )
    for informer in op.informers._informers.values():
        informer._watch_seconds = 1
    stop = threading.Event()
    op.informers.start(stop)
    thread = threading.Thread(target=op.run, args=(stop,), daemon=True)
    thread.start()
    yield op
    stop.set()
    thread.join(5)


@pytest.mark.parametrize(
    "case",
    [
        e2e_operator.test_a_training_job_gets_workers_that_are_bound_as_one_gang,
        e2e_operator.test_a_failed_worker_restarts_the_job_from_its_last_checkpoint,
        e2e_operator.test_an_inference_service_scales_on_its_load_and_rolls_out_a_new_version,
        e2e_operator.test_a_spot_interruption_notice_cordons_the_node_and_evicts_its_pods,
        e2e_operator.test_a_job_whose_queue_offers_spot_capacity_tolerates_the_spot_taint_and_runs_there,
    ],
    ids=lambda case: case.__name__.removeprefix("test_"),
)
def test_e2e_operator_case_on_the_stand_in(
    case, api: FakeApiServer, cluster: Cluster, scheduler: KubeScheduler, operator: Operator
) -> None:
    case(api, cluster, scheduler, operator)


def test_e2e_sharing_case_on_the_stand_in(api: FakeApiServer, cluster: Cluster, operator: Operator) -> None:
    e2e_operator.test_a_shared_pool_gets_its_sharing_config_map_and_its_nodes_select_it(
        api, cluster, operator
    )
