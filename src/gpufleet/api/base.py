"""The pydantic base every API model derives from: camelCase in YAML, snake_case in Python, strict.

Unknown fields are rejected (a typo in a manifest must not be silently ignored), and names can be
given either way so Python callers write `TrainingJobSpec(min_replicas=2)` and YAML says `minReplicas`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

# Names whose YAML spelling is not plain camelCase of the Python name.
_ALIAS_EXCEPTIONS = {"price_per_gpu_hour": "pricePerGPUHour"}

REVEAL_SECRETS = "gpufleet.reveal-secrets"
"""The serialization context key under which `to_dict(reveal_secrets=True)` asks for secret values."""


def yaml_name(python_name: str) -> str:
    """The YAML (camelCase) name of a Python attribute name."""
    return _ALIAS_EXCEPTIONS.get(python_name, to_camel(python_name))


class ApiModel(BaseModel):
    """Base of all API models: strict about unknown fields, camelCase aliases, both names accepted."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=yaml_name,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy, without its general path for a class whose models hold no private or extra
        value (every API model: unknown fields are refused): the controllers copy what they change,
        some fifty times a simulated job, and the general path takes half as long again. No value is
        validated (as in pydantic's)."""
        # type(), not self.__class__: a model's attribute reads all take the slow path of a class with
        # a __getattr__ (pydantic's), which Python 3.11 does not specialise.
        cls = type(self)
        if deep or (cls not in _PLAIN_COPY and not _copies_plainly(cls)):
            return super().model_copy(update=update, deep=deep)
        copied = object.__new__(cls)
        values = self.__dict__.copy()
        fields_set = set(self.__pydantic_fields_set__)
        if update:
            values.update(update)
            fields_set.update(update)
        _set(copied, "__dict__", values)
        _set(copied, "__pydantic_fields_set__", fields_set)
        _set(copied, "__pydantic_extra__", None)
        _set(copied, "__pydantic_private__", None)
        return copied

    def to_dict(self, *, reveal_secrets: bool = False) -> dict[str, Any]:
        """The YAML/JSON form: camelCase keys, unset optional fields left out.

        Secret values (`api.secret`) show as `**********` unless `reveal_secrets`: only the store and a
        client sending the object ask for them, so nothing that prints an object can leak one.
        """
        context = {REVEAL_SECRETS: True} if reveal_secrets else None
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, context=context)


_set = object.__setattr__
_PLAIN_COPY: set[type[BaseModel]] = set()
"""The model classes found to copy by the short path (`_copies_plainly`)."""


def _copies_plainly(cls: type[BaseModel]) -> bool:
    """Whether no model of `cls` can hold a private or an extra value (pydantic sets both to None on
    every such model, and its copy's general path exists for them); remembered when so."""
    if cls.__private_attributes__ or cls.model_config.get("extra") == "allow":
        return False
    _PLAIN_COPY.add(cls)
    return True


def field_error(field: str, message: str) -> PydanticCustomError:
    """An error for a cross-field check, naming the field (relative to the model) it is about.

    Raised from a model validator, pydantic would locate the error at the model; the error
    translation in `gpufleet.api.validation` appends `field` so the user sees e.g.
    `spec.minReplicas` rather than `spec`.
    """
    return PydanticCustomError("gpufleet_field", "{message}", {"field": field, "message": message})
