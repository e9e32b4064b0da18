"""Opaque driver configuration in claims: NVIDIA's `resource.nvidia.com/v1beta1` GpuConfig and
MigDeviceConfig, as NVIDIA's DRA driver for GPUs reads them at prepare.

A DeviceClass or a claim may carry `config[].opaque` with `driver: gpu.nvidia.com`; the allocation
copies them into `status.allocation.devices.config` (class configs marked FromClass, the claim's
FromClaim). As NVIDIA's driver does:

- decoding is strict: an unknown kind, apiVersion or field is an error, named by its path from
  `status.allocation.devices.config[i].opaque.parameters`;
- configs of other drivers are skipped (a request may be met by several drivers);
- precedence: the claim's over the class's, a later one over an earlier one; a config naming a
  request applies to that request's devices (a GpuConfig naming a request that got a MIG device, or a
  MigDeviceConfig naming one that got a GPU, is an error), one naming no request to every device of
  its kind that no more precedent config claims;
- sharing: `strategy` TimeSlicing (GPUs: `timeSlicingConfig.interval` Default | Short | Medium |
  Long, Default when unset; MIG devices take no time-slice setting) or MPS (`mpsConfig`:
  `defaultActiveThreadPercentage` 0-100, `defaultPinnedDeviceMemoryLimit`,
  `defaultPerDevicePinnedMemoryLimit` by device index or UUID); the other strategy's settings are
  refused. No config: the device is used as it is (NVIDIA's defaults with its TimeSlicingSettings gate
  off).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet.api.dra_claims import DeviceAllocationConfiguration
from gpufleet.sharing.dra_slices import DRIVER

API_VERSION = "resource.nvidia.com/v1beta1"
TIME_SLICE_INTERVALS = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
"""The interval names and what `nvidia-smi compute-policy --set-timeslice` takes for each."""
CONFIG_FIELD = "status.allocation.devices.config"


class ConfigError(Exception):
    """A config of this driver that cannot be applied; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeSlicingConfig(_Strict):
    interval: Literal["Default", "Short", "Medium", "Long"] | None = None


class MpsConfig(_Strict):
    defaultActiveThreadPercentage: int | None = Field(default=None, ge=0, le=100)
    defaultPinnedDeviceMemoryLimit: str | None = None
    defaultPerDevicePinnedMemoryLimit: dict[str, str] | None = None


class GpuSharing(_Strict):
    strategy: Literal["TimeSlicing", "MPS"]
    timeSlicingConfig: TimeSlicingConfig | None = None
    mpsConfig: MpsConfig | None = None

    @model_validator(mode="after")
    def _one_strategy(self) -> GpuSharing:
        if self.strategy == "TimeSlicing" and self.mpsConfig is not None:
            raise ValueError("mpsConfig cannot be used with the TimeSlicing strategy")
        if self.strategy == "MPS" and self.timeSlicingConfig is not None:
            raise ValueError("timeSlicingConfig cannot be used with the MPS strategy")
        return self


class MigDeviceSharing(_Strict):
    strategy: Literal["TimeSlicing", "MPS"]
    mpsConfig: MpsConfig | None = None

    @model_validator(mode="after")
    def _one_strategy(self) -> MigDeviceSharing:
        if self.strategy == "TimeSlicing" and self.mpsConfig is not None:
            raise ValueError("mpsConfig cannot be used with the TimeSlicing strategy")
        return self


class GpuConfig(_Strict):
    apiVersion: Literal["resource.nvidia.com/v1beta1"]
    kind: Literal["GpuConfig"]
    sharing: GpuSharing | None = None


class MigDeviceConfig(_Strict):
    apiVersion: Literal["resource.nvidia.com/v1beta1"]
    kind: Literal["MigDeviceConfig"]
    sharing: MigDeviceSharing | None = None


@dataclass(frozen=True, slots=True)
class Sharing:
    """What a device's config asks: a strategy and its settings."""

    strategy: Literal["TimeSlicing", "MPS"]
    interval: str | None = None
    """TimeSlicing on a GPU: the interval name (Default when the config gives none)."""
    mps: MpsConfig | None = None
    config_index: int = 0
    """The config's index in `status.allocation.devices.config`, for messages."""


@dataclass(frozen=True, slots=True)
class _Decoded:
    index: int
    requests: tuple[str, ...]
    config: GpuConfig | MigDeviceConfig


def decode(index: int, parameters: Any) -> GpuConfig | MigDeviceConfig:
    """One config's parameters, strictly; ConfigError naming the field otherwise."""
    where = f"{CONFIG_FIELD}[{index}].opaque.parameters"
    if not isinstance(parameters, dict):
        raise ConfigError(f"{where}: not an object")
    kind = parameters.get("kind")
    model: type[GpuConfig | MigDeviceConfig]
    if kind == "GpuConfig":
        model = GpuConfig
    elif kind == "MigDeviceConfig":
        model = MigDeviceConfig
    else:
        raise ConfigError(f"{where}.kind: {kind!r} is not GpuConfig or MigDeviceConfig ({API_VERSION})")
    try:
        return model.model_validate(parameters)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise ConfigError(f"{where}{path}: {first['msg']}") from exc


def device_sharing(
    configs: Sequence[DeviceAllocationConfiguration], results: Sequence[tuple[str, str, bool]]
) -> dict[str, Sharing | None]:
    """Each device's sharing, for `results` as (request, device, is MIG), by device name."""
    # Lowest precedence first: the class's configs, then the claim's, each in their order.
    ordered = sorted(enumerate(configs), key=lambda ic: (ic[1].source == "FromClaim", ic[0]))
    decoded: list[_Decoded] = []
    for index, config in ordered:
        if config.opaque is None:
            raise ConfigError(f"{CONFIG_FIELD}[{index}]: only opaque parameters are supported by {DRIVER}")
        if config.opaque.driver != DRIVER:
            continue
        decoded.append(_Decoded(index, tuple(config.requests), decode(index, config.opaque.parameters)))
    out: dict[str, Sharing | None] = {}
    for request, device, is_mig in results:
        wanted: type[GpuConfig | MigDeviceConfig] = MigDeviceConfig if is_mig else GpuConfig
        chosen: _Decoded | None = None
        for d in reversed(decoded):
            if request in d.requests:
                if not isinstance(d.config, wanted):
                    raise ConfigError(
                        f"{CONFIG_FIELD}[{d.index}]: a {d.config.kind} cannot apply to device {device} "
                        f"(request {request}), a {'MIG device' if is_mig else 'GPU'}"
                    )
                chosen = d
                break
            if not d.requests and isinstance(d.config, wanted):
                chosen = d
                break
        out[device] = None if chosen is None else _sharing(chosen)
    return out


def _sharing(decoded: _Decoded) -> Sharing | None:
    sharing = decoded.config.sharing
    if sharing is None:
        return None
    if sharing.strategy == "MPS":
        return Sharing("MPS", mps=sharing.mpsConfig or MpsConfig(), config_index=decoded.index)
    if isinstance(sharing, GpuSharing):
        interval = (sharing.timeSlicingConfig or TimeSlicingConfig()).interval or "Default"
        return Sharing("TimeSlicing", interval=interval, config_index=decoded.index)
    # NVIDIA's driver too: time-slice settings cannot be set on a MIG device.
    return Sharing("TimeSlicing", config_index=decoded.index)
