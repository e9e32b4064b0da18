"""What a managed workload's pod template asks of a host's labels, for the dispatcher.

In the Kubernetes world a worker's operator writes the pod from the request's `template`: its
`nodeSelector` (under the request's own, which wins on a key both name) and its `affinity`. The core's
request carries only the request's own node selector, so the manager reads the template here: a job
whose template asks `nodeSelector: {pool: a100-spot}` or a required node affinity term is dispatched
only to a cluster with a host of the model that satisfies it (`federation.hostlabels`).

A template the worker could not turn into a pod (a selector value that is not a string, an affinity
with an unknown operator) is refused with an error naming the object and the field, rather than sent
to a worker where it would wait for ever.
"""

from __future__ import annotations

from typing import Any

import pydantic

from gpufleet.api.dra_devices import NodeSelector
from gpufleet.api.errors import ValidationError
from gpufleet.api.training import TrainingJob
from gpufleet.federation.hostlabels import HostRule
from gpufleet.federation.link import Managed

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
INVALID_TEMPLATE = "InvalidTemplate"
"""The pending reason of work whose template the manager refuses (the Kubernetes operator's word)."""


def template_rules(obj: Managed) -> dict[str, HostRule]:
    """Per pod set name, what its pod template asks of a host; empty when the template asks nothing."""
    if isinstance(obj, TrainingJob):
        pod_set, template, path = "worker", obj.spec.worker.template, "spec.worker.template.spec"
    else:
        pod_set, template, path = "server", obj.spec.replica.template, "spec.replica.template.spec"
    where = f"{obj.kind} {obj.namespace or 'default'}/{obj.name}"
    spec = _mapping((template or {}).get("spec"), where, path)
    rule = HostRule(_selector(spec.get("nodeSelector"), where, path), _affinity(spec, where, path))
    return {pod_set: rule} if rule else {}


def _mapping(value: object, where: str, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError("must be a mapping", obj=where, field=path)
    return value


def _selector(value: object, where: str, path: str) -> tuple[tuple[str, str], ...]:
    selector = _mapping(value, where, f"{path}.nodeSelector")
    for key, label in selector.items():
        if not isinstance(key, str) or not isinstance(label, str):
            raise ValidationError(
                f"keys and values must be strings, got {key!r}: {label!r}",
                obj=where,
                field=f"{path}.nodeSelector",
            )
    return tuple(sorted(selector.items()))


def _affinity(spec: dict[str, Any], where: str, path: str) -> NodeSelector | None:
    affinity = _mapping(spec.get("affinity"), where, f"{path}.affinity")
    node = _mapping(affinity.get("nodeAffinity"), where, f"{path}.affinity.nodeAffinity")
    required = node.get(REQUIRED)
    if required is None:
        return None
    field = f"{path}.affinity.nodeAffinity.{REQUIRED}"
    try:
        return NodeSelector.model_validate(required)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(part) for part in first["loc"])
        raise ValidationError(first["msg"], obj=where, field=f"{field}.{at}" if at else field) from None
