"""DRA allocation on one node, case by case: what kube-scheduler's DynamicResources plugin would give a
pod's claims, or why it cannot."""

from __future__ import annotations

from dra_builders import CLASSES, DRIVER, GPU_CLASS, MIG_CLASS, claim, gpu, gpus, node_of, request, slice_spec

from gpufleet.fleet.devices import node_devices
from gpufleet.scheduler.placement.dra import (
    ClaimAllocation,
    DraUnsatisfied,
    PodClaim,
    allocate_claims,
)


def _allocate(
    claims: list[PodClaim], node: object, **kwargs: object
) -> list[ClaimAllocation] | DraUnsatisfied:
    return allocate_claims(claims, node_name="n1", node=node, classes=CLASSES, **kwargs)


def _names(result: list[ClaimAllocation] | DraUnsatisfied) -> list[list[str]]:
    assert not isinstance(result, DraUnsatisfied), result.describe()
    return [[d.device for d in allocation.devices] for allocation in result]


def _reason(result: list[ClaimAllocation] | DraUnsatisfied) -> DraUnsatisfied:
    assert isinstance(result, DraUnsatisfied), result
    return result


MIXED = node_of(
    slice_spec("n1", gpus("n1", 4, product="A100") + [gpu(f"gpu-{i}", product="H100") for i in range(4, 8)])
)
H100_ONLY = 'device.attributes["gpu.nvidia.com"].productName == "H100"'


def test_exact_count_takes_the_first_matching_devices() -> None:
    result = _allocate([claim("c", request(count=2, selectors=[H100_ONLY]))], MIXED)
    assert _names(result) == [["gpu-4", "gpu-5"]]


def test_the_allocation_pins_the_pod_to_the_node_and_carries_the_class_config() -> None:
    result = _allocate([claim("c", request(count=1))], MIXED)
    assert not isinstance(result, DraUnsatisfied)
    status = result[0].to_status().model_dump(by_alias=True, exclude_none=True)
    term = status["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert (term["key"], term["values"]) == ("metadata.name", ["n1"])
    assert status["devices"]["results"] == [
        {"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}
    ]
    assert status["devices"]["config"][0]["source"] == "FromClass"


def test_too_few_matching_devices_names_the_request_the_class_and_the_selector() -> None:
    reason = _reason(_allocate([claim("c", request(count=5, selectors=[H100_ONLY]))], MIXED))
    assert (reason.claim, reason.request, reason.device_class, reason.wanted) == (
        "team-a/c",
        "gpus",
        GPU_CLASS,
        5,
    )
    assert reason.rejected == {"request selector 0": 4}
    assert "request selector 0" in reason.describe()


def test_devices_other_claims_hold_are_not_given_again() -> None:
    held = [(DRIVER, "n1", "gpu-4"), (DRIVER, "n1", "gpu-5")]
    assert _names(_allocate([claim("c", request(count=2, selectors=[H100_ONLY]))], MIXED, in_use=held)) == [
        ["gpu-6", "gpu-7"]
    ]
    reason = _reason(_allocate([claim("c", request(count=3, selectors=[H100_ONLY]))], MIXED, in_use=held))
    assert reason.rejected["allocated to other claims"] == 2


def test_two_claims_of_one_pod_get_different_devices() -> None:
    result = _allocate([claim("a", request(count=1)), claim("b", request(count=1))], MIXED)
    assert _names(result) == [["gpu-0"], ["gpu-1"]]


def test_an_unknown_class_is_named() -> None:
    reason = _reason(_allocate([claim("c", request(device_class="tpu.google.com"))], MIXED))
    assert "DeviceClass tpu.google.com does not exist" in reason.describe()


def test_all_mode_takes_every_matching_device_and_none_if_one_is_in_use() -> None:
    assert _names(_allocate([claim("c", request(mode="All", selectors=[H100_ONLY]))], MIXED)) == [
        ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    ]
    reason = _reason(
        _allocate(
            [claim("c", request(mode="All", selectors=[H100_ONLY]))], MIXED, in_use=[(DRIVER, "n1", "gpu-7")]
        )
    )
    assert "some are in use" in reason.message


def test_all_mode_waits_for_a_pool_to_be_fully_published() -> None:
    half = node_of(slice_spec("n1", gpus("n1", 2), count=2))
    assert "not fully published" in _reason(_allocate([claim("c", request(mode="All"))], half)).message
    # one device at a time may still come from it, as in Kubernetes
    assert _names(_allocate([claim("c", request(count=1))], half)) == [["gpu-0"]]


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = slice_spec("n1", gpus("n1", 8), generation=1)
    new = slice_spec("n1", gpus("n1", 2), generation=2)
    node = node_of(old, new)
    assert [d.device.name for d in node.devices()] == ["gpu-0", "gpu-1"]
    assert _reason(_allocate([claim("c", request(count=3))], node)).wanted == 3


def test_a_node_reaches_only_its_own_slices() -> None:
    node = node_devices([slice_spec("n2", gpus("n2", 8))], node_name="n1", labels={})
    assert node.devices() == []


CLIQUES = node_of(
    slice_spec(
        "n1", [gpu(f"gpu-{i}", clique="a" if i in (0, 2, 4) else "b") for i in range(8)] + [gpu("gpu-8")]
    )
)
SAME_CLIQUE = [{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/cliqueId"}]


def test_match_attribute_keeps_a_claims_gpus_in_one_nvlink_clique() -> None:
    # clique a has three GPUs, so four come from clique b even though gpu-0 is first
    result = _allocate([claim("c", request(count=4), constraints=SAME_CLIQUE)], CLIQUES)
    assert _names(result) == [["gpu-1", "gpu-3", "gpu-5", "gpu-6"]]


def test_match_attribute_that_no_set_meets_is_named() -> None:
    reason = _reason(_allocate([claim("c", request(count=6), constraints=SAME_CLIQUE)], CLIQUES))
    assert reason.request == "gpus"
    assert reason.rejected["matchAttribute gpu.nvidia.com/cliqueId"] > 0
    assert "constraints" in reason.message


def test_match_attribute_applies_per_claim() -> None:
    claims = [claim(n, request(count=3), constraints=SAME_CLIQUE) for n in ("a", "b")]
    assert _names(_allocate(claims, CLIQUES)) == [["gpu-0", "gpu-2", "gpu-4"], ["gpu-1", "gpu-3", "gpu-5"]]


def test_admin_access_is_refused_unless_the_namespace_allows_it() -> None:
    held = [(DRIVER, "n1", f"gpu-{i}") for i in range(8)]
    monitor = [claim("m", request(count=1, admin=True))]
    assert "admin access is not allowed" in _reason(_allocate(monitor, MIXED, in_use=held)).message
    result = _allocate(monitor, MIXED, in_use=held, admin_namespaces={"team-a"})
    assert _names(result) == [["gpu-0"]]
    assert not isinstance(result, DraUnsatisfied) and result[0].devices[0].admin_access
    # a request without it never gets a device in use
    assert isinstance(_allocate([claim("c", request(count=1))], MIXED, in_use=held), DraUnsatisfied)


# One GPU published as partitionable: the whole GPU and its MIG partitions share its 8 memory slices.
MIG_NODE = node_of(
    slice_spec(
        "n1",
        [
            gpu("gpu-0", counters={"memorySlices": "8"}),
            gpu("gpu-0-mig-4g-0", kind="mig", memory="40Gi", counters={"memorySlices": "4"}),
            gpu("gpu-0-mig-4g-1", kind="mig", memory="40Gi", counters={"memorySlices": "4"}),
            gpu("gpu-0-mig-1g-0", kind="mig", memory="10Gi", counters={"memorySlices": "1"}),
        ],
        counter_sets={"gpu-0": {"memorySlices": "8"}},
    )
)


def test_mig_partitions_share_their_gpus_counters() -> None:
    two = [
        claim(
            n,
            request(
                "mig",
                device_class=MIG_CLASS,
                count=1,
                selectors=['device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'],
            ),
        )
        for n in ("a", "b")
    ]
    assert _names(_allocate(two, MIG_NODE)) == [["gpu-0-mig-4g-0"], ["gpu-0-mig-4g-1"]]
    # with one partition taken, the whole GPU no longer fits in its counters
    held = [(DRIVER, "n1", "gpu-0-mig-1g-0")]
    reason = _reason(_allocate([claim("c", request(count=1))], MIG_NODE, in_use=held))
    assert reason.rejected == {"shared counters": 1}
    # and two 4g partitions do not fit beside the 1g one either
    reason = _reason(
        _allocate(
            [
                claim(
                    "c",
                    request(
                        "mig",
                        device_class=MIG_CLASS,
                        count=2,
                        selectors=[
                            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
                        ],
                    ),
                )
            ],
            MIG_NODE,
            in_use=held,
        )
    )
    assert reason.rejected["shared counters"] >= 1


def test_a_search_that_runs_out_of_steps_says_so() -> None:
    many = node_of(slice_spec("n1", [gpu(f"gpu-{i}", clique=str(i % 7)) for i in range(14)]))
    reason = _reason(_allocate([claim("c", request(count=3), constraints=SAME_CLIQUE)], many, max_steps=10))
    assert "gave up after 10 steps" in reason.message
