"""The shape every kind shares (apiVersion, kind, metadata, spec, status) and what is known of a kind.

`KindInfo` is what the store, the YAML loader and the CRD generator need to know about a kind (scope,
plural, printer columns); the registry that lists every kind is `gpufleet.api.kinds`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from pydantic import Field, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.meta import DEFAULT_NAMESPACE, ObjectMeta

GROUP = "gpufleet.io"
VERSION = "v1alpha1"
API_VERSION: Final = "gpufleet.io/v1alpha1"


class Resource(ApiModel):
    """Base of every stored kind. Subclasses declare `api_version`/`kind` as Literal fields with defaults,
    `spec` and `status` (with a default), and set `NAMESPACED`.

    Namespaced objects get the namespace `default` when none is given; cluster-wide ones may not have
    one.
    """

    NAMESPACED: ClassVar[bool] = True

    api_version: str = Field(description=f"The API group and version: {API_VERSION}.")
    kind: str = Field(description="The kind of object.")
    metadata: ObjectMeta = Field(
        description="Its name (and namespace), labels and annotations, and what the store keeps of it."
    )

    @model_validator(mode="after")
    def _scope(self) -> Resource:
        if self.NAMESPACED and self.metadata.namespace is None:
            self.metadata.namespace = DEFAULT_NAMESPACE
        elif not self.NAMESPACED and self.metadata.namespace is not None:
            raise field_error("metadata.namespace", f"{self.kind} is cluster-wide; remove the namespace")
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """`namespace/name` for namespaced objects, `name` for cluster-wide ones."""
        ns = self.metadata.namespace
        return f"{ns}/{self.metadata.name}" if ns else self.metadata.name

    def describe(self) -> str:
        """How error messages name the object: `TrainingJob team-a/llm`."""
        return f"{self.kind} {self.key}"


def api_version_field() -> Any:
    """The `apiVersion` field of a kind: its one value, described."""
    return Field(API_VERSION, description=f"The API group and version: {API_VERSION}.")


def kind_field(kind: str) -> Any:
    """The `kind` field of a kind: its one value, described."""
    return Field(kind, description=f"The kind of object: {kind}.")


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """A column of `kubectl get` for a CRD."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0


@dataclass(frozen=True, slots=True)
class KindInfo:
    """What the store, the loader and the CRD generator know about a kind."""

    model: type[Resource]
    kind: str
    api_version: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    crd: bool = field(default=True)
    """Whether `gpufleet manifests crds` emits a CustomResourceDefinition for it."""

    @classmethod
    def of(
        cls,
        model: type[Resource],
        *,
        plural: str,
        short_names: tuple[str, ...] = (),
        printer_columns: tuple[PrinterColumn, ...] = (),
        crd: bool = True,
    ) -> KindInfo:
        """A kind's description; its kind and apiVersion are read from the model's field defaults."""
        return cls(
            model=model,
            kind=_default_of(model, "kind"),
            api_version=_default_of(model, "api_version"),
            plural=plural,
            namespaced=model.NAMESPACED,
            short_names=short_names,
            printer_columns=printer_columns,
            crd=crd,
        )

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


def _default_of(model: type[Resource], name: str) -> str:
    default: Any = model.model_fields[name].default
    if not isinstance(default, str):
        raise TypeError(f"{model.__qualname__}.{name} needs a string default (a Literal with a default)")
    return default
