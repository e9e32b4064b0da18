"""The `/dev/nvidia-caps` device nodes of a MIG instance.

A process using a MIG device opens three character devices: its parent GPU's `/dev/nvidia<minor>`,
and the capability nodes of its GPU instance and of its compute instance,
`/dev/nvidia-caps/nvidia-cap<m>`. The driver lists each capability's minor number in
`/proc/driver/nvidia-caps/mig-minors` (`gpu<parent minor>/gi<GI id>/access <m>` and
`gpu<parent minor>/gi<GI id>/ci<CI id>/access <m>`, the GI and CI ids NVML gives), and the major is
the `nvidia-caps` line of `/proc/devices`. As NVIDIA's DRA driver does, the spec names the nodes with
their major and minor, so the runtime creates them in the container whether or not the host has them,
and with the mode the driver gives the capability (`DeviceFileMode` of
`/proc/driver/nvidia/capabilities/gpu<m>/mig/gi<g>[/ci<c>]/access`, the file NVIDIA's driver reads)
when that file is there.

Read at each prepare, not once: mig-parted may have made the instances after the agent started. A
node without the file (no MIG-capable driver, or /proc not mounted into the agent) gives MIG devices
their parent's node only, said once in the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.agent.dra.cdi import DeviceNode
from gpufleet.api.numerals import plain_digits

MIG_MINORS = Path("/proc/driver/nvidia-caps/mig-minors")
PROC_DEVICES = Path("/proc/devices")
CAPABILITIES = Path("/proc/driver/nvidia/capabilities")
CAPS_DIR = "/dev/nvidia-caps"
CAPS_DEVICE = "nvidia-caps"

log = logging.getLogger("gpufleet.agent.dra")


class MigCapsError(Exception):
    """The driver's capability tables do not name a MIG instance's GPU or compute instance."""


def parse_mig_minors(text: str) -> dict[str, int]:
    """`mig-minors`' lines as capability name -> minor (`gpu0/gi1/ci0/access` -> 12)."""
    minors: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not plain_digits(parts[1]):
            raise MigCapsError(f"{MIG_MINORS} line {number}: {line!r} is not '<capability> <minor>'")
        minors[parts[0]] = int(parts[1])
    return minors


def caps_major(proc_devices: str) -> int | None:
    """The `nvidia-caps` character device's major in `/proc/devices`; None when it is not there."""
    for line in proc_devices.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == CAPS_DEVICE and plain_digits(parts[0]):
            return int(parts[0])
    return None


@dataclass
class MigCaps:
    """Capability device nodes of MIG instances, from the driver's tables under /proc."""

    mig_minors: Path = MIG_MINORS
    proc_devices: Path = PROC_DEVICES
    capabilities: Path = CAPABILITIES
    _warned: bool = field(default=False, init=False)

    def nodes(self, parent_minor: int, gi_id: int, ci_id: int) -> tuple[DeviceNode, ...]:
        """The GI's and CI's capability nodes; none when the driver has no mig-minors file."""
        try:
            minors = parse_mig_minors(self.mig_minors.read_text())
        except FileNotFoundError:
            if not self._warned:
                log.warning(
                    "%s not found: MIG devices are injected with their parent GPU's device node only, "
                    "without their /dev/nvidia-caps nodes",
                    self.mig_minors,
                )
                self._warned = True
            return ()
        try:
            major = caps_major(self.proc_devices.read_text())
        except FileNotFoundError:
            major = None
        gi = f"gpu{parent_minor}/gi{gi_id}/access"
        ci = f"gpu{parent_minor}/gi{gi_id}/ci{ci_id}/access"
        missing = [name for name in (gi, ci) if name not in minors]
        if missing:
            raise MigCapsError(f"{self.mig_minors} has no {' and no '.join(missing)}")
        if major is None:
            # Without the major the runtime must find the nodes on the host (nvidia-modprobe makes them).
            log.warning(
                "%s has no %s line: naming capability nodes by path only", self.proc_devices, CAPS_DEVICE
            )
        return tuple(
            DeviceNode(
                path=f"{CAPS_DIR}/nvidia-cap{minors[name]}",
                major=major,
                minor=minors[name],
                file_mode=self._file_mode(name),
            )
            for name in (gi, ci)
        )

    def _file_mode(self, name: str) -> int | None:
        """`DeviceFileMode` of the capability's access file (`gpu0/gi1/ci0/access` is at
        `gpu0/mig/gi1/ci0/access`); None when the file or the line is not there."""
        gpu, rest = name.split("/", 1)
        try:
            text = (self.capabilities / gpu / "mig" / rest).read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "DeviceFileMode" and plain_digits(value.strip()):
                return int(value.strip())
        return None
