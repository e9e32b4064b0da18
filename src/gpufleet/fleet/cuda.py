"""Which NVIDIA driver runs which CUDA toolkit: the rule the CUDA filter applies to node facts.

A pod whose image was built with CUDA X.Y starts only where the node's driver supports it; otherwise it
is scheduled and then fails at its first CUDA call. The rule has two parts, both from NVIDIA's CUDA
Toolkit Release Notes (Linux x86_64 columns):

- native support: each toolkit release lists the oldest driver it was released for (Table 3, "CUDA
  Toolkit and Corresponding Driver Versions"; `NATIVE_MINIMUM` keeps the GA release of every minor);
- minor version compatibility: from CUDA 11 on, any toolkit of a major release runs, with a limited
  feature set, on a driver at least the minimum of its major (Table 2, "CUDA Toolkit and Minimum
  Required Driver Version for CUDA Minor Version Compatibility"; `MINOR_COMPAT_MINIMUM`).

A toolkit runs on a driver at or above the lower of the two. The driver is backward compatible, so a
newer driver runs every older toolkit. A version the table does not list takes the minimum of the
first listed release after it; a version newer than every listed one runs only through minor version
compatibility within a known major (13.2 on any 580 driver), and a new major no driver is known to run.

Versions are compared as integers (`driver_code`), so the filter over thousands of nodes is one numpy
comparison. The forward-compatibility package (`cuda-compat`, newer toolkits on older datacenter
drivers) lives in the image and is invisible to a scheduler; a workload that carries it should not
state a CUDA version.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gpufleet.api.versions import CudaTuple, DriverTuple

# NVIDIA CUDA Toolkit Release Notes, Table 3 "CUDA Toolkit and Corresponding Driver Versions", Linux
# x86_64 "Toolkit Driver Version" of each minor release's GA (the earliest driver any of its releases
# runs on). 12.7 was never released.
NATIVE_MINIMUM: Mapping[CudaTuple, DriverTuple] = MappingProxyType(
    {
        (7, 0): (346, 46, 0),
        (7, 5): (352, 31, 0),
        (8, 0): (367, 48, 0),
        (9, 0): (384, 81, 0),
        (9, 1): (390, 46, 0),
        (9, 2): (396, 26, 0),
        (10, 0): (410, 48, 0),
        (10, 1): (418, 39, 0),
        (10, 2): (440, 33, 0),
        (11, 0): (450, 51, 5),
        (11, 1): (455, 23, 0),
        (11, 2): (460, 27, 3),
        (11, 3): (465, 19, 1),
        (11, 4): (470, 42, 1),
        (11, 5): (495, 29, 5),
        (11, 6): (510, 39, 1),
        (11, 7): (515, 43, 4),
        (11, 8): (520, 61, 5),
        (12, 0): (525, 60, 13),
        (12, 1): (530, 30, 2),
        (12, 2): (535, 54, 3),
        (12, 3): (545, 23, 6),
        (12, 4): (550, 54, 14),
        (12, 5): (555, 42, 2),
        (12, 6): (560, 28, 3),
        (12, 8): (570, 26, 0),
        (12, 9): (575, 51, 3),
        (13, 0): (580, 65, 6),
    }
)

# The same release notes, Table 2 "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor
# Version Compatibility", Linux x86_64: CUDA 13.x >= 580, 12.x >= 525.60.13, 11.x >= 450.80.02.
# Before CUDA 11 every minor release needed its own driver.
MINOR_COMPAT_MINIMUM: Mapping[int, DriverTuple] = MappingProxyType(
    {13: (580, 0, 0), 12: (525, 60, 13), 11: (450, 80, 2)}
)

_LISTED = sorted(NATIVE_MINIMUM)
NEWEST_LISTED: CudaTuple = _LISTED[-1]

UNKNOWN = -1
"""The code of a node whose driver is not known: it runs every CUDA version (docs/scheduling.md)."""
NO_DRIVER = 1 << 62
"""The code a CUDA version no known driver runs must reach: above every real driver's code."""


def driver_code(driver: DriverTuple) -> int:
    """A driver version as one integer that orders like the version (4 digits per part)."""
    major, minor, rev = driver
    return (major * 10_000 + minor) * 10_000 + rev


def minimum_driver(cuda: CudaTuple) -> DriverTuple | None:
    """The oldest driver that runs CUDA `cuda` (minor version compatibility included), or None when
    no driver the table knows of does (a CUDA major newer than the table)."""
    found = [NATIVE_MINIMUM[v] for v in _LISTED if v >= cuda][:1]
    compat = MINOR_COMPAT_MINIMUM.get(cuda[0])
    if compat is not None:
        found.append(compat)
    return min(found) if found else None


def minimum_code(cuda: CudaTuple) -> int:
    """`minimum_driver` as a driver code (`NO_DRIVER` when none is known)."""
    found = minimum_driver(cuda)
    return NO_DRIVER if found is None else driver_code(found)


def supports(driver: DriverTuple | None, cuda: CudaTuple) -> bool:
    """Whether a node with `driver` (None: unknown) runs a pod built with CUDA `cuda`."""
    return driver is None or driver_code(driver) >= minimum_code(cuda)


def cuda_text(cuda: CudaTuple) -> str:
    return f"{cuda[0]}.{cuda[1]}"


def driver_text(driver: DriverTuple) -> str:
    """A driver version as NVIDIA writes it: the revision with two digits (`450.80.02`), none when 0
    (`570.26`), a bare branch for a whole branch (`580`)."""
    major, minor, rev = driver
    if rev:
        return f"{major}.{minor}.{rev:02d}"
    return f"{major}.{minor}" if minor else str(major)


def requirement_text(cuda: CudaTuple) -> str:
    """What CUDA `cuda` asks of the driver, to follow the version in a sentence: `needs an NVIDIA driver
    >= 525.60.13 (...)`, or why no known driver runs it."""
    found = minimum_driver(cuda)
    if found is None:
        newest = f"{NEWEST_LISTED[0]}.x"
        return f"is newer than every CUDA release gpufleet knows the driver of (up to {newest})"
    text = f"needs an NVIDIA driver >= {driver_text(found)}"
    native = NATIVE_MINIMUM.get(cuda)
    if native is not None and native > found:
        # Minor version compatibility runs it with a limited feature set (no newer PTX to JIT).
        text += f" (minor version compatibility; >= {driver_text(native)} runs it natively)"
    return text
