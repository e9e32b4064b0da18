"""Kubernetes quantity notation turned into gpufleet's integer units.

CPU is counted in milli-cores and memory in MiB, as ARCHITECTURE.md fixes; both round up so that a
request is never under-counted.

A quantity is at most 2^63-1 base units, as Kubernetes allows, and is refused before any arithmetic
that a huge exponent would make slow or overflow (`1e999990`, `9e999999Ei`).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from gpufleet.api.errors import QuantityError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
MAX_QUANTITY = 2**63 - 1
MAX_NODE_CPU_MILLI = 10**9
"""A node's CPU, at most a million cores: the fleet's counts (per node, summed over 65,536 nodes, in
milli-cores) stay well inside 64-bit integers."""
MAX_NODE_MEMORY_MIB = 2**40
"""A node's memory, at most an exbibyte (in MiB), for the same reason."""
"""The largest quantity Kubernetes represents, in base units (cores, bytes, counts)."""
_PATTERN = re.compile(r"^\s*([+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]{0,2})\s*$")


def parse_quantity(value: str | int | float, *, field: str = "quantity") -> Decimal:
    """The value of a Kubernetes quantity in base units (cores, bytes)."""
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity, got {value!r}", field=field)
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"expected a finite quantity, got {value!r}", field=field)
        if value < 0:
            raise QuantityError(f"must not be negative, got {value!r}", field=field)
        return _bounded(Decimal(str(value)), value, field)
    match = _PATTERN.match(str(value))
    if not match:
        raise QuantityError(f"not a quantity: {value!r}", field=field)
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise QuantityError(f"not a quantity: {value!r}", field=field) from exc
    unit = _BINARY.get(suffix) or _DECIMAL.get(suffix)
    if unit is None:
        raise QuantityError(f"unknown unit {suffix!r} in {value!r}", field=field)
    _bounded(base, value, field)  # before the multiplication, which a huge exponent overflows
    return _bounded(base * unit, value, field)


def _bounded(amount: Decimal, value: object, field: str) -> Decimal:
    if amount > MAX_QUANTITY:
        raise QuantityError(f"{value!r} is larger than the largest quantity allowed (2^63-1)", field=field)
    return amount


def cpu_milli(value: str | int | float, *, field: str = "cpu") -> int:
    """CPU quantity (`96`, `500m`, `1.5`) in milli-cores, rounded up."""
    return math.ceil(parse_quantity(value, field=field) * 1000)


def memory_mib(value: str | int | float, *, field: str = "memory") -> int:
    """Memory quantity (`1Ti`, `64Gi`, `512Mi`, bytes) in MiB, rounded up."""
    return math.ceil(parse_quantity(value, field=field) / (2**20))


def format_memory_mib(mib: int) -> str:
    """The shortest exact binary notation of a MiB count (`1Ti`, `64Gi`, `300Mi`)."""
    for suffix, size in (("Ti", 2**20), ("Gi", 2**10)):
        if mib and mib % size == 0:
            return f"{mib // size}{suffix}"
    return f"{mib}Mi"


def format_cpu_milli(milli: int) -> str:
    """CPU milli-cores in Kubernetes notation (`96`, `500m`)."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
