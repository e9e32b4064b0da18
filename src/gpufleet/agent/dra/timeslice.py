"""Applying a claim's TimeSlicing config to its GPUs, as NVIDIA's DRA driver does: the GPU's compute
mode back to DEFAULT (time-sliced sharing, not exclusive) and its time-slice interval set with
`nvidia-smi compute-policy --set-timeslice` (0 Default, 1 Short, 2 Medium, 3 Long). Unprepare sets the
interval back to Default. Neither touches the CDI spec: time-slicing is a setting of the GPU, not of
the container. MIG devices take no time-slice setting (the driver refuses it), so only whole GPUs are
set.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from typing import Protocol

NVIDIA_SMI = "nvidia-smi"
TIMEOUT_SECONDS = 60.0


class TimeSliceError(Exception):
    """nvidia-smi could not set a GPU's compute mode or time slice; the message quotes it."""


class TimeSlicer(Protocol):
    def set_time_slice(self, uuids: Sequence[str], interval: int) -> None:
        """Sets the GPUs' compute mode to DEFAULT and their time-slice interval."""


class NvidiaSmi:
    """`TimeSlicer` through the driver's nvidia-smi."""

    def __init__(self, binary: str = NVIDIA_SMI) -> None:
        self.binary = binary

    def set_time_slice(self, uuids: Sequence[str], interval: int) -> None:
        found = shutil.which(self.binary)
        if found is None:
            raise TimeSliceError(f"{self.binary} not found: cannot set the time slice of {', '.join(uuids)}")
        for uuid in uuids:
            self._run([found, "-i", uuid, "-c", "DEFAULT"])
            self._run([found, "compute-policy", "-i", uuid, "--set-timeslice", str(interval)])

    @staticmethod
    def _run(command: list[str]) -> None:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TimeSliceError(f"{' '.join(command)}: {exc}") from exc
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip()[-300:]
            raise TimeSliceError(f"{' '.join(command)} exited {done.returncode}: {said}")
