"""Label selectors in Kubernetes' string syntax: `app=web,tier!=db,env in (a,b),!legacy,gpu`, and the
names of the labels and annotations more than one package reads or writes.

Selectors are used by the store's list and by anything that matches node or object labels, so the
embedded world and `kubectl -l` accept the same selectors. A name is defined once, here, so the world
that writes a label and the one that reads it cannot drift apart; names only the Kubernetes world uses
live in `kube.config`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpufleet.api.errors import ValidationError

Operator = Literal["=", "!=", "in", "notin", "exists", "!exists"]

# ------------------------------------------------------------------ label and annotation names
POOL_LABEL = "gpufleet.io/pool"
"""On a Node: the GPUPool it belongs to (set by the pool controller, or the operator in Kubernetes)."""
CAPACITY_TYPE_LABEL = "gpufleet.io/capacity-type"
"""On a Node: its pool's capacity type (`on-demand`, `spot`), which capacity-typed flavors select on."""
SPOT_TAINT = "gpufleet.io/spot"
"""Taint key (value `true`, NoSchedule) on a spot pool's Kubernetes nodes; a pod whose queue has a spot
flavor gets its toleration from the operator, and the federation's dispatcher counts it tolerated."""
WORKLOAD_LABEL = "gpufleet.io/workload"
"""On an embedded-world Pod: the Workload it is a pod of."""
JOB_LABEL = "gpufleet.io/training-job"
"""On a Workload or Pod (and a Kubernetes Service): the TrainingJob it belongs to."""
SERVICE_LABEL = "gpufleet.io/inference-service"
"""On a Workload or Pod (and a Kubernetes Service): the InferenceService it belongs to."""
REVISION_LABEL = "gpufleet.io/revision"
"""On an InferenceService's replica: the ModelVersion it serves."""
JOB_WORKLOAD_PREFIX = "job-"
SERVICE_WORKLOAD_PREFIX = "svc-"


def job_workload_name(job: str) -> str:
    """The embedded world's Workload of a TrainingJob (its pods' `WORKLOAD_LABEL`)."""
    return f"{JOB_WORKLOAD_PREFIX}{job}"


def service_workload_name(service: str, index: int) -> str:
    """The embedded world's Workload of an InferenceService's replica `index` (its pod's `WORKLOAD_LABEL`)."""
    return f"{SERVICE_WORKLOAD_PREFIX}{service}-{index}"


WORKLOAD_CLASS_LABEL = "gpufleet.io/workload-class"
"""On a Pod (label or annotation) that no TrainingJob or InferenceService owns: its workload class
(`training`, `inference` or `batch`), which picks its placement policy (see `controllers.workload_class`)."""
CORDONED_BY_ANNOTATION = "gpufleet.io/cordoned-by"
"""On a Node gpufleet cordoned: why (`health`, `gpu-health`, `spot-interruption`), so that it uncordons
only the nodes it cordoned itself."""
CLAIM_POD_LABEL = "gpufleet.io/pod"
"""On a ResourceClaim the embedded world made from a template: the pod it was made for, which it is
deleted with."""
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""On a ResourceClaim made from a template: the pod's `resourceClaims` entry it is for (as Kubernetes'
resource-claim controller writes it)."""
BENCH_RUN_LABEL = "gpufleet.io/bench-run"
"""On what a benchmark creates (on a server or a cluster): its run, so the run cleans up only its own."""
MANAGED_BY_ANNOTATION = "gpufleet.io/managed-by"
"""On what a federation manager made in a worker (a copy of its work, the queue it grants quota in, a
carried Checkpoint): the manager. Only such work follows the lease rule, and the manager's token there
writes only such objects (`server.federation_access`)."""

_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One clause of a selector."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case "exists":
                return present
            case "!exists":
                return not present
            case "=" | "in":
                return present and labels[self.key] in self.values
            case "!=" | "notin":
                return not present or labels[self.key] not in self.values
        return False  # pragma: no cover - the operators above are exhaustive


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """All requirements must hold; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, selector: str | Mapping[str, str] | LabelSelector | None) -> LabelSelector:
        """A selector from Kubernetes syntax, or from a mapping of required equal labels."""
        if selector is None:
            return cls()
        if isinstance(selector, LabelSelector):
            return selector
        if isinstance(selector, Mapping):
            return cls(tuple(Requirement(k, "=", frozenset([v])) for k, v in selector.items()))
        return cls(tuple(_requirement(clause, selector) for clause in _clauses(selector)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


def _clauses(text: str) -> list[str]:
    # Commas separate clauses except inside the parentheses of `in (a,b)`.
    clauses, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            clauses.append(text[start:index])
            start = index + 1
    clauses.append(text[start:])
    return [clause for clause in clauses if clause.strip()]


def _requirement(clause: str, selector: str) -> Requirement:
    if match := _SET.match(clause):
        key, operator, raw = match.groups()
        values = frozenset(value.strip() for value in raw.split(",") if value.strip())
        return Requirement(key, "in" if operator == "in" else "notin", values)
    if match := _EQUALITY.match(clause):
        key, operator, value = match.groups()
        return Requirement(key, "!=" if operator == "!=" else "=", frozenset([value]))
    if match := _EXISTS.match(clause):
        negated, key = match.groups()
        return Requirement(key, "!exists" if negated else "exists")
    raise ValidationError(
        f"cannot parse {clause.strip()!r} in label selector {selector!r}", field="labelSelector"
    )
