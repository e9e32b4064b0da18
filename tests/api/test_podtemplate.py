"""A request's pod template must have its Kubernetes shape where gpufleet reads or writes into it: the
object is refused when written, naming the field, instead of failing the operator on every round."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.validation import parse_object


def _job(template: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm", "namespace": "team-a"},
        "spec": {"replicas": 1, "worker": {"gpus": 8, "template": template}},
    }


def _spec(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "t", "image": "t:1"}], **fields}}


def _container(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "t", "image": "t:1", **fields}]}}


@pytest.mark.parametrize(
    ("template", "field", "why"),
    [
        ({"spec": "x"}, "spec.worker.template.spec", "must be a mapping"),
        ({"metadata": [], **_spec()}, "spec.worker.template.metadata", "must be a mapping"),
        ({"metadata": {"labels": {"a": 1}}, **_spec()}, "spec.worker.template.metadata.labels.a", "string"),
        ({"spec": {"containers": "t"}}, "spec.worker.template.spec.containers", "must be a list"),
        ({"spec": {"containers": ["t"]}}, "spec.worker.template.spec.containers[0]", "must be a mapping"),
        (_container(env={"A": "1"}), "spec.worker.template.spec.containers[0].env", "must be a list"),
        (_container(env=[{"value": "1"}]), "spec.worker.template.spec.containers[0].env[0].name", "a name"),
        (_container(ports=[{"containerPort": 0}]), "containers[0].ports[0].containerPort", "1 to 65535"),
        (_container(ports=[{"containerPort": "80"}]), "containers[0].ports[0].containerPort", "1 to 65535"),
        (_container(resources={"limits": ["cpu"]}), "containers[0].resources.limits", "must be a mapping"),
        (_spec(nodeSelector={"zone": 3}), "spec.worker.template.spec.nodeSelector.zone", "string"),
        (_spec(tolerations={"key": "x"}), "spec.worker.template.spec.tolerations", "must be a list"),
        (_spec(affinity={"nodeAffinity": 1}), "spec.worker.template.spec.affinity.nodeAffinity", "mapping"),
        (
            _spec(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [1]}
                    }
                }
            ),
            "nodeSelectorTerms[0]",
            "must be a mapping",
        ),
    ],
)
def test_a_template_of_the_wrong_shape_is_refused_naming_the_field(
    template: Any, field: str, why: str
) -> None:
    with pytest.raises(GpuFleetError) as refused:
        parse_object(_job(template))
    message = str(refused.value)
    assert message.startswith("TrainingJob team-a/llm: field ") and field in message and why in message


def test_templates_of_the_kubernetes_shape_are_accepted() -> None:
    full = {
        "metadata": {"labels": {"app": "llm"}, "annotations": {"note": "x"}},
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "image": "t:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {}}}],
                    "ports": [{"containerPort": 8000}],
                    "resources": {"limits": {"cpu": "8"}, "requests": {"memory": "1Gi"}},
                }
            ],
            "initContainers": [{"name": "fetch", "image": "f:1"}],
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}
                }
            },
        },
    }
    for template in (None, {}, {"spec": {}}, full):
        parse_object(_job(template))
