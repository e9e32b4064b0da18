"""DRA selectors in CEL read a device as Kubernetes presents it: attributes and capacity by domain,
quantities and versions compared by value."""

from __future__ import annotations

import pytest
from dra_builders import DRIVER, gpu

from gpufleet.api.dra_devices import Device
from gpufleet.scheduler.placement.dra import CelSelectorError, SelectorCache, evaluate_selector

H100 = Device.model_validate(
    gpu("gpu-0", product="H100", memory="80Gi")
    | {
        "attributes": {
            "productName": {"string": "H100"},
            "driverVersion": {"version": "550.54.15"},
            "index": {"int": 3},
            "gpu.nvidia.com/cliqueId": {"string": "c1"},
        }
    }
)


@pytest.mark.parametrize(
    ("expression", "matched"),
    [
        (
            'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName == "H100"',
            True,
        ),
        (
            'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName == "A100"',
            False,
        ),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("96Gi")) >= 0', False),
        # the same amount in another notation is equal
        ('device.capacity["gpu.nvidia.com"].memory == quantity("81920Mi")', True),
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80Gi"))', False),
        ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))', True),
        ('device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("560.1.0")) < 0', True),
        ('device.attributes["gpu.nvidia.com"].index == 3', True),
        # a qualified attribute of the driver's domain is read where an unqualified one is
        ('device.attributes["gpu.nvidia.com"].cliqueId == "c1"', True),
        ('"productName" in device.attributes["gpu.nvidia.com"]', True),
    ],
)
def test_selectors_read_the_device_as_kubernetes_does(expression: str, matched: bool) -> None:
    verdict = evaluate_selector(expression, DRIVER, H100)
    assert (verdict.matched, verdict.error) == (matched, None)


def test_a_missing_attribute_does_not_match_and_says_why() -> None:
    verdict = evaluate_selector('device.attributes["gpu.nvidia.com"].nope == "x"', DRIVER, H100)
    assert not verdict.matched
    assert verdict.error and "nope" in verdict.error


def test_a_non_boolean_result_does_not_match() -> None:
    verdict = evaluate_selector("device.driver", DRIVER, H100)
    assert not verdict.matched and verdict.error and "not a bool" in verdict.error


def test_an_expression_that_does_not_parse_is_a_user_error() -> None:
    with pytest.raises(CelSelectorError, match=r"cel\.expression"):
        evaluate_selector("device.driver ==", DRIVER, H100)


def test_the_cache_answers_again_without_evaluating() -> None:
    cache = SelectorCache()
    identity = (DRIVER, "n1", 1, "gpu-0")
    first = cache.evaluate('device.attributes["gpu.nvidia.com"].index == 3', identity, H100)
    assert first.matched
    # a device with different content under the same identity (same pool generation) is not looked at
    other = Device.model_validate(gpu("gpu-0"))
    assert cache.evaluate('device.attributes["gpu.nvidia.com"].index == 3', identity, other) is first
    # a new generation of the pool is asked afresh
    fresh = cache.evaluate(
        'device.attributes["gpu.nvidia.com"].index == 3', (DRIVER, "n1", 2, "gpu-0"), other
    )
    assert not fresh.matched
