"""Why a run of a workload ended: the one vocabulary of eviction reasons both worlds speak.

The same words appear in a Workload's `status.evictions[].reason` (embedded world), in the
`DisruptionTarget` condition gpufleet's Kubernetes scheduler sets on the pods it preempts, in a
TrainingJob's restart reason, and as the `reason` label of `gpufleet_evictions_total`; a dashboard or
an alert that filters on one works in both worlds. Kubernetes' own condition reasons
(`DeletionByTaintManager`, `EvictionByEvictionAPI`, ...) name causes the embedded world has no word
for and are kept as they are; the ones that mean one of ours are translated by `kube.disruptions`.
"""

from __future__ import annotations

from typing import Final

PREEMPTED: Final = "Preempted"
"""The scheduler evicted the whole gang for another workload (a shrink toward `minCount` is not one)."""
SUSPENDED: Final = "Suspended"
"""`spec.suspend` stopped a running TrainingJob or InferenceService."""
SPOT_INTERRUPTION: Final = "SpotInterruption"
"""The node's spot capacity was taken back (or its notice drained it)."""
NODE_UNHEALTHY: Final = "NodeUnhealthy"
"""A GPU of the node is unhealthy (an XID, a failed health check) and the node was drained."""
NODE_NOT_READY: Final = "NodeNotReady"
"""The node stopped being Ready under the workload."""
NODE_LOST: Final = "NodeLost"
"""The node left the fleet under the workload."""
GPU_FAILURE: Final = "GPUFailure"
"""A GPU the workload held failed."""
