"""The GPU models gpufleet knows, so a typo in a fleet definition fails loudly instead of making a pool
whose GPUs no request can ever match.

A model is named as users write it in `gpuModel` (e.g. `H100-80GB`). Each canonical name has aliases:
the NVML product name (`NVIDIA H100 80GB HBM3`), the GPU feature discovery label value
(`NVIDIA-H100-80GB-HBM3`) and short names. Names are compared ignoring case, spaces, `_` versus `-`
and a leading `NVIDIA`/`Tesla`. The catalogue only decides which names are accepted: a fleet keeps the
name the catalogue gives it: a known alias written in a pool, a node, a request or a queue's quota
(`H100`, `NVIDIA H100 80GB HBM3`) is stored as its canonical name (`H100-80GB`) when the object is
written, because the scheduler matches requests to nodes, and usage to quotas, by exact name.

The Alibaba cluster-trace-gpu-v2023 ("openb") names its models its own way; those names (`V100M16`,
`V100M32`, `P100`, `T4`, `A10`, and the undisclosed `G1`, `G2`, `G3`) are listed as models of their own.

A model not listed here is added with the environment variable `GPUFLEET_GPU_MODELS`, a comma-separated
list of names (e.g. `GPUFLEET_GPU_MODELS=MI300X,Gaudi3`). It is read once per process, so that every
check in a process accepts the same names: the `gpufleet` command reads it at start
(`load_extra_models`); a process that never does reads it at its first check. `set_extra_models` sets
the added names outright (tests, programs embedding gpufleet). `gpufleet gpu-models` prints the catalogue.
"""

from __future__ import annotations

import difflib
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator, ValidationInfo

from gpufleet.api.fields import PRIORITY_CLASSES_CONTEXT

EXTRA_MODELS_ENV = "GPUFLEET_GPU_MODELS"

# Canonical name -> aliases. NVML names are `nvidia-smi --query-gpu=name` output; GFD's label value is the
# NVML name with spaces as dashes, which normalisation already covers.
_CATALOGUE: dict[str, tuple[str, ...]] = {
    # Blackwell
    "GB200": ("NVIDIA GB200", "GB200-186GB"),
    "B200": ("NVIDIA B200", "B200-180GB", "B200-192GB"),
    "B100": ("NVIDIA B100",),
    "RTX-PRO-6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000"),
    # Hopper
    "H200-141GB": ("NVIDIA H200", "H200", "H200-SXM-141GB", "NVIDIA H200 NVL", "H200-NVL"),
    "GH200": ("NVIDIA GH200 480GB", "GH200-96GB", "GH200-144GB"),
    "H100-80GB": ("NVIDIA H100 80GB HBM3", "H100", "H100-SXM5-80GB", "H100-80GB-HBM3", "NVIDIA H100 PCIe"),
    "H100-94GB": ("NVIDIA H100 NVL", "H100-NVL", "H100-94GB-NVL"),
    "H800": ("NVIDIA H800", "H800-80GB"),
    "H20": ("NVIDIA H20", "H20-96GB"),
    # Ada Lovelace
    "L40S": ("NVIDIA L40S",),
    "L40": ("NVIDIA L40",),
    "L20": ("NVIDIA L20",),
    "L4": ("NVIDIA L4",),
    "RTX-6000-ADA": ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    "RTX-4090": ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    # Ampere
    "A100-40GB": (
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB",
        "A100",
        "A100-SXM4-40GB",
        "A100-PCIE-40GB",
    ),
    "A100-80GB": ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "A100-SXM4-80GB", "A100-PCIE-80GB"),
    "A800": ("NVIDIA A800-SXM4-80GB", "A800-80GB"),
    "A30": ("NVIDIA A30",),
    "A10": ("NVIDIA A10",),
    "A10G": ("NVIDIA A10G",),
    "A16": ("NVIDIA A16",),
    "A40": ("NVIDIA A40",),
    "A2": ("NVIDIA A2",),
    "RTX-A6000": ("NVIDIA RTX A6000", "RTX A6000"),
    "RTX-A5000": ("NVIDIA RTX A5000", "RTX A5000"),
    "RTX-A4000": ("NVIDIA RTX A4000", "RTX A4000"),
    "RTX-3090": ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
    # Turing, Volta, Pascal
    "T4": ("Tesla T4",),
    "RTX-8000": ("Quadro RTX 8000",),
    "RTX-6000": ("Quadro RTX 6000",),
    "V100-16GB": ("Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB", "V100", "V100-SXM2-16GB", "V100-PCIE-16GB"),
    "V100-32GB": ("Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB", "V100-SXM2-32GB", "V100-PCIE-32GB"),
    "V100S": ("Tesla V100S-PCIE-32GB", "V100S-32GB"),
    "P100": ("Tesla P100-PCIE-16GB", "Tesla P100-SXM2-16GB", "P100-16GB"),
    "P40": ("Tesla P40",),
    "P4": ("Tesla P4",),
    # The openb trace's own names (its P100, T4 and A10 are the entries above).
    "V100M16": (),
    "V100M32": (),
    "G1": (),
    "G2": (),
    "G3": (),
}

_PREFIX = re.compile(r"^(nvidia|tesla)-")


def normalise(name: str) -> str:
    """The comparison key of a name: lower case, spaces and `_` as `-`, without `NVIDIA `/`Tesla `."""
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return _PREFIX.sub("", key)


def _build_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for canonical, aliases in _CATALOGUE.items():
        for name in (canonical, *aliases):
            index.setdefault(normalise(name), canonical)
    return index


_INDEX = _build_index()


@dataclass(frozen=True, slots=True)
class _Extras:
    """The names added to the catalogue, and their comparison keys (first name wins)."""

    names: tuple[str, ...]
    index: dict[str, str] = field(compare=False)

    @classmethod
    def of(cls, names: Iterable[str]) -> _Extras:
        kept = tuple(name.strip() for name in names if name.strip())
        index: dict[str, str] = {}
        for name in kept:
            index.setdefault(normalise(name), name)
        return cls(kept, index)


_lock = threading.Lock()
_extras: _Extras | None = None
"""None until `load_extra_models` or `set_extra_models` runs (the first check runs the former)."""


def parse_extra_models(raw: str) -> tuple[str, ...]:
    """The names of a `GPUFLEET_GPU_MODELS` value: comma-separated, blanks ignored."""
    return tuple(name.strip() for name in raw.split(",") if name.strip())


def set_extra_models(names: Iterable[str]) -> None:
    """Makes `names` the models this process adds to the catalogue, replacing any added before."""
    global _extras
    extras = _Extras.of(names)
    with _lock:
        _extras = extras


def load_extra_models(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Reads `GPUFLEET_GPU_MODELS` from `environ` and makes its names the ones this process adds; the
    entry point calls it once at start, and later changes of the environment are not seen."""
    names = parse_extra_models(environ.get(EXTRA_MODELS_ENV, ""))
    set_extra_models(names)
    return names


def _current_extras() -> _Extras:
    global _extras
    extras = _extras
    if extras is not None:  # every check but the first of an unconfigured process: no lock to take
        return extras
    with _lock:
        if _extras is None:  # no entry point configured it: read the environment now, and only now
            _extras = _Extras.of(parse_extra_models(os.environ.get(EXTRA_MODELS_ENV, "")))
        return _extras


def extra_models() -> tuple[str, ...]:
    """The names added to the catalogue in this process (from `GPUFLEET_GPU_MODELS` unless set)."""
    return _current_extras().names


def canonical_model(name: str) -> str | None:
    """The catalogue's name for `name` (an alias or the name itself), or None when it is not a GPU model."""
    if not name.strip():
        return None
    key = normalise(name)
    found = _INDEX.get(key)
    if found is not None:
        return found
    return _current_extras().index.get(key)


def canonical_name(name: str) -> str:
    """`name` as the catalogue spells it when it is a known model or alias; else `name` unchanged."""
    return canonical_model(name) or name


def canonical_flavor(flavor: str) -> str:
    """A quota flavor (`MODEL` or `MODEL/CAPACITY`) with its model canonical; MIG profiles unchanged."""
    model, sep, capacity = flavor.rpartition("/")
    if not sep:
        return canonical_name(flavor)
    return f"{canonical_name(model)}/{capacity}" if model else flavor


def is_known_model(name: str) -> bool:
    return canonical_model(name) is not None


def added_models() -> list[str]:
    """The names added to the catalogue that it does not already list."""
    known = {normalise(name) for name in _INDEX}
    return [name for name in extra_models() if normalise(name) not in known]


def catalogue() -> dict[str, tuple[str, ...]]:
    """Canonical name -> aliases, the environment's additions last (without aliases)."""
    out = dict(_CATALOGUE)
    for extra in added_models():
        out.setdefault(extra, ())
    return out


def known_models() -> list[str]:
    """Every canonical name, the catalogue's then the environment's."""
    return [*_CATALOGUE, *added_models()]


def unknown_model_message(name: str) -> str:
    """Why `name` is refused and how to find or add a valid one."""
    close = difflib.get_close_matches(name, known_models(), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return (
        f"unknown GPU model {name!r}{hint} (`gpufleet gpu-models` lists the known ones; "
        f"add a model with {EXTRA_MODELS_ENV}={name})"
    )


def _check_gpu_model(value: str, info: ValidationInfo) -> str:
    # Objects read back from a store were checked when written; the catalogue may have changed since.
    context: dict[str, Any] = info.context or {}
    if PRIORITY_CLASSES_CONTEXT in context and context[PRIORITY_CLASSES_CONTEXT] is None:
        return value
    if value and not is_known_model(value):
        raise ValueError(unknown_model_message(value))
    return canonical_name(value) if value else value


def _canonical_on_write(value: str, info: ValidationInfo) -> str:
    context: dict[str, Any] = info.context or {}
    if PRIORITY_CLASSES_CONTEXT in context and context[PRIORITY_CLASSES_CONTEXT] is None:
        return value
    return canonical_name(value) if value else value


GpuModelName = Annotated[str, AfterValidator(_check_gpu_model)]
"""A GPU model of a fleet definition (a node or pool), checked against the catalogue and written as
its canonical name; empty passes."""

CanonicalGpuModel = Annotated[str, AfterValidator(_canonical_on_write)]
"""A GPU model reported rather than declared (a Node's): an alias becomes its canonical name, an unknown
name is kept, since a node has the GPUs it has."""
