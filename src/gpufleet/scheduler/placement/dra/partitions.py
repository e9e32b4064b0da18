"""MIG instances through claims on nodes that partition their GPUs dynamically.

A node that publishes its GPUs in ResourceSlices as partitionable devices (NVIDIA's DRA driver: the whole
GPU and every MIG instance at every start, all consuming the GPU's counters) has no fixed MIG layout:
which instances exist is whatever its claims were allocated, and the shared counters keep them from
overlapping. The fleet's MIG free counts describe fixed layouts (`GPUPool.spec.sharing.mig` of a pool
without `dra`, MIG resources a node advertises), so for such a node they say nothing; the claim
allocator, which sees the devices and their counters, is the one that decides whether a MIG instance
fits. These helpers let the vectorised capacity filters defer to it for those rows, and nowhere else: a
node with a fixed layout keeps being checked against it. Once allocated, the instance is recorded at
its device's GPU and slices (`fleet/dynmig.py`; the twin's `dra` MIG pools work this way too).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.state import MIG_CODE, FleetState
from gpufleet.sharing import mig

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
Rows = slice | npt.NDArray[np.intp]


def partitioned_by_claims(state: FleetState, rows: Rows) -> BoolArray:
    """Per row: does the node hand out MIG instances through claims, with no fixed layout (it publishes
    devices in ResourceSlices and is not in MIG mode)?"""
    names = state.devices.nodes
    size = state.mode[rows].shape[0]
    if not names:
        return np.zeros(size, dtype=np.bool_)
    picked = np.arange(state.n_rows)[rows] if isinstance(rows, slice) else rows
    published = np.fromiter((state.names[int(r)] in names for r in picked), dtype=np.bool_, count=size)
    return np.asarray(published & (state.mode[rows] != MIG_CODE), dtype=np.bool_)


def most_instances(state: FleetState, rows: Rows) -> IntArray:
    """An upper bound of the MIG instances such nodes could still give (each GPU splits into at most
    one instance per memory slice), for ranking topology domains only."""
    return np.asarray(state.gpu_count[rows], dtype=np.int64) * mig.MEMORY_SLICES
