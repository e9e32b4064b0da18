from __future__ import annotations

import pytest

CONTRACT_YAML = """\
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100-a}
spec:
  gpuModel: H100-80GB
  gpusPerNode: 8
  nvlinkDomains: [[0,1,2,3,4,5,6,7]]
  nodeResources: {cpu: 192, memory: 2Ti}
  capacityType: on-demand
  pricePerGPUHour: 3.0
  sharing: {timeSlicing: {replicas: 4}}
  nodes: 32
  topology: {block: b1, racks: 4}
  nodeSelector: {}
  autoscaling: {minNodes: 0, maxNodes: 64, scaleDownDelaySeconds: 600}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  parent: research
  quotas:
    H100-80GB: {nominal: 64, borrowingLimit: 32, lendingLimit: 16}
  fairShareWeight: 1
  preemption: {withinQueue: LowerPriority, reclaimWithinCohort: Any, borrowWithinCohort: Never}
  minRuntimeSeconds: 600
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm-pretrain, namespace: team-a}
spec:
  queue: team-a
  priorityClass: production-training
  user: alice
  replicas: 4
  minReplicas: 4
  worker:
    gpus: 8
    gpuModel: H100-80GB
    cpu: 32
    memory: 256Gi
    template: {}
  topology: {required: rack, preferred: nvlink}
  checkpoint: {intervalSeconds: 1800, uri: s3://ckpt/llm}
  restartPolicy: {maxRestarts: 10, backoffSeconds: 30}
  preemptible: true
  durationSeconds: 7200
---
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: chat, namespace: serving}
spec:
  queue: serving
  priorityClass: production-inference
  modelVersion: llama-70b-v3
  replicas: {min: 2, max: 16}
  replica: {gpus: 1, gpuModel: H100-80GB}
  autoscaling: {targetRequestsPerReplica: 50, targetLatencyP99Ms: 300, predictive: true}
  rollout: {maxSurge: 1, maxUnavailable: 0}
---
apiVersion: gpufleet.io/v1alpha1
kind: Checkpoint
metadata: {name: llm-pretrain-1000, namespace: team-a}
spec: {job: llm-pretrain, step: 1000, uri: s3://ckpt/llm/1000, sizeBytes: 1000000}
status: {phase: Complete}
---
apiVersion: gpufleet.io/v1alpha1
kind: ModelVersion
metadata: {name: llama-70b-v3, namespace: serving}
spec:
  model: llama-70b
  version: v3
  uri: s3://models/llama-70b/v3
  source: {trainingJob: llm-pretrain, checkpoint: llm-pretrain-1000}
  metrics: {loss: 1.7}
"""


@pytest.fixture
def contract_yaml() -> str:
    """ARCHITECTURE.md's YAML contract, plus a Checkpoint and a ModelVersion."""
    return CONTRACT_YAML
