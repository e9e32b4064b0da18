"""Synthetic traffic for inference services: a daily request curve and a latency model.

Services may override the fleet-wide curve with annotations:
`twin.gpufleet.io/base-rps`, `twin.gpufleet.io/peak-rps`, `twin.gpufleet.io/peak-hour`,
`twin.gpufleet.io/replica-capacity-rps`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from gpufleet.twin.config import Traffic

ANNOTATION_PREFIX = "twin.gpufleet.io/"
_FIELDS = {
    "base-rps": "base_rps",
    "peak-rps": "peak_rps",
    "peak-hour": "peak_hour",
    "replica-capacity-rps": "replica_capacity_rps",
}


def traffic_for(default: Traffic, annotations: Mapping[str, str]) -> Traffic:
    """The service's traffic: the default with its annotations applied (bad numbers are ignored)."""
    changes: dict[str, float] = {}
    for suffix, name in _FIELDS.items():
        raw = annotations.get(ANNOTATION_PREFIX + suffix)
        if raw is None:
            continue
        try:
            changes[name] = float(raw)
        except ValueError:
            continue
    return dataclasses.replace(default, **changes) if changes else default


def expected_rps(traffic: Traffic, t: float, *, day_seconds: float = 86400.0) -> float:
    """The noiseless curve: a raised cosine with its top at `peak_hour`."""
    hour = (t % day_seconds) / day_seconds * 24.0
    phase = 2 * math.pi * (hour - traffic.peak_hour) / 24.0
    level = 0.5 * (1 + math.cos(phase))
    return traffic.base_rps + (traffic.peak_rps - traffic.base_rps) * level


def observed_rps(
    traffic: Traffic, t: float, rng: np.random.Generator, *, day_seconds: float = 86400.0
) -> float:
    noise = float(rng.normal(1.0, traffic.noise)) if traffic.noise > 0 else 1.0
    return max(0.0, expected_rps(traffic, t, day_seconds=day_seconds) * noise)


def p99_latency_ms(traffic: Traffic, rps: float, ready_replicas: int) -> float:
    """An M/M/1-like curve per replica: latency grows as 1 / (1 - utilisation), capped when saturated.

    With no ready replica nothing is served; the latency reported is the cap (a timeout).
    """
    cap = traffic.base_latency_ms * 100
    if ready_replicas <= 0:
        return cap if rps > 0 else 0.0
    utilisation = rps / (ready_replicas * traffic.replica_capacity_rps)
    if utilisation >= 0.99:
        return cap
    return min(cap, traffic.base_latency_ms / (1 - utilisation))
