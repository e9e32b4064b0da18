"""Object metadata and the status pieces every kind shares (conditions, pending reasons).

Field names follow Kubernetes' ObjectMeta and metav1.Condition so the same YAML works with kubectl.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, Field, field_validator

from gpufleet.api.base import ApiModel, field_error

# DNS subdomain (RFC 1123), what Kubernetes requires of most object names.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# DNS label, what Kubernetes requires of namespaces.
_LABEL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Label/annotation key: optional DNS-subdomain prefix and a name of [A-Za-z0-9._-].
_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")

DEFAULT_NAMESPACE = "default"


# The checks below remember their answers: every object read from or written to a store is
# validated again, and the same few thousand names, keys and values come back all the time (the
# regular expressions and their callers were about 3% of a simulation's CPU).
_REMEMBERED = 1 << 16


@functools.lru_cache(maxsize=_REMEMBERED)
def _is_name(value: str) -> bool:
    return len(value) <= 253 and _NAME.fullmatch(value) is not None


@functools.lru_cache(maxsize=_REMEMBERED)
def _key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and not _is_name(prefix):
        return f"key {key!r} has an invalid prefix"
    if len(name) > 63 or not _KEY_NAME.fullmatch(name):
        return f"{key!r} is not a valid key"
    return None


@functools.lru_cache(maxsize=_REMEMBERED)
def _is_label_value(value: str) -> bool:
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def check_name(value: str) -> str:
    """An object name must be a DNS subdomain of at most 253 characters."""
    if not _is_name(value):
        raise ValueError(f"{value!r} is not a valid name (lower-case letters, digits, '-' and '.')")
    return value


def check_label_key(key: str) -> str:
    """A label or annotation key: `[prefix/]name`, name at most 63 characters."""
    problem = _key_problem(key)
    if problem is not None:
        raise ValueError(problem)
    return key


def is_label_value(value: str) -> bool:
    """Whether `value` may be a label's value (`check_label_value` says why not)."""
    return _is_label_value(value)


def check_name_in_labels(labels: dict[str, str], carriers: str) -> None:
    """An object whose name becomes label values of the objects made for it (`carriers`: its pods,
    its nodes): `labels` maps each such label to the value the name gives it, and each must be a label
    value, at most 63 characters (as a Kubernetes Job's name must fit its pods' label). Refused here,
    on the name's field; else the controller would fail on each object it made for it."""
    for label, value in labels.items():
        if not _is_label_value(value):
            raise field_error(
                "metadata.name",
                f"too long: {carriers} carry {value!r} as their {label} label, at most 63 characters",
            )


def check_label_value(value: str, what: str) -> str:
    """A value that becomes a label's: at most 63 letters, digits, '-', '_' and '.', alphanumeric at
    each end (or empty). `what` names it in the error."""
    if not _is_label_value(value):
        raise ValueError(
            f"{what} {value!r} is not a valid label value (at most 63 letters, digits, '-', '_' and '.', "
            "a letter or digit at each end)"
        )
    return value


def _empty(value: dict[str, str] | list[str]) -> bool:
    # Empty labels, annotations and finalizers are noise in YAML and mean the same as absent, so a
    # dump leaves them out (per field: half the cost of a serializer around the whole model, and
    # every store write dumps metadata).
    return not value


class ObjectMeta(ApiModel):
    """Identity and bookkeeping of an object; the store owns uid, resourceVersion, generation and times."""

    name: str = Field(
        description="The object's name, unique per kind (and namespace): lower-case letters, digits, "
        "'-' and '.', at most 253 characters."
    )
    namespace: str | None = Field(
        default=None,
        description="The namespace of a namespaced kind (jobs, services...; absent = default); none for "
        "cluster-wide kinds (pools, queues, nodes).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description="Labels to select the object by (-l, labelSelector).",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description="Notes for tools and people; nothing selects by them.",
    )
    uid: str | None = Field(default=None, description="Set by the store: unique for the object's life.")
    resource_version: str | None = Field(
        default=None,
        description="Set by the store at every change. Given in a write, the object must still have "
        "it (else 409); given to a watch, events after it are sent.",
    )
    generation: int | None = Field(
        default=None, ge=0, description="Set by the store: starts at 1 and grows when the spec changes."
    )
    creation_timestamp: AwareDatetime | None = Field(
        default=None, description="Set by the store: when the object was created."
    )
    deletion_timestamp: AwareDatetime | None = Field(
        default=None,
        description="Set by the store: when a delete was asked for an object its finalizers still hold.",
    )
    finalizers: list[str] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="Controllers that must clean up before the object goes: a delete waits until the "
        "list is empty.",
    )

    @field_validator("name")
    @classmethod
    def _name_is_dns_subdomain(cls, value: str) -> str:
        return check_name(value)

    @field_validator("namespace")
    @classmethod
    def _namespace_is_dns_label(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
            raise ValueError(f"{value!r} is not a valid namespace (lower-case letters, digits and '-')")
        return value

    @field_validator("labels")
    @classmethod
    def _labels_are_valid(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            check_label_key(key)
            if not _is_label_value(label):
                raise ValueError(f"label {key}: {label!r} is not a valid label value")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotation_keys_are_valid(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            check_label_key(key)
        return value

    @field_validator("finalizers")
    @classmethod
    def _finalizers_are_unique(cls, value: list[str]) -> list[str]:
        for item in value:
            check_label_key(item)
        return list(dict.fromkeys(value))


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """One observation about an object, as in Kubernetes' metav1.Condition."""

    type: str = Field(description="What the condition is about, e.g. Admitted, Ready, Valid.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, description="Why, as one CamelCase word for programs.")
    message: str | None = Field(default=None, description="Why, in words for people.")
    last_transition_time: AwareDatetime | None = Field(
        default=None, description="When the status last changed."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation the condition was written for."
    )


class PendingReason(ApiModel):
    """Why a workload is not running yet, in a form a program can act on.

    `type` is one of the scheduler's reasons (`QuotaExceeded`, `NoFit`, `WaitingForPreemption`...);
    `details` carries the numbers behind it (requested vs. available quota, counts per filter).
    """

    type: str = Field(
        description="The reason: QuotaExceeded, NoFit, WaitingForPreemption, QueueNotFound, QueueInvalid..."
    )
    message: str = Field(default="", description="The reason in words, with the numbers.")
    details: dict[str, Any] = Field(
        default_factory=dict,
        description="The numbers behind it, for programs: quota asked for and left, nodes rejected per "
        "filter and topology level.",
    )


def _same_but_time(a: Condition, b: Condition) -> bool:
    return (
        a.type == b.type
        and a.status == b.status
        and a.reason == b.reason
        and a.message == b.message
        and a.observed_generation == b.observed_generation
    )


def holds_condition(
    conditions: list[Condition], type: str, status: ConditionStatus, reason: str, message: str
) -> bool:
    """Whether `set_condition` with such a condition (no observed generation) would leave `conditions`
    as they are: a caller that sets the same condition on every look need not build it each time."""
    for existing in conditions:
        if existing.type == type:
            return (
                existing.last_transition_time is not None
                and (existing.status, existing.reason, existing.message) == (status, reason, message)
                and existing.observed_generation is None
            )
    return False


def set_condition(conditions: list[Condition], condition: Condition, *, now: datetime) -> list[Condition]:
    """The list with `condition` replacing the one of the same type.

    The transition time moves only when the status changes, as Kubernetes clients expect.
    """
    result: list[Condition] = []
    replaced = False
    for existing in conditions:
        if existing.type != condition.type:
            result.append(existing)
            continue
        replaced = True
        moved = existing.status != condition.status
        if not moved and existing.last_transition_time is not None and _same_but_time(existing, condition):
            result.append(existing)  # as it was: conditions are never changed in place, so it is shared
            continue
        when = now if moved else (existing.last_transition_time or now)
        result.append(condition.model_copy(update={"last_transition_time": when}))
    if not replaced:
        result.append(condition.model_copy(update={"last_transition_time": now}))
    return result
