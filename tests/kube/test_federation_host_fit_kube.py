"""The worker's report says what could ever fit on its hosts in the Kubernetes world too: the worker loop
writes the largest host's CPU and memory and the taints every host carries into its Cluster custom
resource (the CRD keeps the fields), and the manager sends a job its hosts cannot take elsewhere."""

from __future__ import annotations

from gpufleet.api.cluster import Cluster
from gpufleet.api.runtime import NodeTaint
from gpufleet.cli.kube_federation import WorkerLoop
from gpufleet.federation.link import CLUSTER
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import Taint
from gpufleet.fleet.state import FleetState
from gpufleet.kube.store import KubeStore

from .test_federation_kube import Federation, job


def reserved(hosts: int) -> FleetState:
    state = FleetState()
    for i in range(hosts):
        taints = (Taint("dedicated", "team-b", "NoSchedule"),)
        state.add_node(
            NodeSpec(f"h{i}", gpu_model="H100-80GB", gpus=8, cpu_milli=64_000, memory_mib=4096, taints=taints)
        )
    return state


def test_a_job_that_does_not_tolerate_the_cheaper_workers_taint_runs_in_the_other() -> None:
    fed = Federation()
    fed.agents["w1"] = WorkerLoop(
        fed.workers["w1"], fed.manager, "w1", lambda: reserved(2), clock=lambda: fed.now
    )
    fed.store.create(job("train"))
    fed.run(3)
    h100 = KubeStore(fed.manager).get(Cluster, "w1").status.capacity["H100-80GB"]
    assert (h100.host_cpu_milli, h100.host_memory_mib) == (64_000, 4096)
    assert h100.host_taints == [NodeTaint(key="dedicated", value="team-b", effect="NoSchedule")]
    assert fed.held("train").metadata.annotations[CLUSTER] == "w2", "w1 is cheaper, but no host takes it"
