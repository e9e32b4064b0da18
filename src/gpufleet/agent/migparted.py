"""mig-parted configs (`version: v1`, `mig-configs`), as the GPU Operator's MIG manager reads them.

The agent does not create or destroy MIG instances: the MIG manager applies the config the node's
`nvidia.com/mig.config` label picks. What the agent does with the entry its pool's ConfigMap holds is
check it against this node (the GPUs it names exist and can take MIG, the profiles are the model's and
fit one GPU), refusing one that cannot be applied with the field at fault, and say which GPUs do not
have the layout yet, from what NVML reports. Errors name the field as mig-parted's YAML spells it:
`mig-configs.gpufleet-mixed[1].mig-devices`.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError

from gpufleet.agent.config import field_path, first_error
from gpufleet.agent.nvml import Gpu, NodeInfo
from gpufleet.api.documents import load_yaml
from gpufleet.api.errors import ValidationError
from gpufleet.sharing import mig


class MigEntry(BaseModel):
    """One entry: the GPUs it covers and the MIG devices each of them gets."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    devices: Literal["all"] | tuple[int, ...] = "all"
    device_filter: str | tuple[str, ...] | None = Field(default=None, alias="device-filter")
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, int] = Field(default_factory=dict, alias="mig-devices")

    @field_validator("mig_devices")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        for name, count in value.items():
            if count < 0:
                raise ValueError(f"{name}: a count is at least 0, got {count}")
        return value


class MigPartedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    version: Literal["v1"]
    mig_configs: dict[str, tuple[MigEntry, ...]] = Field(alias="mig-configs")


Layout = dict[int, Counter[str] | None]
"""GPU index -> the MIG devices it has or should have, by profile; None: MIG disabled."""


def parse_mig_config(text: str, name: str, *, where: str) -> tuple[MigEntry, ...]:
    """The entries of the config `name` in a mig-parted document; errors name `where` and the field."""
    data = load_yaml(text, where)
    try:
        config = MigPartedConfig.model_validate(data if isinstance(data, dict) else {})
    except PydanticValidationError as exc:
        message, loc = first_error(exc)
        raise ValidationError(message, obj=where, field=field_path(loc) or None) from exc
    if name not in config.mig_configs:
        known = ", ".join(sorted(config.mig_configs)) or "none"
        raise ValidationError(f"no config {name!r} (it has {known})", obj=where, field="mig-configs")
    return config.mig_configs[name]


def gpu_model(gpu: Gpu) -> str:
    """The MIG catalogue's model of a GPU NVML names `NVIDIA A100-SXM4-80GB`."""
    return mig.canonical_model(gpu.name.removeprefix("NVIDIA ").replace(" ", "-"))


def wanted_layout(entries: tuple[MigEntry, ...], node: NodeInfo, name: str, *, where: str) -> Layout:
    """What the entries ask of each of this node's GPUs; ValidationError for an entry that cannot be
    applied here. Entries with a `device-filter` (PCI device IDs, which discovery does not record)
    are left out: they are not checked."""
    by_index = {gpu.index: gpu for gpu in node.gpus}
    layout: Layout = {}
    for i, entry in enumerate(entries):
        path = f"mig-configs.{name}[{i}]"
        if entry.device_filter is not None:
            continue
        indices = sorted(by_index) if entry.devices == "all" else list(entry.devices)
        for index in indices:
            gpu = by_index.get(index)
            if gpu is None:
                raise ValidationError(
                    f"GPU {index} is not on this node (it has {len(by_index)})",
                    obj=where,
                    field=f"{path}.devices",
                )
            if index in layout:
                raise ValidationError(f"GPU {index} is in two entries", obj=where, field=f"{path}.devices")
            layout[index] = _gpu_layout(gpu, entry, path, where)
    return layout


def _gpu_layout(gpu: Gpu, entry: MigEntry, path: str, where: str) -> Counter[str] | None:
    if not entry.mig_enabled:
        return None
    model = gpu_model(gpu)
    if not gpu.mig_capable or not mig.mig_capable(model):
        raise ValidationError(
            f"GPU {gpu.index} ({gpu.name}) cannot run MIG", obj=where, field=f"{path}.mig-enabled"
        )
    for profile in entry.mig_devices:
        if mig.find_profile(model, profile) is None:
            valid = ", ".join(mig.catalogue(model))
            raise ValidationError(
                f"GPU {gpu.index} ({model}) has no MIG profile {profile!r}; valid: {valid}",
                obj=where,
                field=f"{path}.mig-devices.{profile}",
            )
    names = [profile for profile, count in entry.mig_devices.items() for _ in range(count)]
    try:
        mig.plan_layout(model, names, field=f"{path}.mig-devices")
    except ValidationError as exc:
        raise ValidationError(f"GPU {gpu.index} ({model}): {exc.detail}", obj=where, field=exc.field) from exc
    return Counter(names)


def actual_layout(node: NodeInfo) -> Layout:
    """The MIG devices NVML reports on each GPU, by profile; None where MIG is disabled."""
    return {
        gpu.index: Counter(d.profile for d in gpu.mig_devices) if gpu.mig_enabled else None
        for gpu in node.gpus
    }


def differences(wanted: Layout, actual: Layout) -> list[str]:
    """One line per GPU whose layout is not the wanted one yet: `GPU 1: has 3g.40gb x2, wants 7g.80gb x1`."""
    return [
        f"GPU {index}: has {_describe(actual.get(index))}, wants {_describe(want)}"
        for index, want in sorted(wanted.items())
        if actual.get(index) != want
    ]


def _describe(layout: Counter[str] | None) -> str:
    if layout is None:
        return "MIG disabled"
    return ", ".join(f"{profile} x{count}" for profile, count in sorted(layout.items())) or "no MIG devices"


def check(text: str, name: str, node: NodeInfo, *, where: str) -> list[str]:
    """Validates the mig-parted config `name` for this node; the GPUs whose layout differs from it."""
    entries = parse_mig_config(text, name, where=where)
    return differences(wanted_layout(entries, node, name, where=where), actual_layout(node))
