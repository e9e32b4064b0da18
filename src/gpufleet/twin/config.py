"""How the digital twin behaves: delays, fault rates, traffic. Every default is a plausible fleet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.twin.podlogs import PODS

SPOT_NOTICE_SECONDS = 120.0
"""Cloud providers' warning before a spot node is taken back (AWS: two minutes)."""


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Random faults, as rates per hour; 0 turns a kind off. Drawn from `seed`, so runs repeat."""

    gpu_failures_per_gpu_hour: float = 0.0
    node_losses_per_node_hour: float = 0.0
    spot_interruptions_per_node_hour: float = 0.0
    gpu_repair_seconds: float | None = 3600.0
    """How long a failed GPU stays unhealthy (None: until repaired on demand)."""
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Traffic:
    """A daily request curve: `base_rps` at night rising to `peak_rps` at `peak_hour` (UTC), with noise."""

    base_rps: float = 20.0
    peak_rps: float = 200.0
    peak_hour: float = 14.0
    noise: float = 0.05
    """Standard deviation of the multiplicative noise."""
    replica_capacity_rps: float = 60.0
    """Requests per second one replica serves before queueing grows without bound."""
    base_latency_ms: float = 80.0


@dataclass(frozen=True, slots=True)
class TwinConfig:
    provision_seconds: float = 0.0
    """From a Node's creation to Ready (a cloud VM boots in minutes; tests use 0)."""
    pod_start_seconds: float = 0.0
    model_load_seconds: float = 30.0
    """From an inference pod's start to ready (loading weights)."""
    metrics_interval_seconds: float = 60.0
    faults: FaultRates = field(default_factory=FaultRates)
    traffic: Traffic = field(default_factory=Traffic)
    day_seconds: float = 86400.0
    """The period of the request curve (shorter days make quick demos)."""
    gang_slowdown: Mapping[str, float] = field(default_factory=dict)
    """Per topology level (a node label such as `rack` or `block`, or `host` for the node itself), how
    many times slower a training job computes when its running pods sit in more than one domain of it:
    communication over a slower link. The largest factor of the levels it spans applies. Empty: none."""
    pod_logs: int = PODS
    """How many pods' logs the twin keeps (`gpufleet logs`), the newest first; 0 keeps none (the job
    simulator, whose process serves no logs)."""
