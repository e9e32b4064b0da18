"""The Container Device Interface spec of a prepared claim: the file the container runtime (containerd,
CRI-O) reads to inject the claim's GPUs, and the fully qualified CDI device ids the kubelet passes on.

One spec file per claim (`<cdi dir>/k8s.gpu.nvidia.com-claim_<uid>.json`, kind
`k8s.gpu.nvidia.com/claim` as NVIDIA's DRA driver names it), so unprepare removes exactly one file and
two claims never share one. Written to a temporary file and renamed, so a runtime never reads half a
spec.

A container may get devices of several claims (and so of several specs). The runtime merges the edits
of every injected device and, once per spec, the spec-wide ones: device nodes and mounts add up (one
per path), hooks are appended, but an environment variable set twice keeps only its last value. So,
as NVIDIA's DRA driver does, everything that names a device is a per-device edit (its device nodes:
the GPU's `/dev/nvidiaN`, a MIG instance's parent's plus its `/dev/nvidia-caps` nodes), and the
spec-wide edits are the same in every claim's spec: the driver's control nodes and
`NVIDIA_VISIBLE_DEVICES` naming no device, since a list there would name one claim's devices only.
With the driver's common edits from the NVIDIA Container Toolkit (libraries and hooks,
`toolkit.common_edits`) the value is `void`, as in the toolkit's own specs: its legacy runtime hook
then adds nothing, CDI brings everything. Without them it is `none`: the NVIDIA runtime's legacy hook,
where the node has one, mounts the driver's libraries and no device, and CDI brings the devices.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CDI_VERSION = "0.6.0"
CDI_VENDOR = "k8s.gpu.nvidia.com"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
CDI_DIR = "/var/run/cdi"
# Device nodes every CUDA process opens besides its GPUs' own.
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# The same in every claim's spec, so a container with several claims keeps it whatever the merge order:
# `void`, the legacy hook does nothing (CDI carries the libraries too); `none`, it mounts the driver's
# libraries and no device (NVIDIA Container Toolkit, "GPU Enumeration").
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"
VISIBLE_DEVICES_NONE = "NVIDIA_VISIBLE_DEVICES=none"


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A CDI `deviceNodes` entry. Without major and minor the runtime reads them from the host's node;
    with them (the `/dev/nvidia-caps` nodes of a MIG instance) the node needs no twin on the host."""

    path: str
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    """The node's permission bits in the container (CDI's `fileMode`); the runtime's default if None."""

    def to_cdi(self) -> dict[str, Any]:
        if self.major is None or self.minor is None:
            return {"path": self.path}
        node: dict[str, Any] = {"path": self.path, "type": "c", "major": self.major, "minor": self.minor}
        if self.file_mode is not None:
            node["fileMode"] = self.file_mode
        return node


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One allocated device as the runtime injects it."""

    name: str
    """The device's name in the pool (`gpu-0`, `gpu-0-mig-9-4-4`)."""
    uuid: str
    """The GPU or MIG UUID the container sees."""
    device_nodes: tuple[DeviceNode, ...]
    """The GPU's `/dev/nvidiaN`; a MIG instance's parent's and its GPU and compute instance's
    `/dev/nvidia-caps/nvidia-cap<minor>`."""


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid}.json"


def device_name(claim_uid: str, device: str) -> str:
    """The device's name within the spec: unique across claims, since each claim has its own spec."""
    return f"{claim_uid}-{device}"


def device_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI device id the kubelet hands to the runtime."""
    return f"{CDI_KIND}={device_name(claim_uid, device)}"


def claim_spec(
    claim_uid: str, devices: Sequence[CdiDevice], common_edits: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The CDI spec (JSON) injecting `devices`; `common_edits` are the toolkit's spec-wide edits (driver
    libraries, hooks), merged under ours."""
    edits: dict[str, Any] = {key: list(value) for key, value in (common_edits or {}).items()}
    # Whatever the toolkit set for the variable, ours is the one: it must be alike in every claim's spec.
    visible = VISIBLE_DEVICES_VOID if common_edits else VISIBLE_DEVICES_NONE
    edits["env"] = [e for e in edits.get("env", []) if not e.startswith("NVIDIA_VISIBLE_DEVICES=")]
    edits["env"].append(visible)
    known = {n["path"] for n in edits.get("deviceNodes", [])}
    edits["deviceNodes"] = edits.get("deviceNodes", []) + [
        {"path": path} for path in CONTROL_NODES if path not in known
    ]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {
                "name": device_name(claim_uid, d.name),
                "containerEdits": {"deviceNodes": [node.to_cdi() for node in d.device_nodes]},
            }
            for d in devices
        ],
        "containerEdits": edits,
    }


def write_spec(
    cdi_dir: Path,
    claim_uid: str,
    devices: Sequence[CdiDevice],
    common_edits: Mapping[str, Any] | None = None,
) -> Path:
    """Writes (or rewrites) the claim's spec atomically; its path."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = spec_path(cdi_dir, claim_uid)
    atomic_write(path, json.dumps(claim_spec(claim_uid, devices, common_edits), indent=1))
    return path


def remove_spec(cdi_dir: Path, claim_uid: str) -> None:
    spec_path(cdi_dir, claim_uid).unlink(missing_ok=True)


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
