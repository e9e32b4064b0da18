"""The agent's configuration file, in the NVIDIA device plugin's format.

A file written for NVIDIA's k8s-device-plugin (`version: v1`, `flags:`, `sharing:`) configures the
gpufleet agent unchanged: the fields below are read, others that NVIDIA's plugin knows are accepted
and ignored. The `health:` section follows the unreleased `api/config/v1/health.go` of that plugin
(`disabled`, `ignoredXIDs`, `criticalXIDs`) plus one gpufleet field, `recoverAfterReset`. The
environment variables DP_DISABLE_HEALTHCHECKS and DP_ENABLE_HEALTHCHECKS work as in NVIDIA's plugin.
A sharing entry's `rename`, and `devices` other than `all`, are ignored with a warning, as NVIDIA's
plugin does. Errors name the file and the field path (`sharing.timeSlicing.resources[0].replicas`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic.alias_generators import to_camel

from gpufleet.api.documents import load_yaml, read_text
from gpufleet.api.errors import ValidationError
from gpufleet.api.numerals import plain_digits

log = logging.getLogger(__name__)

RESOURCE_PREFIX = "nvidia.com/"
DEFAULT_RESOURCE = "nvidia.com/gpu"
# XIDs that are the application's fault, not the GPU's (NVIDIA plugin's defaults).
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})

DeviceListStrategy = Literal["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]
MigStrategy = Literal["none", "single", "mixed"]


# NVIDIA's spellings that are not plain camelCase of the Python name.
_ALIASES = {
    "device_id_strategy": "deviceIDStrategy",
    "ignored_xids": "ignoredXIDs",
    "critical_xids": "criticalXIDs",
}


def _alias(name: str) -> str:
    return _ALIASES.get(name, to_camel(name))


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="ignore", alias_generator=_alias, validate_by_name=True, validate_by_alias=True, frozen=True
    )


class PluginFlags(_Model):
    pass_device_specs: bool = False
    device_list_strategy: tuple[DeviceListStrategy, ...] = ("envvar",)
    device_id_strategy: Literal["uuid", "index"] = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    shared_devices_allocation_policy: Literal["distributed", "packed"] = "distributed"

    @field_validator("device_list_strategy", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value


class GfdFlags(_Model):
    output_file: str = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
    sleep_interval: str = "60s"
    no_timestamp: bool = False


class Flags(_Model):
    mig_strategy: MigStrategy = "none"
    fail_on_init_error: bool = True
    nvidia_driver_root: str = "/"
    mps_root: str = "/run/nvidia/mps"
    gds_enabled: bool = False
    mofed_enabled: bool = False
    plugin: PluginFlags = PluginFlags()
    gfd: GfdFlags = GfdFlags()


class ReplicatedResource(_Model):
    name: str
    replicas: int
    # NVIDIA's per-resource `rename` and `devices` are ignored with a warning by its plugin too.
    rename: str | None = None
    devices: Any = None

    @field_validator("name")
    @classmethod
    def _prefixed(cls, value: str) -> str:
        if not value.startswith(RESOURCE_PREFIX):
            raise ValueError(f"resource names start with {RESOURCE_PREFIX!r}, got {value!r}")
        return value

    @field_validator("replicas")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        return value


class Replication(_Model):
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool | None = None
    resources: tuple[ReplicatedResource, ...] = ()

    def ignored_fields(self, section: str) -> list[str]:
        """Paths of the per-resource fields that NVIDIA's plugin accepts but ignores (it disables
        renaming and device selection in sharing), so gpufleet ignores them too."""
        ignored = []
        for i, entry in enumerate(self.resources):
            if entry.rename:
                ignored.append(f"sharing.{section}.resources[{i}].rename")
            # `devices: all` is NVIDIA's default, which is what the agent does anyway.
            if entry.devices is not None and entry.devices != "all":
                ignored.append(f"sharing.{section}.resources[{i}].devices")
        return ignored

    def replicas(self, resource: str) -> int:
        """The replica count configured for a resource, 1 when it is not replicated."""
        for entry in self.resources:
            if entry.name == resource:
                return entry.replicas
        return 1


class Sharing(_Model):
    time_slicing: Replication | None = None
    mps: Replication | None = None

    @model_validator(mode="after")
    def _exclusive(self) -> Sharing:
        if self.time_slicing is not None and self.time_slicing.resources and self.mps and self.mps.resources:
            raise ValueError("timeSlicing and mps are mutually exclusive")
        return self

    def ignored_fields(self) -> list[str]:
        sections = (("timeSlicing", self.time_slicing), ("mps", self.mps))
        return [
            path for name, section in sections if section is not None for path in section.ignored_fields(name)
        ]

    @property
    def strategy(self) -> Literal["none", "time-slicing", "mps"]:
        if self.mps is not None and any(r.replicas > 1 for r in self.mps.resources):
            return "mps"
        if self.time_slicing is not None and any(r.replicas > 1 for r in self.time_slicing.resources):
            return "time-slicing"
        return "none"

    @property
    def replication(self) -> Replication | None:
        """The active sharing section, whichever kind it is."""
        strategy = self.strategy
        if strategy == "mps":
            return self.mps
        if strategy == "time-slicing":
            return self.time_slicing
        return None

    @property
    def fail_requests_greater_than_one(self) -> bool:
        replication = self.replication
        if replication is None:
            return False
        if replication.fail_requests_greater_than_one is not None:
            return replication.fail_requests_greater_than_one
        return self.strategy == "mps"  # NVIDIA: defaults to true for MPS, false for time-slicing


class Health(_Model):
    disabled: bool = False
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    # "all" (every XID not ignored is critical) or an explicit list that overrides the ignored ones.
    critical_xids: Literal["all"] | frozenset[int] = "all"
    recover_after_reset: bool = True
    wait_timeout_ms: int = 5000

    @field_validator("ignored_xids", mode="before")
    @classmethod
    def _with_defaults(cls, value: Any) -> Any:
        """Listed XIDs are added to NVIDIA's defaults, as DP_DISABLE_HEALTHCHECKS adds them."""
        if isinstance(value, list | tuple | set | frozenset):
            return DEFAULT_IGNORED_XIDS | {int(v) for v in value}
        return value

    def is_critical(self, xid: int) -> bool:
        if self.critical_xids == "all":
            return xid not in self.ignored_xids
        return xid in self.critical_xids

    def with_env(self, env: Mapping[str, str]) -> Health:
        """NVIDIA's DP_DISABLE_HEALTHCHECKS (`all`, `xids`, or extra XIDs to ignore) and
        DP_ENABLE_HEALTHCHECKS (XIDs to treat as critical even if ignored)."""
        health = self
        disable = env.get("DP_DISABLE_HEALTHCHECKS", "").strip()
        if disable:
            words = {w.strip() for w in disable.split(",") if w.strip()}
            if words & {"all", "xids"}:
                health = health.model_copy(update={"disabled": True})
            extra = {int(w) for w in words if plain_digits(w)}
            if extra:
                health = health.model_copy(update={"ignored_xids": health.ignored_xids | extra})
        enable = env.get("DP_ENABLE_HEALTHCHECKS", "").strip()
        if enable:
            listed = {int(w) for w in enable.split(",") if plain_digits(w.strip())}
            if listed:
                update: dict[str, Any] = {"ignored_xids": health.ignored_xids - listed}
                if health.critical_xids != "all":
                    update["critical_xids"] = health.critical_xids | listed
                health = health.model_copy(update=update)
        return health


class AgentConfig(_Model):
    version: Literal["v1"] = "v1"
    flags: Flags = Flags()
    sharing: Sharing = Sharing()
    health: Health = Health()


def field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's ('sharing', 'timeSlicing', 'resources', 0, 'replicas') as
    `sharing.timeSlicing.resources[0].replicas`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _message(error: Any) -> str:
    """The error's own words: a validator's ValueError without pydantic's "Value error, " prefix."""
    cause = error.get("ctx", {}).get("error")
    if error["type"] in ("value_error", "assertion_error") and cause is not None:
        return str(cause)
    return str(error["msg"])


def first_error(exc: PydanticValidationError) -> tuple[str, tuple[int | str, ...]]:
    """The first error pydantic found: its words and where (a `loc` for `field_path`)."""
    first = exc.errors()[0]
    return _message(first), tuple(first["loc"])


def parse_config(data: Mapping[str, Any] | None, *, where: str = "config") -> AgentConfig:
    """Validates a config document; errors name the file and the field path. Fields that are
    accepted but ignored are logged as warnings."""
    try:
        config = AgentConfig.model_validate(dict(data or {}))
    except PydanticValidationError as exc:
        message, loc = first_error(exc)
        raise ValidationError(message, obj=where, field=field_path(loc) or None) from exc
    for path in config.sharing.ignored_fields():
        log.warning("%s: field %s is ignored, as by NVIDIA's plugin", where, path)
    return config


def _document(text: str, where: str) -> dict[str, Any]:
    data = load_yaml(text, where)
    if data is not None and not isinstance(data, dict):
        raise ValidationError("the config is a mapping", obj=where)
    return data or {}


def load_config(path: str | Path | None, *, env: Mapping[str, str] | None = None) -> AgentConfig:
    """The config in `path` (YAML or JSON), or the defaults when no file is named."""
    if path is None:
        config = AgentConfig()
    else:
        text = read_text(path)  # a file that cannot be read or is not UTF-8: an error naming it
        config = parse_config(_document(text, str(path)), where=str(path))
    if env:
        config = config.model_copy(update={"health": config.health.with_env(env)})
    return config


def _set_fields_over(base: _Model, named: _Model) -> _Model:
    """`base` with the fields the named document wrote (not those it left to their defaults) taken
    from `named`, nested sections (`flags.plugin`, `flags.gfd`) merged the same way."""
    update: dict[str, Any] = {}
    for name in named.model_fields_set:
        mine, theirs = getattr(base, name), getattr(named, name)
        both_sections = isinstance(mine, _Model) and isinstance(theirs, _Model)
        update[name] = _set_fields_over(mine, theirs) if both_sections else theirs
    return base.model_copy(update=update)


def overlay_named_config(base: AgentConfig, text: str, *, where: str) -> AgentConfig:
    """`base` (the local file or the defaults) with what a named config sets laid over it.

    A named config is a node label's pick in a ConfigMap of several, as NVIDIA's GPU Operator hands
    its device plugin one. Its `sharing` section replaces the local one whole (a pool's sharing is the
    node's sharing: a local timeSlicing beside the pool's mps would contradict it). Its `flags` are
    merged field by field: an entry that sets only `flags.migStrategy` keeps the device list strategy,
    driver root and the rest of the local file's flags. gpufleet's operator writes only `sharing`.
    Errors name `where` (the ConfigMap and key) and the field. `version` only says which format it
    is; a `health` section is validated but not applied (logged as ignored): the running health
    monitor tracks faults under the local settings.
    """
    data = _document(text, where)
    named = parse_config(data, where=where)
    if "health" in data:
        log.warning("%s: section health is ignored; health checks follow the agent's own config", where)
    update: dict[str, Any] = {}
    if "flags" in data:
        update["flags"] = _set_fields_over(base.flags, named.flags)
    if "sharing" in data:
        update["sharing"] = named.sharing
    return base.model_copy(update=update)


def with_flags(config: AgentConfig, pinned: Mapping[str, Any]) -> AgentConfig:
    """`config` with the flags given on the command line or in the environment (`mig_strategy` from
    `--mig-strategy` or MIG_STRATEGY), which win over every config file, local or named, in NVIDIA's
    order: command-line flag, then environment variable, then config file."""
    if not pinned:
        return config
    return config.model_copy(update={"flags": config.flags.model_copy(update=dict(pinned))})
