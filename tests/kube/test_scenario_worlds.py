"""Issue 19's preemption rules in the Kubernetes world: scenario files whose fleet plain pods can state
are replayed against the in-memory API server (Queues, Nodes, pods bound with their start times, pods
pending in submission order), and the secondary scheduler must evict and bind what the scenario runner
does (`tests/scenarios` holds the runner to each file's expectations)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpufleet.api import ObjectMeta, Queue, QueueSpec
from gpufleet.api.scenario import Scenario, ScenarioWorkload
from gpufleet.kube.config import GANG_MIN_LABEL
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore
from gpufleet.sim.scenario import load_scenarios

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_scheduler import add_node, add_pods, run

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
NOW = 1_900_000_000.0
NAMESPACE = "team-a"
CASES = [
    # Rule 1: the preemptor's own victims count before "does it borrow" is judged.
    "kueue-preempt-own-and-borrowing-cohort",
    "reclaim-own-victims-with-borrow-within-cohort",
    "kueue-borrow-threshold-preempt-from-all-cohort",
    "reclaim-own-victims-least-attained-service",
    # Rule 1's order (decision 37): within nominal first, over every candidate, then borrowing.
    "preempt-within-nominal-before-borrowing",
    "kueue-preempt-other-queues-when-not-exhausted",
    # Rule 3 for victims (decision 38): a victim's queue borrows judged by its subtree.
    "reclaim-skips-leaf-within-its-organisation",
    "reclaim-keeps-organisation-at-its-quota",
    "kueue-hierarchical-pruned-subtrees",
    # Rule 2: quota victims are not placement victims.
    "quota-victims-two-borrowers-two-nodes",
    "quota-victims-on-other-nodes",
    "quota-victims-on-other-nodes-large-pool",
    "quota-victims-relieve-the-limiting-queue",
    # Rule 5: elastic preemptors.
    "kai-elastic-preemptor-at-fewer-pods",
    "kai-reclaim-only-over-quota-task-from-elastic-job",
    "elastic-preemptor-fewer-pods-keeps-lender-at-nominal",
    "elastic-preemptor-fewer-pods-by-shrinking",
]


def _stamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pods(workload: ScenarioWorkload, nodes: list[str], *, created: str, started: str | None) -> list[dict]:
    """A workload's pods: one pod, or a gang (elastic with its pod set's minCount)."""
    (pod_set,) = workload.pod_sets
    labels = {"gpufleet.io/queue": workload.queue}
    names = [workload.name]
    if pod_set.count > 1:
        labels |= {"gpufleet.io/gang": workload.name, "gpufleet.io/gang-size": str(pod_set.count)}
        if pod_set.min_count is not None:
            labels[GANG_MIN_LABEL] = str(pod_set.min_count)
        names = [f"{workload.name}-{i}" for i in range(pod_set.count)]
    out = []
    for i, name in enumerate(names):
        bound = nodes[i] if nodes else None
        obj = pod(
            name,
            namespace=NAMESPACE,
            gpus=pod_set.gpus,
            labels=dict(labels),
            priority=workload.priority,
            created=created,
            node_name=bound,
            phase="Running" if bound else "Pending",
        )
        if started is not None:
            obj["status"]["startTime"] = started
        out.append(obj)
    return out


def _replay(api: FakeApiServer, scenario: Scenario) -> tuple[set[str], dict[str, int]]:
    """The workloads evicted whole, and the pods bound per workload, once nothing changes."""
    spec = scenario.spec
    store = KubeStore(api)
    for q in spec.queues:
        queue_spec = QueueSpec(
            parent=q.parent,
            quotas=q.quotas,
            preemption=q.preemption,
            queueing_strategy=q.queueing_strategy,
            least_attained_service=q.least_attained_service,
        )
        store.create(Queue(metadata=ObjectMeta(name=q.name), spec=queue_spec))
    names = []
    for n in spec.nodes:
        assert n.name is not None and n.gpu_model == "H100-80GB" and not n.labels
        add_node(api, n.name, gpus=n.gpus)
        names.append(n.name)
    for w in spec.running:
        (pod_set,) = w.pod_sets
        nodes = list(w.nodes) if w.nodes else [names[0]] * pod_set.count
        assert w.nodes or len(names) == 1, "a running workload without nodes needs a one-node fleet"
        started = _stamp(NOW - w.admitted_seconds_ago)
        add_pods(api, _pods(w, nodes, created=_stamp(NOW - w.admitted_seconds_ago - 60), started=started))
    for i, w in enumerate(spec.submit):
        add_pods(api, _pods(w, [], created=_stamp(NOW - 30 + i), started=None))
    sched = KubeScheduler(api, clock=lambda: NOW, bind_workers=0)
    evicted: set[str] = set()
    for _ in range(10):
        run(sched)
        pods = api.objects["/v1/pods"]
        leaving = [name for (ns, name), p in pods.items() if p["metadata"].get("deletionTimestamp")]
        if not leaving and all(p["spec"].get("nodeName") for p in pods.values()):
            break
        for name in leaving:  # the kubelet's part: the containers stopped
            evicted.add(name)
            api.request(
                "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", body={"gracePeriodSeconds": 0}
            )
    bound: dict[str, int] = {}
    whole: set[str] = set()
    for w in [*spec.running, *spec.submit]:
        (pod_set,) = w.pod_sets
        pod_names = [w.name] if pod_set.count == 1 else [f"{w.name}-{i}" for i in range(pod_set.count)]
        pods = api.objects["/v1/pods"]
        bound[w.name] = sum(
            1
            for name in pod_names
            if (NAMESPACE, name) in pods and pods[(NAMESPACE, name)]["spec"].get("nodeName")
        )
        if all(name in evicted for name in pod_names):
            whole.add(w.name)
    return whole, bound


@pytest.mark.parametrize("name", CASES)
def test_the_kubernetes_world_preempts_as_the_scenario_says(api: FakeApiServer, name: str) -> None:
    (item,) = load_scenarios([SCENARIOS / f"{name}.yaml"])
    expect = item.scenario.spec.expect
    evicted, bound = _replay(api, item.scenario)
    assert evicted == set(expect.preempted or ()), bound
    counts = expect.pod_counts or {}
    for workload in expect.admitted or ():
        assert bound[workload] >= 1, bound
        if workload in counts:
            assert bound[workload] == counts[workload], bound
