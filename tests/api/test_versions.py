"""cudaVersion on pod requests and driverVersion on pools: accepted shapes, refusals naming the field."""

from __future__ import annotations

import re

import pytest

from gpufleet.api import GPUPool, TrainingJob, load_objects, parse_object
from gpufleet.api.crd import custom_resource_definitions
from gpufleet.api.errors import ValidationError

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: llm, namespace: team-a}}
spec: {{replicas: 2, worker: {{gpus: 8, cudaVersion: {version}}}}}
"""
SERVICE = """
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {{name: chat}}
spec: {{replicas: {{max: 2}}, replica: {{gpus: 1, cudaVersion: {version}}}}}
"""
POOL = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {{name: p}}
spec: {{gpuModel: H100-80GB, gpusPerNode: 8, driverVersion: {version}}}
"""


@pytest.mark.parametrize(
    ("written", "kept", "parsed"),
    [('"12.4"', "12.4", (12, 4)), ("12.8", "12.8", (12, 8)), ('"12.4.1"', "12.4.1", (12, 4))],
)
def test_a_worker_states_its_cuda_version(written: str, kept: str, parsed: tuple[int, int]) -> None:
    (job,) = load_objects(JOB.format(version=written))
    assert isinstance(job, TrainingJob)
    assert job.spec.worker.cuda_version == kept and job.spec.worker.cuda == parsed
    assert job.to_dict()["spec"]["worker"]["cudaVersion"] == kept


def test_no_cuda_version_means_none_stated() -> None:
    (job,) = load_objects(JOB.format(version="null"))
    assert isinstance(job, TrainingJob)
    assert job.spec.worker.cuda is None and "cudaVersion" not in job.to_dict()["spec"]["worker"]


@pytest.mark.parametrize("version", ['"12"', '"12.x"', '"v12.4"', '"cuda12.4"', "12", '"12.04"'])
def test_malformed_cuda_versions_are_refused_naming_object_and_field(version: str) -> None:
    with pytest.raises(ValidationError) as caught:
        load_objects(JOB.format(version=version))
    assert str(caught.value).startswith("TrainingJob team-a/llm: field spec.worker.cudaVersion: ")
    assert "is not a CUDA version such as 12.4" in str(caught.value)
    where = r"InferenceService default/chat: field spec\.replica\.cudaVersion"
    with pytest.raises(ValidationError, match=where):
        load_objects(SERVICE.format(version=version))


def test_a_pool_states_its_driver() -> None:
    (pool,) = load_objects(POOL.format(version='"450.80.02"'))
    assert isinstance(pool, GPUPool) and pool.spec.driver_version == "450.80.02"
    (pool,) = load_objects(POOL.format(version="null"))
    assert isinstance(pool, GPUPool) and pool.spec.driver_version is None


@pytest.mark.parametrize("version", ['"550"', '"r550.54"', '"550.54.15-1"'])
def test_malformed_driver_versions_are_refused(version: str) -> None:
    where = r"GPUPool p: field spec\.driverVersion: .* is not an NVIDIA driver"
    with pytest.raises(ValidationError, match=where):
        load_objects(POOL.format(version=version))


def test_an_unquoted_driver_version_is_refused_not_misread() -> None:
    # YAML reads 550.50 as the number 550.5: a driver version must be quoted to keep its digits.
    with pytest.raises(ValidationError, match=r"field spec\.driverVersion: must be a string"):
        load_objects(POOL.format(version="550.50"))


def test_the_crd_schema_checks_the_same_shapes() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in custom_resource_definitions()}

    def spec_schema(kind: str) -> dict:
        version = crds[kind]["spec"]["versions"][0]
        return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

    cuda = spec_schema("TrainingJob")["worker"]["properties"]["cudaVersion"]
    driver = spec_schema("GPUPool")["driverVersion"]
    assert cuda["type"] == driver["type"] == "string"
    for text, ok in (("12.4", True), ("12.4.1", True), ("12", False), ("12.04", False)):
        assert bool(re.match(cuda["pattern"], text)) is ok, text
    for text, ok in (("550.54.15", True), ("570.26", True), ("550", False)):
        assert bool(re.match(driver["pattern"], text)) is ok, text
    # What the API server would accept, parse_object accepts too.
    parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": {"name": "p"},
            "spec": {"gpuModel": "H100-80GB", "gpusPerNode": 8, "driverVersion": "570.26"},
        }
    )
