"""Secret: a credential the embedded world keeps for its own use (a worker's API token, a manager's).

The Kubernetes world uses its own `v1` Secrets; this kind is the embedded world's counterpart, what a
`SecretKeyRef` (`Cluster.spec.connection.embedded.tokenSecretRef`) names there. Its values are
`SecretStr`s: `to_dict()`, and so every answer of the API, `gpufleet get -o yaml`, `describe`, watch
streams and any log line that prints the object, shows them as `**********`. Only the store (and a
client sending the object) asks for them with `to_dict(reveal_secrets=True)`, and only code in the
control plane's own process reads them, with `value`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, SerializationInfo, field_serializer, field_validator

from gpufleet.api.base import REVEAL_SECRETS, ApiModel
from gpufleet.api.errors import NotFoundError
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.status import ObjectStatus

HIDDEN = "**********"
"""How every read shows a value (pydantic's SecretStr)."""
SYSTEM_NAMESPACE = "gpufleet-system"
"""Where gpufleet's own Secrets live (a `SecretKeyRef`'s default namespace)."""


class SecretSpec(ApiModel):
    type: str = Field(default="Opaque", description="What the values are for, for people (Opaque).")
    data: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="The values by key, as plain text (not base64). Never shown: reads answer **********.",
    )

    @field_validator("data")
    @classmethod
    def _keys_named(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for key, secret in value.items():
            if not key or not all(c.isalnum() or c in "-_." for c in key):
                raise ValueError(f"key {key!r} must be letters, digits, '-', '_' or '.'")
            if secret.get_secret_value() == HIDDEN:
                # What a read shows, written back (a get, an edit, a put): it would replace the value.
                raise ValueError(
                    f"{key}: {HIDDEN} is how a hidden value is shown, not a value; give the value"
                )
        return value

    @field_serializer("data")
    def _hidden(self, value: dict[str, SecretStr], info: SerializationInfo) -> dict[str, str]:
        reveal = isinstance(info.context, dict) and info.context.get(REVEAL_SECRETS) is True
        return {k: v.get_secret_value() if reveal else str(v) for k, v in value.items()}


class Secret(Resource):
    """Named credentials (namespaced; gpufleet's own live in `gpufleet-system`)."""

    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Secret"] = kind_field("Secret")
    spec: SecretSpec = Field(default_factory=SecretSpec, description="The values, by key.")
    status: ObjectStatus = Field(default_factory=ObjectStatus, description="Unused.")

    def value(self, key: str) -> str:
        """The value of `key`; a NotFoundError naming the Secret and the key when it has none."""
        found = self.spec.data.get(key)
        if found is None:
            raise NotFoundError(f"has no key {key!r} in spec.data", obj=self.describe())
        return found.get_secret_value()
