"""`gpufleet manifests crds`: valid YAML, structural schemas, and schemas that agree with the models."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.api import load_objects, registered_kinds
from gpufleet.api.crd import custom_resource_definitions
from gpufleet.cli.main import app

FREE_FORM = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"


def assert_structural(node: dict[str, Any], path: str = "") -> None:
    """Kubernetes' structural-schema rules, as far as gpufleet's schemas use them."""
    forbidden = {"$ref", "$defs", "const", "oneOf", "allOf", "not", "title", "default"} & node.keys()
    assert not forbidden, f"{path}: {forbidden}"
    if "anyOf" in node:
        assert node.get(INT_OR_STRING), f"{path}: anyOf outside int-or-string"
        assert [option["type"] for option in node["anyOf"]] == ["integer", "string"], path
        return
    if "type" not in node:
        assert node.get(FREE_FORM) is True, f"{path}: no type"
        return
    if node["type"] == "object":
        if "properties" in node:
            assert "additionalProperties" not in node, f"{path}: properties and additionalProperties"
            for name, child in node["properties"].items():
                assert_structural(child, f"{path}.{name}")
        elif isinstance(node.get("additionalProperties"), dict):
            assert_structural(node["additionalProperties"], f"{path}.*")
        elif path != ".metadata":  # the API server owns the schema of metadata
            assert node.get(FREE_FORM) is True, f"{path}: object without properties"
    if node["type"] == "array":
        assert_structural(node["items"], f"{path}[]")
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if bound in node:
            assert node[bound] is True, f"{path}: {bound} must be the OpenAPI v3 boolean"


def crds_from_cli() -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["manifests", "crds"])
    assert result.exit_code == 0, result.output
    return list(yaml.safe_load_all(result.output))


def test_cli_prints_one_crd_per_kind() -> None:
    crds = crds_from_cli()
    by_kind = {crd["spec"]["names"]["kind"]: crd for crd in crds}
    assert set(by_kind) == {
        "GPUPool",
        "Queue",
        "TrainingJob",
        "InferenceService",
        "Checkpoint",
        "ModelVersion",
        "ServiceLoad",  # the kubernetes world's InferenceService operator reads and writes it
        "Cluster",  # a federation's worker cluster, in the management cluster
    }
    job = by_kind["TrainingJob"]
    assert job["apiVersion"] == "apiextensions.k8s.io/v1"
    assert job["metadata"]["name"] == "trainingjobs.gpufleet.io"
    assert job["spec"]["scope"] == "Namespaced"
    assert job["spec"]["names"]["shortNames"] == ["tj"] and job["spec"]["names"]["singular"] == "trainingjob"
    (version,) = job["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["storage"] and version["subresources"] == {"status": {}}
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase" and columns["Queue"] == ".spec.queue"
    assert columns["Age"] == ".metadata.creationTimestamp"
    assert by_kind["GPUPool"]["spec"]["scope"] == "Cluster" and by_kind["Queue"]["spec"]["scope"] == "Cluster"


def test_cli_writes_to_a_file(tmp_path) -> None:
    target = tmp_path / "crds.yaml"
    result = CliRunner().invoke(app, ["manifests", "crds", "--output-file", str(target)])
    assert result.exit_code == 0
    assert len(list(yaml.safe_load_all(target.read_text()))) == 8


def test_cli_output_is_a_format() -> None:
    """`-o` is the output format, as everywhere in the CLI (it once named a file)."""
    listed = json.loads(CliRunner().invoke(app, ["manifests", "crds", "-o", "json"]).output)
    assert listed["kind"] == "List" and listed["items"] == custom_resource_definitions()
    assert (
        len(list(yaml.safe_load_all(CliRunner().invoke(app, ["manifests", "crds", "-o", "yaml"]).output)))
        == 8
    )
    refused = CliRunner().invoke(app, ["manifests", "crds", "-o", "crds.yaml"])
    assert refused.exit_code != 0 and "must be yaml or json" in str(refused.exception)


@pytest.mark.parametrize("crd", custom_resource_definitions(), ids=lambda crd: crd["spec"]["names"]["kind"])
def test_schemas_are_structural(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert_structural(schema)
    assert schema["properties"]["metadata"] == {"type": "object"}


def test_free_form_only_where_the_model_is_free_form() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in custom_resource_definitions()}
    spec = crds["TrainingJob"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    worker = spec["properties"]["worker"]["properties"]
    assert worker["template"] == {
        "type": "object",
        FREE_FORM: True,
        "description": worker["template"]["description"],
    }
    assert worker["cpu"][INT_OR_STRING] is True
    assert worker["gpus"] == {
        "minimum": 0,
        "maximum": 72,
        "type": "integer",
        "description": "Whole GPUs per pod.",
    }
    assert FREE_FORM not in spec and FREE_FORM not in spec["properties"]["worker"]
    assert worker["mig"]["pattern"].startswith("^")
    quota = schema_of("Queue")["properties"]["spec"]["properties"]["quotas"]["additionalProperties"]
    assert quota["properties"]["nominal"] == {
        "minimum": 0,
        "type": "number",
        "description": "GPUs the queue is guaranteed.",
    }


def schema_of(kind: str) -> dict[str, Any]:
    for crd in custom_resource_definitions():
        if crd["spec"]["names"]["kind"] == kind:
            return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    raise KeyError(kind)


def test_contract_objects_pass_their_crd_schema(contract_yaml: str) -> None:
    for obj in load_objects(contract_yaml):
        jsonschema.Draft4Validator(schema_of(obj.kind)).validate(obj.to_dict())


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "worker", "gpus"), -1),
        (("spec", "replicas"), 0),
        (("spec", "worker", "gpuMilli"), 1000),
        (("spec", "checkpoint", "intervalSeconds"), 0),
        (("status", "phase"), "Sleeping"),
    ],
)
def test_crd_schema_rejects_what_the_model_rejects(
    contract_yaml: str, path: tuple[str, ...], value: object
) -> None:
    job = next(obj for obj in load_objects(contract_yaml) if obj.kind == "TrainingJob").to_dict()
    target = job
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    if path[-1] in ("gpuMilli", "mig"):
        del target["gpus"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema_of("TrainingJob")).validate(job)


def test_every_registered_crd_kind_has_a_crd() -> None:
    wanted = {info.kind for info in registered_kinds() if info.crd}
    assert wanted == {crd["spec"]["names"]["kind"] for crd in custom_resource_definitions()}
