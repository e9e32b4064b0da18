"""Messages in the command's own words, and a demo fleet whose services find their models."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpufleet.api.documents import load_objects
from gpufleet.api.errors import ValidationError
from gpufleet.cli.up import demo_objects

from .conftest import Result


@pytest.mark.parametrize("kind", ["gpu-failure", "gpu-repair"])
def test_a_gpu_fault_without_gpu_says_which_option_is_missing(cli: Callable[..., Result], kind: str) -> None:
    result = cli("fault", kind, "h100-a1-0")
    assert result.code == 2
    assert f"--gpu is required for {kind}" in result.err + result.out
    assert "GpuFailure" not in result.err + result.out and "GpuRepair" not in result.err + result.out


def test_an_unserved_api_version_says_which_one_to_use() -> None:
    text = "apiVersion: gpufleet.io/v1beta9\nkind: TrainingJob\nmetadata: {name: j}\nspec: {}\n"
    with pytest.raises(ValidationError) as caught:
        load_objects(text)
    assert "apiVersion 'gpufleet.io/v1beta9' is not served; use gpufleet.io/v1alpha1" in str(caught.value)


def test_every_demo_service_has_its_model_version() -> None:
    objects = demo_objects()
    versions = {(o.namespace, o.name) for o in objects if o.kind == "ModelVersion"}
    services = [o for o in objects if o.kind == "InferenceService"]
    assert services
    for service in services:
        assert (service.namespace, service.spec.model_version) in versions, service.name  # type: ignore[attr-defined]
