"""More alert rules against a real Prometheus: each fault injected the way it happens (the twin's
`gpufleet fault`, a recorded GPU's NVML readings, a kubelet's PodResources answer) makes its shipped rule
fire, and the fault's end makes it resolve.

The world runs at real time (`--time-scale 1`): `GpufleetCheckpointOverdue` compares a checkpoint's
time with Prometheus' `time()`, which only a world on the wall clock shares. The rules are the shipped
ones with `for:` at one second (promharness.write_fast_rules checks the expressions are unchanged).
"""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from gpufleet.agent.deviceplugin._generated import podresources_pb2 as prpb
from gpufleet.agent.deviceplugin._generated import podresources_pb2_grpc as prpb_grpc
from gpufleet.agent.exporter import DcgmCollector, MetricsServer, PodResourcesClient
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import RecordedNvml

from .promharness import (
    PROMETHEUS,
    SKIP_REASON,
    Prometheus,
    free_port,
    gpufleet,
    has,
    reachable,
    start_prometheus,
    start_up,
    stop,
    wait,
)

# One 8-GPU pool node runs one of the elastic job's two workers, so the job computes at half speed and
# checkpoints every 12 s of wall time against its 6 s interval; `spare-0` is a hand-made node, cordoned so
# that nothing runs on it, to be lost (a pool would replace a lost node of its own at once).
FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: alerts}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1, pricePerGPUHour: 3.0}
---
apiVersion: gpufleet.io/v1alpha1
kind: Node
metadata: {name: spare-0}
spec: {gpuModel: H100-80GB, gpus: 8, unschedulable: true}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  quotas: {H100-80GB: {nominal: 16}}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team-a}
spec:
  queue: team-a
  replicas: 2
  minReplicas: 1
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 6, uri: s3://ckpt/llm}
  durationSeconds: 86400000
"""


class PodResources(prpb_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    """The kubelet's PodResources service: pod team-a/llm-0-0 holds the given GPU."""

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = prpb.ListPodResourcesResponse()
        pod = response.pod_resources.add(name="llm-0-0", namespace="team-a")
        pod.containers.add(name="worker").devices.add(resource_name="nvidia.com/gpu", device_ids=[self.uuid])
        return response


@pytest.mark.slow
def test_each_fault_fires_its_alert_and_its_end_resolves_it(run_dir: Path) -> None:
    if PROMETHEUS is None:
        pytest.skip(SKIP_REASON)
    state = run_dir / "state"
    api_port, web_port = free_port(), free_port()
    server = f"http://127.0.0.1:{api_port}"
    log = run_dir / "prometheus.log"

    # A recorded HGX H100 (GPUs 0 and 1 97% busy at 1980 MHz, the others idle) whose GPU 0 the kubelet
    # says a pod holds.
    nvml = RecordedNvml.from_profile("hgx-h100")
    gpus = [g.uuid for g in nvml.discover().gpus]
    kubelet = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prpb_grpc.add_PodResourcesListerServicer_to_server(PodResources(gpus[0]), kubelet)
    kubelet.add_insecure_port(f"unix://{run_dir / 'kubelet.sock'}")
    kubelet.start()
    exporter = MetricsServer(
        [
            DcgmCollector(
                nvml,
                nvml.discover(),
                hostname="alerts-0",
                health=HealthState(),
                pod_resources=PodResourcesClient(run_dir / "kubelet.sock"),
            )
        ],
        port=0,
        address="127.0.0.1",
    )
    up = start_up(run_dir, FLEET, time_scale=1, port=api_port)
    prom = None
    exporter.start()
    try:
        wait(
            "gpufleet up", lambda: (state / "admin-token").exists() and reachable(server), run_dir / "up.log"
        )
        prom = start_prometheus(run_dir, api_port=api_port, agent_port=exporter.port, web_port=web_port)
        p = Prometheus(web_port)
        wait("both targets up", lambda: p.value("sum(up)") == 2, log)
        wait("the job's worker", lambda: p.value('sum(gpufleet_gpus{state="allocated"})') == 8, log)
        wait("spare-0 Ready", lambda: p.value(_ready("spare-0")) == 1, log)
        # The exporter's fix this test is for: the embedded world's nodes have kube-state-metrics' series.
        assert p.value('kube_node_status_capacity{node="spare-0",resource="nvidia_com_gpu"}') == 8
        healthy = p.firing()
        assert healthy is not None
        quiet = {"GpuAllocatedButIdle", "GpuClockThrottled", "GpuUncorrectableMemoryError", "GpuNodeNotReady"}
        assert not quiet & set(healthy), healthy

        # Faults: the pod's GPU idles, a busy GPU's SM clock is held down, one GPU has an uncorrectable
        # ECC error (a row remapped) and another one with no spare rows left (remapping failed), and
        # the spare node stops answering.
        nvml.set_telemetry(gpus[0], gpu_util=5.0)
        nvml.set_telemetry(gpus[1], sm_clock_mhz=1100.0)
        nvml.inject_ecc(gpus[5])
        nvml.inject_ecc(gpus[6], spare_rows=False)
        gpufleet("fault", "node-loss", "spare-0", server=server, state=state)
        expected = {
            "GpuAllocatedButIdle": {"pod": "llm-0-0", "namespace": "team-a", "gpu": "0"},
            "GpuClockThrottled": {"Hostname": "alerts-0", "gpu": "1", "severity": "warning"},
            "GpuUncorrectableMemoryError": {"gpu": "5", "severity": "critical"},
            "GpuNodeNotReady": {"node": "spare-0", "severity": "critical"},
        }
        wait(
            f"alerts {sorted(expected)}",
            lambda: all(has(p.firing(), a, **ls) for a, ls in expected.items()),
            log,
            seen=p.firing,
        )
        wait("the failed remapping", lambda: has(p.firing(), "GpuUncorrectableMemoryError", gpu="6"), log)

        # The half-speed job's checkpoints come later than its interval, and each new one ends that.
        overdue = {"namespace": "team-a", "trainingjob": "llm"}
        wait(
            "GpufleetCheckpointOverdue", lambda: has(p.firing(), "GpufleetCheckpointOverdue", **overdue), log
        )
        wait(
            "the next checkpoint",
            lambda: not has(p.firing(), "GpufleetCheckpointOverdue", **overdue),
            log,
        )

        # Their ends: the pod works again, the clock recovers, GPU 6 is replaced (a new board, nothing
        # remapped) and the lost node is deleted. GPU 5's remapped row stays in the rule's 15-minute
        # window, so its alert stays: the rule's own promtool test sees it end.
        nvml.set_telemetry(gpus[0], gpu_util=97.0)
        nvml.set_telemetry(gpus[1], sm_clock_mhz=1980.0)
        nvml.set_telemetry(gpus[6], row_remap_failure=0.0, uncorrectable_remapped_rows=0.0)
        gpufleet("delete", "node", "spare-0", server=server, state=state)
        resolved = {**expected, "GpuUncorrectableMemoryError": {"gpu": "6"}}
        wait(
            "the alerts to resolve",
            lambda: (
                (firing := p.firing()) is not None
                and not any(has(firing, a, **ls) for a, ls in resolved.items())
            ),
            log,
            seen=p.firing,
        )
        assert has(p.firing(), "GpuUncorrectableMemoryError", gpu="5")
    finally:
        exporter.stop()
        kubelet.stop(0).wait()
        stop(up)
        if prom is not None:
            stop(prom)


def _ready(node: str) -> str:
    return f'kube_node_status_condition{{node="{node}",condition="Ready",status="true"}}'
