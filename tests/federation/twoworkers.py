"""A manager over two embedded workers, `w1` (cheaper) and `w2`, one queue `team`, and the jobs and
hosts the federation's unit tests give them."""

from __future__ import annotations

from gpufleet.api import load_objects
from gpufleet.api.training import TrainingJob
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState

START = 1_900_000_000.0
MODEL = "H100-80GB"

MANAGER = """
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec: {quotas: {H100-80GB: {nominal: 200}}}
---
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {name: w1}
spec:
  connection: {embedded: {url: "http://w1.invalid", tokenSecretRef: {name: w1-token, key: token}}}
  pricePerGPUHour: {H100-80GB: 1.0}
  leaseSeconds: 60
---
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {name: w2}
spec:
  connection: {embedded: {url: "http://w2.invalid", tokenSecretRef: {name: w2-token, key: token}}}
  pricePerGPUHour: {H100-80GB: 2.0}
  leaseSeconds: 60
"""


def job(name: str, *, gpus: int = 8, replicas: int = 1) -> TrainingJob:
    obj = load_objects(
        f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: team}}
spec: {{queue: team, replicas: {replicas}, worker: {{gpus: {gpus}, gpuModel: {MODEL}}}}}
"""
    )[0]
    assert isinstance(obj, TrainingJob)
    return obj


def hosts(count: int, *, busy: int = 0) -> FleetState:
    """`count` hosts of 8 GPUs, the first `busy` of them full."""
    fleet = FleetState()
    for i in range(count):
        fleet.add_node(NodeSpec(f"h{i}", gpu_model=MODEL, gpus=8))
    for i in range(busy):
        fleet.allocate(f"p{i}", i, PodRequest(gpus=8), tuple(range(8)))
    return fleet
