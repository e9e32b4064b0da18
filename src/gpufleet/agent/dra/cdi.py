"""The Container Device Interface spec of a prepared claim: the file the container runtime (containerd,
CRI-O) reads to inject the claim's GPUs, and the fully qualified CDI device ids the kubelet passes on.

One spec file per claim (`<cdi dir>/k8s.gpu.nvidia.com-claim_<uid>.json`, kind
`k8s.gpu.nvidia.com/claim` as NVIDIA's DRA driver names it), so unprepare removes exactly one file and
two claims never share one. Each device injects its GPU's device node (a MIG instance its parent's);
the spec-wide edits, applied once whichever of its devices a container gets, add the driver's control
nodes and `NVIDIA_VISIBLE_DEVICES` with the claim's GPU or MIG UUIDs, which the NVIDIA container
toolkit's hook reads to mount the driver's libraries. Written to a temporary file and renamed, so a
runtime never reads half a spec.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
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


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One allocated device as the runtime injects it."""

    name: str
    """The device's name in the pool (`gpu-0`, `gpu-0-mig-9-4-4`)."""
    uuid: str
    """The GPU or MIG UUID the container sees."""
    device_node: str
    """The GPU's `/dev/nvidiaN` (a MIG instance's parent's)."""


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid}.json"


def device_name(claim_uid: str, device: str) -> str:
    """The device's name within the spec: unique across claims, since each claim has its own spec."""
    return f"{claim_uid}-{device}"


def device_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI device id the kubelet hands to the runtime."""
    return f"{CDI_KIND}={device_name(claim_uid, device)}"


def claim_spec(claim_uid: str, devices: Sequence[CdiDevice]) -> dict[str, Any]:
    """The CDI spec (JSON) injecting `devices`."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {
                "name": device_name(claim_uid, d.name),
                "containerEdits": {"deviceNodes": [{"path": d.device_node}]},
            }
            for d in devices
        ],
        "containerEdits": {
            "env": [f"NVIDIA_VISIBLE_DEVICES={','.join(d.uuid for d in devices)}"],
            "deviceNodes": [{"path": path} for path in CONTROL_NODES],
        },
    }


def write_spec(cdi_dir: Path, claim_uid: str, devices: Sequence[CdiDevice]) -> Path:
    """Writes (or rewrites) the claim's spec atomically; its path."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = spec_path(cdi_dir, claim_uid)
    atomic_write(path, json.dumps(claim_spec(claim_uid, devices), indent=1))
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
