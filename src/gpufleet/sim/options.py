"""Run options of `gpufleet simulate` as users write them (durations, failure and spot rates), parsed
once for the command line and for `--compare` configuration files."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from gpufleet.api.errors import ValidationError
from gpufleet.api.runtime import TOPOLOGY_LEVELS
from gpufleet.api.training import MIN_CHECKPOINT_SECONDS
from gpufleet.twin.config import SPOT_NOTICE_SECONDS

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str) -> float:
    """`90`, `90s`, `30m`, `2h`, `7d` (seconds; a number and one unit), > 0."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None or float(match.group(1)) <= 0:
        raise ValidationError(
            f"must be a positive duration such as 90s, 30m, 2h or 7d, got {text!r}", obj=option
        )
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def parse_checkpoint_interval(text: str, option: str = "--checkpoint-interval") -> float:
    """A duration of at least a second (`api.training.MIN_CHECKPOINT_SECONDS`)."""
    seconds = parse_duration(text, option)
    if seconds < MIN_CHECKPOINT_SECONDS:
        raise ValidationError(f"must be at least {MIN_CHECKPOINT_SECONDS:g}s, got {text!r}", obj=option)
    return seconds


def parse_failures(text: str) -> tuple[float | None, float | None]:
    """`mtbf=DURATION[,node-mtbf=DURATION]`: the fleet's mean times between GPU failures and between
    node losses, in seconds."""
    found: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ("mtbf", "node-mtbf") or key in found:
            raise ValidationError(
                f"expected mtbf=DURATION and/or node-mtbf=DURATION (e.g. mtbf=2h,node-mtbf=3d), got {text!r}",
                obj="--failures",
            )
        found[key] = parse_duration(value, f"--failures {key}")
    return found.get("mtbf"), found.get("node-mtbf")


MAX_SPOT_PER_DAY = 86400.0 / SPOT_NOTICE_SECONDS
"""A spot node is taken back at most once per notice period (two minutes): 720 times a day. More
would take a node back again before its last notice ran out, and ran a day of a small fleet for hours."""


def parse_spot(text: str) -> float:
    """`interruptions-per-day=N`: interruptions of each spot node per day (0 to `MAX_SPOT_PER_DAY`)."""
    key, sep, value = text.partition("=")
    try:
        rate = float(value)
    except ValueError:
        rate = -1.0
    if not sep or key.strip() != "interruptions-per-day" or not math.isfinite(rate) or rate < 0:
        raise ValidationError(f"expected interruptions-per-day=N with N >= 0, got {text!r}", obj="--spot")
    if rate > MAX_SPOT_PER_DAY:
        raise ValidationError(
            f"at most {MAX_SPOT_PER_DAY:g} interruptions a day (one per {SPOT_NOTICE_SECONDS:g} s notice), "
            f"got {rate:g}",
            obj="--spot",
        )
    return rate


SLOWDOWN_LEVELS = ("host", *TOPOLOGY_LEVELS)
"""The domains a simulated fleet's gang can span: its nodes, and the labels the pool controller gives
them. Any other level would never find two domains, so its factor would silently do nothing."""


def check_slowdown(factors: Mapping[str, float], option: str = "--gang-slowdown") -> dict[str, float]:
    """Per topology level (`host`, `rack` or `block`), a slowdown factor >= 1."""
    out: dict[str, float] = {}
    for level, factor in factors.items():
        if level not in SLOWDOWN_LEVELS:
            raise ValidationError(
                f"{level!r} is not a topology level of a simulated fleet: "
                f"one of {', '.join(SLOWDOWN_LEVELS)}",
                obj=option,
            )
        if not isinstance(factor, int | float) or not math.isfinite(factor) or factor < 1:
            raise ValidationError(f"{level}: the factor must be a number >= 1, got {factor!r}", obj=option)
        out[level] = float(factor)
    return out


def parse_slowdown(text: str) -> dict[str, float]:
    """`LEVEL=FACTOR[,LEVEL=FACTOR...]` (`rack=1.3,block=2`): how many times slower a gang computes
    when its pods span more than one domain of the level."""
    found: dict[str, float] = {}
    for part in text.split(","):
        level, sep, value = part.partition("=")
        try:
            factor = float(value)
        except ValueError:
            factor = math.nan
        if not sep or not level.strip() or level.strip() in found or math.isnan(factor):
            raise ValidationError(
                f"expected LEVEL=FACTOR pairs such as rack=1.3,block=2, got {text!r}", obj="--gang-slowdown"
            )
        found[level.strip()] = factor
    return check_slowdown(found)
