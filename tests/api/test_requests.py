"""PodRequest's tolerations and nodeSelector: optional, validated, and carried into the core's request."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufleet.api.errors import ValidationError as ApiValidationError
from gpufleet.api.requests import PodRequest, Toleration
from gpufleet.controllers.convert import pod_request
from gpufleet.fleet.request import Taint


def test_absent_tolerations_and_selector_leave_the_yaml_as_it_was() -> None:
    request = PodRequest.model_validate({"gpus": 8})
    assert request.to_dict() == {"gpus": 8}
    core = pod_request(request)
    assert core.tolerations == () and core.node_selector == ()


def test_tolerations_and_selector_reach_the_core() -> None:
    request = PodRequest.model_validate(
        {
            "gpus": 1,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"gpufleet.io/pool": "h100-a", "example.com/b": "x"},
        }
    )
    core = pod_request(request)
    assert core.node_selector == (("example.com/b", "x"), ("gpufleet.io/pool", "h100-a"))
    (tol,) = core.tolerations
    assert tol.tolerates(Taint("nvidia.com/gpu", "present", "NoSchedule"))
    assert not tol.tolerates(Taint("nvidia.com/gpu", "present", "NoExecute"))
    assert not tol.tolerates(Taint("other", "", "NoSchedule"))


def test_an_exists_toleration_with_a_value_is_refused() -> None:
    with pytest.raises((ValidationError, ApiValidationError)) as info:
        Toleration.model_validate({"key": "a", "operator": "Exists", "value": "b"})
    assert "value" in str(info.value)


def test_an_unknown_operator_is_refused() -> None:
    with pytest.raises(ValidationError):
        Toleration.model_validate({"key": "a", "operator": "In"})
