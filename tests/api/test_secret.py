"""The Secret kind: its values print as stars everywhere except where they are asked for explicitly."""

from __future__ import annotations

import pytest

from gpufleet.api import load_objects
from gpufleet.api.errors import GpuFleetError, NotFoundError
from gpufleet.api.secret import Secret

YAML = """
apiVersion: gpufleet.io/v1alpha1
kind: Secret
metadata: {name: w1, namespace: gpufleet-system}
spec: {data: {token: abc-123}}
"""


def secret() -> Secret:
    obj = load_objects(YAML)[0]
    assert isinstance(obj, Secret)
    return obj


def test_values_are_hidden_unless_revealed() -> None:
    obj = secret()
    assert obj.to_dict()["spec"]["data"] == {"token": "**********"}
    assert "abc-123" not in repr(obj) and "abc-123" not in str(obj)
    assert obj.to_dict(reveal_secrets=True)["spec"]["data"] == {"token": "abc-123"}
    assert obj.value("token") == "abc-123"


def test_a_missing_key_names_the_secret() -> None:
    with pytest.raises(NotFoundError, match=r"Secret gpufleet-system/w1.*'password'"):
        secret().value("password")


def test_a_bad_key_is_refused_with_its_field() -> None:
    with pytest.raises(GpuFleetError, match=r"spec\.data"):
        load_objects(YAML.replace("token:", "'bad key':"))


def test_a_value_read_back_hidden_cannot_be_written_over_the_real_one() -> None:
    with pytest.raises(GpuFleetError, match=r"spec\.data.*how a hidden value is shown"):
        load_objects(YAML.replace("abc-123", "'**********'"))
