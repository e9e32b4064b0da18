"""CUDA toolkit and NVIDIA driver version strings: their shape, and the numbers they stand for.

A workload states the CUDA toolkit its image was built with (`cudaVersion: "12.4"`); a node reports
its driver (`550.54.15`). This module only checks and parses the strings; which driver runs which
toolkit is the scheduling core's rule (`gpufleet.fleet.cuda`).

- CUDA: `major.minor`, optionally `.patch` (`12.4.1`, as image tags write it). The patch is accepted
  and ignored: within a minor release the driver NVIDIA lists differs only between updates, and minor
  version compatibility makes even that moot from CUDA 11 on. No leading zeros (`12.04` is refused:
  it is not clear whether 12.4 is meant).
- Driver: `major.minor[.revision]` as `nvidia-smi` prints it (`550.54.15`, `570.26`, `450.80.02`);
  revisions keep their leading zeros in the text and compare as numbers.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

# Plain groups only: the patterns go into the CRD schema too, where the API server checks them.
_CUDA = re.compile(r"^([1-9][0-9]?)\.(0|[1-9][0-9]?)(\.(0|[1-9][0-9]{0,2}))?$")
_DRIVER = re.compile(r"^([1-9][0-9]{0,3})\.([0-9]{1,4})(\.([0-9]{1,4}))?$")

CudaTuple = tuple[int, int]
DriverTuple = tuple[int, int, int]


def parse_cuda_version(text: str) -> CudaTuple:
    """`"12.4"` -> (12, 4); ValueError with a readable message for anything else."""
    found = _CUDA.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"{text!r} is not a CUDA version such as 12.4 (major.minor, optionally .patch)")
    return int(found[1]), int(found[2])


def parse_driver_version(text: str) -> DriverTuple:
    """`"550.54.15"` -> (550, 54, 15), `"570.26"` -> (570, 26, 0); ValueError for anything else."""
    found = _DRIVER.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"{text!r} is not an NVIDIA driver version such as 550.54.15")
    return int(found[1]), int(found[2]), int(found[4] or 0)


def _number_as_text(value: Any) -> Any:
    # Unquoted in YAML, `cudaVersion: 12.8` arrives as a float; its shortest repr is what was written
    # (a trailing zero, as in 12.10, is lost: quote such versions).
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return value


def _check_cuda(value: str) -> str:
    parse_cuda_version(value)
    return value


def _check_driver(value: str) -> str:
    parse_driver_version(value)
    return value


CudaVersion = Annotated[
    str,
    BeforeValidator(_number_as_text),
    AfterValidator(_check_cuda),
    WithJsonSchema({"type": "string", "pattern": _CUDA.pattern}),
]
"""A CUDA toolkit version (`12.4`), kept as written; parse with `parse_cuda_version`."""

DriverVersion = Annotated[
    str,
    AfterValidator(_check_driver),
    WithJsonSchema({"type": "string", "pattern": _DRIVER.pattern}),
]
"""An NVIDIA driver version (`550.54.15`), kept as written; parse with `parse_driver_version`."""
