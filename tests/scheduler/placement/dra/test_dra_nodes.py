"""DRA over many nodes: where a pod's claims fit, and for the rest how many nodes each check rejected."""

from __future__ import annotations

from dra_builders import CLASSES, DRIVER, claim, gpu, node_of, request, slice_spec

from gpufleet.scheduler.placement.dra import filter_nodes

H100_ONLY = 'device.attributes["gpu.nvidia.com"].productName == "H100"'


def test_each_rejected_node_is_counted_once_against_its_main_check() -> None:
    nodes = {
        name: node_of(slice_spec(name, [gpu(f"gpu-{i}", product=product) for i in range(8)]), name=name)
        for name, product in (("n1", "H100"), ("n2", "A100"), ("n3", "H100"), ("n4", "A100"))
    }
    nodes["n5"] = node_of(name="n5")  # publishes no devices
    held = [(DRIVER, "n3", f"gpu-{i}") for i in range(2)]
    result = filter_nodes(
        [claim("c", request(count=8, selectors=[H100_ONLY]))], nodes, classes=CLASSES, in_use=held
    )
    assert list(result.fits) == ["n1"]
    assert [d.device for d in result.fits["n1"][0].devices] == [f"gpu-{i}" for i in range(8)]
    assert result.rejected == {
        "claim team-a/c request gpus: request selector 0": 2,
        "claim team-a/c request gpus: allocated to other claims": 1,
        "claim team-a/c request gpus: 0 of the node's devices match and are free": 1,
    }
    assert sum(result.rejected.values()) + len(result.fits) == len(nodes)
    assert result.message().startswith(
        "1/5 nodes have the devices: 2 claim team-a/c request gpus: request selector 0"
    )
    assert result.example["claim team-a/c request gpus: allocated to other claims"].rejected == {
        "allocated to other claims": 2
    }


def test_a_node_whose_matching_devices_are_taken_is_counted_against_that_not_its_other_devices() -> None:
    # Six A100s the selector turns away and two H100s held by other claims: the node does not fit
    # because its H100s are taken, which is what the count must say (the selector's 6 are not why).
    devices = [gpu(f"gpu-{i}", product="A100") for i in range(6)] + [gpu(f"gpu-{i}") for i in (6, 7)]
    nodes = {"n1": node_of(slice_spec("n1", devices), name="n1")}
    held = [(DRIVER, "n1", "gpu-6"), (DRIVER, "n1", "gpu-7")]
    result = filter_nodes(
        [claim("c", request(count=1, selectors=[H100_ONLY]))], nodes, classes=CLASSES, in_use=held
    )
    assert result.rejected == {"claim team-a/c request gpus: allocated to other claims": 1}
    assert result.example["claim team-a/c request gpus: allocated to other claims"].rejected == {
        "request selector 0": 6,
        "allocated to other claims": 2,
    }
