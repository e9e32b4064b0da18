"""DeviceClass and request selectors in CEL, evaluated with cel-python (`celpy`), as Kubernetes does.

The environment is the one Kubernetes gives DRA selectors: a `device` variable with `driver`,
`attributes` and `capacity` (both keyed by domain, then by name: an unqualified name belongs to the
driver's domain) and `allowMultipleAllocations`; the `quantity()` and `semver()` functions with the
comparison methods of Kubernetes' CEL libraries (`compareTo`, `isGreaterThan`, `isLessThan`, and for
quantities `add`, `sub`, `asInteger`, `asApproximateFloat`, `isInteger`, `sign`; for versions `major`,
`minor`, `patch`). Capacities are quantities and version attributes semvers, so
`device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0` reads as on a cluster.

Why celpy (docs/dra.md): it is maintained, pure Python (no native build), and lets quantities and
versions be their own CEL values with methods, as in Kubernetes, where the Rust-backed binding converts
every value to plain CEL types. It is slower (about half a millisecond an evaluation), so a selector's
verdict on a device is kept by `SelectorCache`: a device's content does not change within its pool's
generation, and the allocator asks the same questions of the same devices cycle after cycle.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import celpy
import semver
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from gpufleet.api.dra_devices import Device
from gpufleet.api.errors import GpuFleetError, QuantityError
from gpufleet.api.quantity import parse_quantity


class CelSelectorError(GpuFleetError):
    """A selector expression does not compile."""


@functools.total_ordering
class QuantityValue:
    """A Kubernetes quantity in CEL: compared by amount, whatever its notation (`1Gi` == `1024Mi`)."""

    __slots__ = ("amount",)

    def __init__(self, amount: Decimal) -> None:
        self.amount = amount

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuantityValue) and self.amount == other.amount

    def __lt__(self, other: QuantityValue) -> bool:
        return self.amount < other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    def __repr__(self) -> str:
        return f"quantity({self.amount})"


@functools.total_ordering
class SemverValue:
    """A semantic version in CEL (a DRA `version` attribute, or `semver("1.2.3")`)."""

    __slots__ = ("version",)

    def __init__(self, version: semver.Version) -> None:
        self.version = version

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SemverValue) and self.version == other.version

    def __lt__(self, other: SemverValue) -> bool:
        return bool(self.version < other.version)

    def __hash__(self) -> int:
        return hash(self.version)

    def __repr__(self) -> str:
        return f"semver({self.version})"


def _quantity(text: Any) -> QuantityValue:
    try:
        return QuantityValue(parse_quantity(str(text)))
    except QuantityError as exc:
        raise ValueError(exc.detail) from exc  # celpy turns ValueError into a CEL evaluation error


def _semver(text: Any) -> SemverValue:
    return SemverValue(semver.Version.parse(str(text)))


def _compare(a: Any, b: Any) -> celtypes.IntType:
    if type(a) is not type(b) or not isinstance(a, QuantityValue | SemverValue):
        raise TypeError(f"compareTo: {a!r} and {b!r} are not two quantities or two versions")
    return celtypes.IntType(0 if a == b else (-1 if a < b else 1))


def _arith(sign: int) -> Any:
    def apply(a: Any, b: Any) -> QuantityValue:
        if not isinstance(a, QuantityValue):
            raise TypeError(f"{a!r} is not a quantity")
        other = b.amount if isinstance(b, QuantityValue) else Decimal(int(b))
        return QuantityValue(a.amount + sign * other)

    return apply


def _as_integer(q: QuantityValue) -> celtypes.IntType:
    if q.amount != q.amount.to_integral_value():
        raise ValueError(f"{q!r} is not an integer")
    return celtypes.IntType(int(q.amount))


# Kubernetes' CEL quantity and semver libraries, as functions whose first argument is the method's target
# (celpy calls `x.f(y)` as `f(x, y)`).
FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "semver": _semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "add": _arith(1),
    "sub": _arith(-1),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.amount)),
    "isInteger": lambda q: celtypes.BoolType(q.amount == q.amount.to_integral_value()),
    "sign": lambda q: celtypes.IntType((q.amount > 0) - (q.amount < 0)),
    "major": lambda v: celtypes.IntType(v.version.major),
    "minor": lambda v: celtypes.IntType(v.version.minor),
    "patch": lambda v: celtypes.IntType(v.version.patch),
}


@functools.cache
def _environment() -> celpy.Environment:
    # Built on first use: building celpy's parser takes a fifth of a second, which a process that never
    # meets a DRA claim should not pay at import.
    return celpy.Environment()


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> celpy.Runner:
    """The compiled program of a selector; an expression that does not parse is a user error."""
    try:
        env = _environment()
        return env.program(env.compile(expression), functions=FUNCTIONS)
    except CELParseError as exc:
        raise CelSelectorError(f"not a CEL expression: {exc}", field="cel.expression") from None


def split_name(qualified: str, driver: str) -> tuple[str, str]:
    """(domain, name) of an attribute or capacity name; an unqualified name is in the driver's domain."""
    domain, _, name = qualified.rpartition("/")
    return (domain or driver), name


def device_activation(driver: str, device: Device) -> dict[str, Any]:
    """The `device` variable a selector sees."""
    attributes: dict[str, dict[str, Any]] = {}
    for key, attribute in device.attributes.items():
        domain, name = split_name(key, driver)
        value: Any
        if attribute.version is not None:
            value = _semver(attribute.version)
        elif attribute.bool_ is not None:
            value = celtypes.BoolType(attribute.bool_)
        elif attribute.int_ is not None:
            value = celtypes.IntType(attribute.int_)
        else:
            value = celtypes.StringType(attribute.string or "")
        attributes.setdefault(domain, {})[name] = value
    capacity: dict[str, dict[str, Any]] = {}
    for key, cap in device.capacity.items():
        domain, name = split_name(key, driver)
        capacity.setdefault(domain, {})[name] = QuantityValue(parse_quantity(cap.value))
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("attributes"): _map_of_maps(attributes),
                celtypes.StringType("capacity"): _map_of_maps(capacity),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    bool(device.allow_multiple_allocations)
                ),
            }
        )
    }


def _map_of_maps(groups: Mapping[str, Mapping[str, Any]]) -> celtypes.MapType:
    return celtypes.MapType(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(name): value for name, value in values.items()}
            )
            for domain, values in groups.items()
        }
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """A selector's answer for one device: matched, or not, or the evaluation failed (with why)."""

    matched: bool
    error: str | None = None


DeviceIdentity = tuple[str, str, int, str]
"""(driver, pool, generation, device): within a pool's generation a device's content is fixed."""


@dataclass
class SelectorCache:
    """Selector verdicts per device, kept across cycles by whoever owns the scheduling view.

    A verdict depends only on the expression and the device's content, and a driver changes a device
    only by publishing a new generation of its pool, which is part of the key.
    """

    verdicts: dict[tuple[str, DeviceIdentity], Verdict] = field(default_factory=dict)
    limit: int = 200_000

    def evaluate(self, expression: str, identity: DeviceIdentity, device: Device) -> Verdict:
        key = (expression, identity)
        found = self.verdicts.get(key)
        if found is None:
            found = evaluate_selector(expression, identity[0], device)
            if len(self.verdicts) >= self.limit:
                self.verdicts.clear()  # a new fleet's worth of devices: start again rather than grow
            self.verdicts[key] = found
        return found


def evaluate_selector(expression: str, driver: str, device: Device) -> Verdict:
    """Whether `device` satisfies the selector. A runtime error (a missing attribute, a type mismatch)
    is not a match, and says why, as Kubernetes reports it."""
    program = compile_selector(expression)
    try:
        result = program.evaluate(device_activation(driver, device))
    except CELEvalError as exc:
        return Verdict(False, _message(exc))
    if isinstance(result, CELEvalError):
        return Verdict(False, _message(result))
    if not isinstance(result, celtypes.BoolType):
        return Verdict(False, f"the expression gives {type(result).__name__}, not a bool")
    return Verdict(bool(result))


def _message(exc: CELEvalError) -> str:
    return str(exc.args[0]) if exc.args else "CEL evaluation failed"
