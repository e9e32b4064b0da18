"""What a CDI-enabled container runtime (containerd, CRI-O through the CDI library) does with the device
ids the kubelet hands it: resolve each id in the spec files of the CDI dir, and merge into the
container the spec-wide edits of each spec that provides a device (once per spec, before that spec's
first device) and every device's own edits, then apply them to the container as the CDI spec says:

- `env`: a variable set again replaces the earlier value (the last one wins);
- `deviceNodes`: one per container path, a later one replacing an earlier one;
- `mounts`: one per container path, likewise;
- `hooks`: appended.

Written for the tests after the CDI spec (SPEC.md, "Container Edits") and its Go library's
`InjectDevices` / `ContainerEdits.Apply`; no maintained Python implementation of CDI exists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Container:
    """The parts of an OCI spec that CDI edits."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    mounts: dict[str, dict[str, Any]] = field(default_factory=dict)
    hooks: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, edits: dict[str, Any]) -> None:
        for entry in edits.get("env", []):
            key, _, value = entry.partition("=")
            self.env[key] = value
        for node in edits.get("deviceNodes", []):
            self.device_nodes.pop(node["path"], None)
            self.device_nodes[node["path"]] = node
        for mount in edits.get("mounts", []):
            self.mounts.pop(mount["containerPath"], None)
            self.mounts[mount["containerPath"]] = mount
        self.hooks.extend(edits.get("hooks", []))


def load_specs(cdi_dir: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Fully qualified device id -> (its spec, its device entry), over every spec file in `cdi_dir`."""
    devices: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for path in sorted(cdi_dir.glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec["devices"]:
            qualified = f"{spec['kind']}={device['name']}"
            assert qualified not in devices, f"{qualified} is defined twice (a CDI resolution error)"
            devices[qualified] = (spec, device)
    return devices


def inject(cdi_dir: Path, device_ids: list[str]) -> Container:
    """The container the runtime makes for `device_ids`, in the order the kubelet lists them."""
    devices = load_specs(cdi_dir)
    container = Container()
    seen_specs: set[int] = set()
    for device_id in device_ids:
        assert device_id in devices, f"unresolvable CDI device {device_id}"
        spec, device = devices[device_id]
        if id(spec) not in seen_specs:
            seen_specs.add(id(spec))
            container.apply(spec.get("containerEdits", {}))
        container.apply(device.get("containerEdits", {}))
    return container
