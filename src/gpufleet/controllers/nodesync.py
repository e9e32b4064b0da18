"""Keeping a fleet row in step with a node as its world reports it (embedded Node or Kubernetes Node).

A node's cordon and GPU health change in place: pods stay where they are and the core stops placing
new ones there. Anything else (GPU count or model, labels, taints, sharing, MIG layout) changes the
node's shape, which the fleet cannot edit in place: the caller removes the row and adds it again, and
decides what becomes of the pods that were on it (the embedded world evicts their gangs; the
Kubernetes world accounts them again, since the kubelet, not gpufleet, decides whether they run).
"""

from __future__ import annotations

from gpufleet.controllers.convert import same_shape
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.state import FleetState


def update_in_place(fleet: FleetState, spec: NodeSpec) -> bool:
    """Applies cordon and GPU health; False (and nothing changed) when the node changed shape."""
    row = fleet.row_of(spec.name)
    if not same_shape(spec, fleet.specs[row]):
        return False
    unhealthy = set(spec.unhealthy_gpus)
    for gpu in range(spec.gpus):
        healthy = gpu not in unhealthy
        if bool(fleet.gpu_ok[row, gpu]) != healthy:
            fleet.set_gpu_health(spec.name, gpu, healthy)
    if bool(fleet.schedulable[row]) == spec.unschedulable:
        fleet.set_schedulable(spec.name, not spec.unschedulable)
    return True
