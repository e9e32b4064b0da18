"""The control plane's Prometheus metrics, defined once so both worlds export the same names.

Every metric lives in prometheus_client's default registry: `gpufleet up` serves it on its API's
`/metrics`, `gpufleet kube scheduler` and `gpufleet kube operator` on their `--metrics-bind-address`.
The code paths both worlds share record them (`controllers.decisions.run_cycles` the cycles,
admissions and preemptions; `controllers.queuestatus` the queue gauges and, through
`controllers.fleetmetrics`, the GPU gauges; `controllers.jobstate.record_metrics` the per-job
series; each world's bind write the bind latency), so no world records one twice.

Labels are bounded: `queue`, `flavor`, `reason`, `pool`, `model`, `state`, `namespace`, and for the
per-job series of TrainingJobs `trainingjob` (one series per job that exists; `forget_job` drops them
when the job goes; not `job`, which Prometheus gives every scraped series). No pod, node or workload
names. Names follow Prometheus' conventions: base units (seconds, GPUs), `_total` for counters,
`_timestamp_seconds` for points in time. docs/observability.md lists them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from prometheus_client import Counter, Gauge, Histogram

# Scheduling takes from under a millisecond to seconds on large fleets; binds are API round trips.
CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BIND_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)

PENDING_WORKLOADS = Gauge(
    "gpufleet_pending_workloads",
    "Workloads waiting in a leaf queue, by the reason the scheduler gave in its last cycle.",
    ["queue", "reason"],
)
PENDING_OLDEST = Gauge(
    "gpufleet_pending_oldest_seconds",
    "How long the queue's longest-waiting workload with this reason has waited since submission.",
    ["queue", "reason"],
)
ADMISSION_WAIT = Histogram(
    "gpufleet_admission_wait_seconds",
    "Time from a workload's submission to its admission.",
    ["queue"],
    buckets=WAIT_BUCKETS,
)
ADMISSIONS = Counter(
    "gpufleet_admissions_total", "Workloads admitted, by queue and quota flavor.", ["queue", "flavor"]
)
PREEMPTIONS = Counter(
    "gpufleet_preemptions_total",
    "Workloads evicted or shrunk by the scheduler for another one, by the victim's queue and the cause.",
    ["queue", "reason"],
)
EVICTIONS = Counter(
    "gpufleet_evictions_total",
    "Runs of admitted workloads ended by an eviction or a disruption (preemption, lost node or GPU, spot "
    "interruption, failed or deleted pod), by the workload's queue and the reason.",
    ["queue", "reason"],
)
CYCLE_SECONDS = Histogram(
    "gpufleet_scheduling_cycle_duration_seconds",
    "Wall time of one scheduling cycle of the core, its decisions carried out included.",
    buckets=CYCLE_BUCKETS,
)
CYCLES = Counter("gpufleet_scheduling_cycles_total", "Scheduling cycles run.")
CONTAINED_FAILURES = Counter(
    "gpufleet_contained_failures_total",
    "Errors no user caused (a bug, or a value no check foresaw) that the control plane met and contained: "
    "logged with a traceback, the object tried again later or left out until it changes, the others "
    "served. By the component that met it (a controller's name, scheduler, operator).",
    ["component"],
)
BIND_SECONDS = Histogram(
    "gpufleet_bind_duration_seconds",
    "Wall time to carry out one admission: binding its pods (Kubernetes) or creating them (embedded).",
    buckets=BIND_BUCKETS,
)
EVENTS_DROPPED = Counter(
    "gpufleet_events_dropped_total",
    "Kubernetes Events not written because the queue of Events waiting for the API server was full "
    "(as kube-scheduler's event broadcaster drops them).",
)
QUOTA_NOMINAL = Gauge(
    "gpufleet_queue_nominal_gpus", "A queue's nominal quota of a flavor, in GPUs.", ["queue", "flavor"]
)
QUOTA_USED = Gauge(
    "gpufleet_queue_used_gpus",
    "GPUs of a flavor held by a queue's admitted workloads, its child queues' included.",
    ["queue", "flavor"],
)
QUOTA_BORROWED = Gauge(
    "gpufleet_queue_borrowed_gpus",
    "GPUs of a flavor a queue uses beyond its nominal quota (borrowed from its cohort).",
    ["queue", "flavor"],
)
GPUS = Gauge(
    "gpufleet_gpus",
    "GPUs of a pool's nodes by state: allocated (some pod holds it), idle (healthy, held by none) or "
    "unhealthy.",
    ["pool", "model", "state"],
)
FRAGMENTED_GPUS = Gauge(
    "gpufleet_fragmented_gpus",
    "Allocated GPUs with room left only a small request can use (a free share or MIG instance).",
    ["pool", "model"],
)
QUEUE_POOL_GPUS = Gauge(
    "gpufleet_queue_pool_gpus",
    "GPUs a leaf queue's admitted workloads hold on a pool's nodes (a share or MIG instance counted as "
    "its fraction of a GPU).",
    ["queue", "pool"],
)
POOL_PRICE = Gauge(
    "gpufleet_pool_gpu_hour_price",
    "What one GPU-hour of the pool costs (its spec.pricePerGPUHour).",
    ["pool"],
)
JOB_RESTARTS = Gauge(
    "gpufleet_trainingjob_restarts",
    "Attempts of a TrainingJob ended by a disruption.",
    ["namespace", "trainingjob"],
)
JOB_LOST = Gauge(
    "gpufleet_trainingjob_lost_gpu_seconds",
    "GPU-seconds of a TrainingJob's work lost to restarts since its checkpoints.",
    ["namespace", "trainingjob"],
)
JOB_CHECKPOINT_TIME = Gauge(
    "gpufleet_trainingjob_last_checkpoint_timestamp_seconds",
    "Unix time of a running TrainingJob's newest complete checkpoint (its admission when it has none).",
    ["namespace", "trainingjob"],
)
JOB_CHECKPOINT_INTERVAL = Gauge(
    "gpufleet_trainingjob_checkpoint_interval_seconds",
    "A running TrainingJob's spec.checkpoint.intervalSeconds.",
    ["namespace", "trainingjob"],
)

CLOCK = Gauge(
    "gpufleet_clock_timestamp_seconds",
    "The control plane's clock at the scrape, as a Unix time: the world's time, which every "
    "_timestamp_seconds series is on. With `gpufleet up --time-scale N` it runs N times as fast as the "
    "wall clock; rules take ages from it, not from Prometheus' time().",
)
CLOCK.set_function(time.time)

_JOB_GAUGES = (JOB_RESTARTS, JOB_LOST, JOB_CHECKPOINT_TIME, JOB_CHECKPOINT_INTERVAL)


Labels = TypeVar("Labels", bound=tuple[str, ...])


_series_lock = threading.Lock()
_jobs: dict[tuple[str, str], tuple[int, float, float | None, float | None]] = {}
"""What `record_job` last set for each job: (restarts, lost GPU-seconds, checkpoint time, interval),
the pair None when the job has no checkpoint series. Only record_job sets these gauges, so a job's
series are touched only when a value changed (a job is recorded at every one of its reconciles and
its values change at two or three of them), and a checkpoint pair is removed only when it was set:
asking prometheus_client to remove a series it does not hold raises (and costs) a KeyError."""
_prices: dict[str, float] = {}
"""What `record_pool` last set for each pool: a pool is recorded at every reconcile (each pod that
comes or goes) and its price changes only when its spec does."""
_series: dict[Gauge, dict[tuple[str, ...], float]] = {}
"""What `set_series` last set on each gauge it owns. The control plane sets its gauges after every
scheduling pass and a pass changes one or two series; reading the gauge back (`collect()`) and
setting every series again cost more than the pass itself on a busy simulated fleet."""


def set_series(gauge: Gauge, values: Mapping[Labels, float]) -> None:
    """Sets `gauge` to exactly `values` (label values -> value): series not in it are removed, so a
    queue or reason that is gone leaves no stale series behind. Only the series that changed since
    the last call are touched; the gauges it is given are set through it alone."""
    with _series_lock:
        before = _series.get(gauge)
        if before is None:
            # The first call reads what the gauge holds (nothing, unless set by other means).
            before = {labels: float("nan") for labels in _label_values(gauge)}
        for labels in before.keys() - values.keys():
            gauge.remove(*labels)
        for labels, value in values.items():
            # A NaN before never equals: the series is set.
            if before.get(labels) != value:
                gauge.labels(*labels).set(value)
        _series[gauge] = {tuple(labels): value for labels, value in values.items()}


def _label_values(gauge: Gauge) -> Iterable[tuple[str, ...]]:
    # A sample's labels come in the order the gauge declares them.
    for metric in gauge.collect():
        for sample in metric.samples:
            yield tuple(sample.labels.values())


def record_job(
    namespace: str,
    job: str,
    *,
    restarts: int,
    lost_gpu_seconds: float | None,
    checkpoint_time: float | None,
    checkpoint_interval: float | None,
) -> None:
    """A TrainingJob's series. The checkpoint pair exists only while the job runs with checkpoints
    configured (`checkpoint_time` None otherwise), so a finished or pending job raises no alert."""
    key = (namespace, job)
    lost = lost_gpu_seconds or 0.0
    if checkpoint_time is None or not checkpoint_interval:
        checkpoint_time = checkpoint_interval = None
    values = (restarts, lost, checkpoint_time, checkpoint_interval)
    with _series_lock:
        before = _jobs.get(key)
        if before == values:
            return
        _jobs[key] = values
    if before is None or before[:2] != values[:2]:
        JOB_RESTARTS.labels(namespace, job).set(restarts)
        JOB_LOST.labels(namespace, job).set(lost)
    if checkpoint_time is not None and checkpoint_interval is not None:
        JOB_CHECKPOINT_TIME.labels(namespace, job).set(checkpoint_time)
        JOB_CHECKPOINT_INTERVAL.labels(namespace, job).set(checkpoint_interval)
    elif before is not None and before[2] is not None:
        _remove(JOB_CHECKPOINT_TIME, namespace, job)
        _remove(JOB_CHECKPOINT_INTERVAL, namespace, job)


def record_eviction(queue: str, reason: str) -> None:
    """One run of a workload ended by an eviction or a disruption. `reason` must come from a bounded set
    (the world's eviction reasons, Kubernetes' pod condition reasons), never a pod or node name."""
    EVICTIONS.labels(queue, reason or "Unknown").inc()


def use_clock(now: Callable[[], float]) -> None:
    """The world's clock, read at each scrape as `gpufleet_clock_timestamp_seconds` (the wall clock
    until a world with another clock, `gpufleet up --time-scale N`, says so)."""
    CLOCK.set_function(now)


def record_pool(pool: str, price_per_gpu_hour: float) -> None:
    """A GPUPool's price, which the cost recording rules multiply GPU-hours by."""
    with _series_lock:
        if _prices.get(pool) == price_per_gpu_hour:
            return
        _prices[pool] = price_per_gpu_hour
    POOL_PRICE.labels(pool).set(price_per_gpu_hour)


def forget_pool(pool: str) -> None:
    """Drops a deleted GPUPool's price."""
    with _series_lock:
        _prices.pop(pool, None)
    _remove(POOL_PRICE, pool)


def forget_job(namespace: str, job: str) -> None:
    """Drops a deleted TrainingJob's series: those `record_job` set, since removing one that
    prometheus_client does not hold raises a KeyError (most jobs never had a checkpoint pair)."""
    with _series_lock:
        before = _jobs.pop((namespace, job), None)
    if before is None:
        return
    for gauge in _JOB_GAUGES if before[2] is not None else _JOB_GAUGES[:2]:
        _remove(gauge, namespace, job)


def _remove(gauge: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)


def exported_names() -> frozenset[str]:
    """The names of the series this module defines, as Prometheus sees them (histograms' `_bucket`,
    `_sum`, `_count` and counters' `_total`)."""
    names: set[str] = set()
    for value in list(globals().values()):
        if isinstance(value, (Counter, Gauge, Histogram)):
            for metric in value.describe():
                if isinstance(value, Histogram):
                    names.update(metric.name + s for s in ("_bucket", "_sum", "_count"))
                elif isinstance(value, Counter):
                    names.add(metric.name + "_total")
                else:
                    names.add(metric.name)
    return frozenset(names)
