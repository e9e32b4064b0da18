"""Pod logs from a cluster for `gpufleet logs --kubeconfig ...`: a pod's, or every pod of a job's or a
service's current attempt, read through the API server's `pods/log` subresource (kubectl's way).

A job's pods are found by the label the operator puts on them (`JOB_LABEL`, `SERVICE_LABEL`); of a job
that restarted, the newest attempt's pods are read, the earlier ones being deleted with the attempt.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.labels import JOB_LABEL, SERVICE_LABEL
from gpufleet.api.numerals import plain_digits
from gpufleet.kube.training import ATTEMPT_LABEL
from gpufleet.kube.transport import ApiError, Json, Transport

OWNER_LABELS = {"TrainingJob": JOB_LABEL, "InferenceService": SERVICE_LABEL}


class LogTransport(Transport, Protocol):
    def lines(self, path: str, *, query: Mapping[str, str | int | bool]) -> Iterator[str]:
        """The lines of a plain-text answer, as they arrive (a followed log never ends by itself)."""
        ...


def pods_of(api: Transport, namespace: str, kind: str, name: str) -> list[str]:
    """The pods to read for `kind/name`: the pod itself, or the current attempt's pods of a job or
    service (by rank), an error naming the object when there are none."""
    if kind == "Pod":
        return [name]
    label = OWNER_LABELS.get(kind)
    if label is None:
        raise ValidationError(f"no logs of a {kind}: give a pod, a trainingjob or an inferenceservice")
    try:
        listed = api.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": f"{label}={name}"}
        )
    except ApiError as exc:
        raise ValidationError(
            f"cannot list its pods: {exc.message or exc.reason}", obj=f"{kind} {namespace}/{name}"
        ) from None
    pods: list[Json] = [p for p in listed.get("items", []) if not p["metadata"].get("deletionTimestamp")]
    if not pods:
        raise NotFoundError("it has no pods now", obj=f"{kind} {namespace}/{name}")
    newest = max(_attempt(p) for p in pods)
    return sorted((p["metadata"]["name"] for p in pods if _attempt(p) == newest), key=_rank_order)


def read(api: LogTransport, namespace: str, pod: str, *, follow: bool = False) -> Iterator[str]:
    """The pod's log lines (following: as they are written, until the pod ends)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
    try:
        yield from api.lines(path, query={"follow": True} if follow else {})
    except ApiError as exc:
        if exc.status == 404:
            raise NotFoundError("no such pod", obj=f"pod {namespace}/{pod}") from None
        raise ValidationError(
            f"cannot read its log: {exc.message or exc.reason}", obj=f"pod {namespace}/{pod}"
        ) from None


def _attempt(pod: Json) -> int:
    value = (pod["metadata"].get("labels") or {}).get(ATTEMPT_LABEL, "0")
    return int(value) if plain_digits(str(value)) else 0


def _rank_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if plain_digits(tail) else (0, name)
