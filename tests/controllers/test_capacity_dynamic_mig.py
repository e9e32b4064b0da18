"""What a fresh node of a `dra` pool with MIG GPUs holds, for the autoscaler: its MIG GPUs are
partitioned by claims (dynamic MIG), so whole GPUs fit there, and as many instances of a profile as
the profile allows per GPU, whatever profiles `sharing.mig` lists."""

from __future__ import annotations

from gpufleet.api import load_objects
from gpufleet.api.pool import GPUPool
from gpufleet.api.requests import PodRequest
from gpufleet.controllers.capacity import pods_per_node

POOLS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: dra}
spec: {gpuModel: A100-40GB, gpusPerNode: 4, dra: true, sharing: {mig: {"0": [7g.40gb], "1": [7g.40gb]}}}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: fixed}
spec: {gpuModel: A100-40GB, gpusPerNode: 4, sharing: {mig: {"*": [3g.20gb, 3g.20gb]}}}
"""


def test_dra_dynamic_mig_pool_capacity_counts_whole_gpus_and_every_instance_a_profile_allows() -> None:
    pools = {p.name: p.spec for p in load_objects(POOLS) if isinstance(p, GPUPool)}
    dynamic, fixed = pools["dra"], pools["fixed"]
    assert pods_per_node(PodRequest(gpus=2), dynamic) == 2
    assert pods_per_node(PodRequest(mig="3g.20gb"), dynamic) == 4  # two per MIG GPU, GPUs 0 and 1
    assert pods_per_node(PodRequest(mig="1g.5gb"), dynamic) == 14
    assert pods_per_node(PodRequest(mig="3g.40gb"), dynamic) == 0  # not a profile of the model
    # a pool without dra keeps its fixed layout
    assert pods_per_node(PodRequest(gpus=1), fixed) == 0
    assert pods_per_node(PodRequest(mig="3g.20gb"), fixed) == 8
