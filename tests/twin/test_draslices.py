"""What a twin node of a `dra` pool publishes: its GPUs' NVLink cliques follow its NVLink domains, so a
claim's matchAttribute on `gpu.nvidia.com/cliqueId` means what it means on NVIDIA's driver."""

from __future__ import annotations

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Node, NodeSpec
from gpufleet.twin.draslices import wanted_slices


def node(nvlink_domains: list[list[int]] | None) -> Node:
    spec = NodeSpec(gpu_model="H100-80GB", gpus=8, nvlink_domains=nvlink_domains, dra=True)
    ready = Node(metadata=ObjectMeta(name="n1"), spec=spec)
    ready.status.phase = "Ready"
    return ready


def cliques(published: Node) -> dict[str, object]:
    return {d.name: d.attributes["cliqueId"].value for s in wanted_slices(published, 1) for d in s.devices}


def test_dra_twin_gpus_publish_the_clique_of_their_nvlink_domain() -> None:
    assert set(cliques(node(None)).values()) == {"n1.0"}  # no domains named: one of all the GPUs
    split = cliques(node([[0, 1, 2, 3], [4, 5, 6, 7]]))
    assert split["gpu-3"] == "n1.0" and split["gpu-4"] == "n1.1"


def test_a_node_finds_its_slices_by_name_without_listing_every_nodes() -> None:
    from gpufleet.api.dra import ResourceSlice
    from gpufleet.sharing.dra_slices import slice_name
    from gpufleet.store.memory import MemoryStore
    from gpufleet.twin import draslices

    store = MemoryStore()
    listed: list[object] = []
    real_list = store.list

    def counting_list(kind, *args, **kwargs):  # type: ignore[no-untyped-def]
        listed.append(kind)
        return real_list(kind, *args, **kwargs)

    store.list = counting_list  # type: ignore[method-assign]
    nodes = []
    for name in ("n1", "n2", "n3"):
        ready = node(None).model_copy(update={"metadata": ObjectMeta(name=name)})
        draslices.publish(store, ready)
        nodes.append(ready)
    assert [s.spec.node_name for s in draslices.published(store, "n2")] == ["n2"]
    draslices.publish(store, nodes[1])  # unchanged: nothing written
    assert store.get(ResourceSlice, slice_name("n2", 0)).spec.pool.generation == 1
    nodes[1].status.phase = "NotReady"
    draslices.publish(store, nodes[1])  # withdrawn
    assert draslices.published(store, "n2") == [] and len(draslices.published(store, "n3")) == 1
    assert ResourceSlice not in listed and "ResourceSlice" not in listed
