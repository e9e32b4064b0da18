"""The worker's report names the dispatches its figures count in the Kubernetes world too: the worker
loop writes them into its Cluster custom resource on the manager's API server (the CRD keeps the field),
and the manager takes what a lagging report does not count out of that cluster's summary."""

from __future__ import annotations

from gpufleet.api.cluster import Cluster, DispatchCount
from gpufleet.api.training import TrainingJob
from gpufleet.cli.kube_federation import WorkerLoop
from gpufleet.federation.link import CLUSTER
from gpufleet.federation.unreported import sequence_of
from gpufleet.kube.store import KubeStore

from .test_federation_kube import Federation, fleet, job


def test_a_worker_whose_figures_lag_its_dispatches_is_not_over_filled() -> None:
    fed = Federation()
    # w1 has one host and its scheduler places nothing here: its figures keep saying 8 GPUs free.
    fed.agents["w1"] = WorkerLoop(
        fed.workers["w1"], fed.manager, "w1", lambda: fleet(1), clock=lambda: fed.now
    )
    for name in ("a", "b", "c"):
        fed.store.create(job(name, gpus=4))
        fed.run(1)
    assert [fed.held(n).metadata.annotations.get(CLUSTER) for n in "abc"] == ["w1", "w1", "w2"]
    numbers = {n: sequence_of(fed.held(n).metadata.annotations) for n in "abc"}
    reported = KubeStore(fed.manager).get(Cluster, "w1").status.dispatches
    assert reported == DispatchCount(newest=numbers["b"], uncounted=[numbers["a"], numbers["b"]])

    # The worker places `a`: its copy says so, and the figures count it; no more room on w1 either way.
    worker = KubeStore(fed.workers["w1"])
    copy = worker.get(TrainingJob, "a", "team")
    copy.status.replicas = 1
    worker.update_status(copy)
    fed.run(2)
    reported = KubeStore(fed.manager).get(Cluster, "w1").status.dispatches
    assert reported == DispatchCount(newest=numbers["b"], uncounted=[numbers["b"]])
