"""The twin's nodes as DRA drivers: a node of a `dra` pool publishes its GPUs in ResourceSlices (driver
gpu.nvidia.com, `sharing/dra_slices.py`) while it is Ready, keeps them current as GPUs fail and recover
(a new pool generation without the failed GPU), and withdraws them when it goes.

A MIG GPU (named in the pool's `sharing.mig`) publishes every placement the catalogue allows, as
NVIDIA's driver does with dynamic MIG: the node has no fixed layout, its instances are those its claims
were allocated (`fleet/dynmig.py`), so the profiles listed there are not a layout.

Writes only when what the node publishes changed, so the node events its own writes cause settle.
"""

from __future__ import annotations

import contextlib
import itertools

from gpufleet.api.dra import ResourceSlice
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.api.errors import NotFoundError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Node
from gpufleet.sharing.dra_slices import DRIVER, node_slices, slice_name
from gpufleet.store.protocol import Store


def published(store: Store, node: str) -> list[ResourceSlice]:
    """The node's slices of our driver, in index order. Found by their names (`slice_name`), which
    `publish` keeps numbered from 0 without a gap: listing every slice for each node's event made a
    pool of a thousand DRA nodes take minutes to come up."""
    found: list[ResourceSlice] = []
    for index in itertools.count():
        try:
            stored = store.get(ResourceSlice, slice_name(node, index))
        except NotFoundError:
            break
        if stored.spec.node_name == node and stored.spec.driver == DRIVER:
            found.append(stored)
    return found


def wanted_slices(node: Node, generation: int) -> list[ResourceSliceSpec]:
    """What a node publishes at `generation`: nothing unless it is a Ready node of a `dra` pool."""
    spec = node.spec
    if not spec.dra or node.status.phase != "Ready":
        return []
    mig = spec.sharing.mig or {}
    mig_gpus = [g for g in range(spec.gpus) if str(g) in mig or "*" in mig]
    return node_slices(
        node.name,
        gpu_model=spec.gpu_model,
        gpus=spec.gpus,
        mig_gpus=mig_gpus,
        unhealthy=node.status.unhealthy_indices,
        driver_version=spec.driver_version or "",
        generation=generation,
        cliques=cliques(node),
    )


def cliques(node: Node) -> dict[int, str]:
    """Each GPU's NVLink clique: the node's NVLink domains (one of all its GPUs when it names none),
    `<node>.<domain>`, in the `<cluster>.<clique>` shape of NVIDIA's clique ids."""
    domains = node.spec.nvlink_domains
    if domains is None:
        domains = [list(range(node.spec.gpus))]
    return {gpu: f"{node.name}.{i}" for i, domain in enumerate(domains) for gpu in domain}


def publish(store: Store, node: Node) -> None:
    """Brings the node's stored slices in line with what it should publish now."""
    current = published(store, node.name)
    generation = max((s.spec.pool.generation for s in current), default=0)
    wanted = wanted_slices(node, generation)
    if [s.spec for s in current] == wanted:
        return
    wanted = wanted_slices(node, generation + 1)
    for index, spec in enumerate(wanted):
        obj = ResourceSlice(metadata=ObjectMeta(name=slice_name(node.name, index)), spec=spec)
        store.apply(obj)
    for stale in current[len(wanted) :]:
        withdraw_one(store, stale.name)


def withdraw(store: Store, node: str) -> None:
    """A node that is gone publishes nothing."""
    for stale in published(store, node):
        withdraw_one(store, stale.name)


def withdraw_one(store: Store, name: str) -> None:
    with contextlib.suppress(NotFoundError):  # already gone
        store.delete(ResourceSlice, name)
