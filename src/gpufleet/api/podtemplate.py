"""The shape of the parts of a pod template (a PodTemplateSpec) that gpufleet reads or writes into.

A request's `template` is free-form to the API (and to the CRDs, which keep its unknown fields), since
Kubernetes checks the pod made from it. But the Kubernetes operator reads parts of it before any pod
exists: it merges its labels and annotations, sets the first container's resources and the
rendezvous env, joins its node selector, tolerations and required node affinity with the request's,
and fronts an InferenceService with the first container's ports. A template whose container is a
string, or whose env is a mapping, was accepted and then failed the operator on every round; it is
refused when written, naming the field, as the rest of the request is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.api.errors import ValidationError

MAX_PORT = 65535


def check_template_shape(template: Mapping[str, Any] | None) -> None:
    """Raises ValidationError naming the first field (`template.spec.containers[0].env`, ...) whose
    shape is not what a PodTemplateSpec has there."""
    if template is None:
        return
    meta = _mapping(template.get("metadata"), "template.metadata")
    for key in ("labels", "annotations"):
        _strings(meta.get(key), f"template.metadata.{key}")
    spec = _mapping(template.get("spec"), "template.spec")
    _strings(spec.get("nodeSelector"), "template.spec.nodeSelector")
    _mappings(spec.get("tolerations"), "template.spec.tolerations")
    for group in ("containers", "initContainers"):
        for index, container in enumerate(_mappings(spec.get(group), f"template.spec.{group}")):
            _container(container, f"template.spec.{group}[{index}]")
    affinity = _mapping(spec.get("affinity"), "template.spec.affinity")
    node = _mapping(affinity.get("nodeAffinity"), "template.spec.affinity.nodeAffinity")
    where = "template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(node.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    _mappings(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")


def _container(container: Mapping[str, Any], where: str) -> None:
    for index, env in enumerate(_mappings(container.get("env"), f"{where}.env")):
        if not isinstance(env.get("name"), str):
            raise ValidationError("an env entry needs a name, a string", field=f"{where}.env[{index}].name")
    for index, port in enumerate(_mappings(container.get("ports"), f"{where}.ports")):
        number = port.get("containerPort")
        if number is not None and (
            isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_PORT
        ):
            raise ValidationError(
                f"must be a port number from 1 to {MAX_PORT}", field=f"{where}.ports[{index}].containerPort"
            )
    resources = _mapping(container.get("resources"), f"{where}.resources")
    for section in ("limits", "requests"):
        _mapping(resources.get(section), f"{where}.resources.{section}")


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    """The value as a mapping (an absent one as an empty mapping); anything else is refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("must be a mapping", field=field)
    return value


def _mappings(value: Any, field: str) -> list[Mapping[str, Any]]:
    """The value as a list of mappings (an absent one as an empty list); anything else is refused."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError("must be a list", field=field)
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ValidationError("must be a mapping", field=f"{field}[{index}]")
    return value


def _strings(value: Any, field: str) -> None:
    for key, item in _mapping(value, field).items():
        if not isinstance(item, str):
            raise ValidationError("must be a string", field=f"{field}.{key}")
