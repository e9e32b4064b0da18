"""The kind registry: one fixed list of gpufleet's kinds, whatever a process imported first."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Literal

import pytest
from pydantic import Field

from gpufleet.api import ApiModel, ObjectStatus, Resource, TrainingJob
from gpufleet.api.kinds import BUILTIN_KINDS, kind_info, register_kind, registered_kinds, unregister_kind

# The order the CRDs have always been generated in; the manifests change if it does.
CRD_ORDER = [
    "Checkpoint",
    "TrainingJob",
    "InferenceService",
    "ModelVersion",
    "GPUPool",
    "Queue",
    "ServiceLoad",
    "Cluster",
]


class GadgetSpec(ApiModel):
    size: int = Field(ge=1)


class Gadget(Resource):
    """A kind defined outside gpufleet."""

    api_version: Literal["example.com/v1"] = "example.com/v1"
    kind: Literal["Gadget"] = "Gadget"
    spec: GadgetSpec
    status: ObjectStatus = Field(default_factory=ObjectStatus)


@pytest.fixture
def gadget() -> Iterator[None]:
    register_kind(Gadget, plural="gadgets", crd=False)
    yield
    unregister_kind("Gadget")


def test_the_builtin_kinds_come_first_in_their_fixed_order() -> None:
    names = [info.kind for info in registered_kinds()]
    assert names[: len(BUILTIN_KINDS)] == [info.kind for info in BUILTIN_KINDS]
    assert [info.kind for info in BUILTIN_KINDS if info.crd] == CRD_ORDER
    assert {"Node", "Pod", "Workload", "Event", "Scenario"} <= set(names)


def test_every_kind_is_known_in_a_process_that_imported_only_the_loader() -> None:
    """A Scenario was known only once something had imported its module; now the loader alone knows
    it, and the CRDs come in the same order."""
    script = (
        "from gpufleet.api.crd import custom_resource_definitions\n"
        "from gpufleet.api.documents import load_objects\n"
        "(s,) = load_objects('apiVersion: gpufleet.io/v1alpha1\\nkind: Scenario\\nmetadata: {name: s}\\n"
        "spec: {nodes: [{name: n1, gpus: 8, gpuModel: H100-80GB}]}\\n')\n"
        "print(s.kind, *[crd['spec']['names']['kind'] for crd in custom_resource_definitions()])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Scenario", *CRD_ORDER]


def test_a_kind_from_outside_is_registered_explicitly_after_the_builtin_ones(gadget: None) -> None:
    info = kind_info("Gadget")
    assert info is not None and info.model is Gadget and info.api_version == "example.com/v1"
    assert [i.kind for i in registered_kinds()][-1] == "Gadget"
    register_kind(Gadget, plural="gadgets", crd=False)  # the same model again: harmless


def test_a_builtin_kind_cannot_be_taken_over_or_forgotten() -> None:
    with pytest.raises(RuntimeError, match="built in"):
        register_kind(TrainingJob, plural="trainingjobs")
    with pytest.raises(RuntimeError, match="built in"):
        unregister_kind("TrainingJob")
    assert kind_info("TrainingJob") is BUILTIN_KINDS[1]
