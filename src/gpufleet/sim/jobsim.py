"""Job-level simulation: a trace's jobs through the embedded control plane on a virtual clock.

The world is the one `gpufleet up` runs (the twin, every controller built by
`controllers.plane.build_manager`, one `Runtime`), on a `VirtualClock` and a throw-away store: a
`MemoryStore`, the Store protocol with the SQLite store's semantics and no file (given a state
directory, the SQLite store in it, to look at afterwards). Two
more participants of the runtime do the simulation's part and nothing else:

- the `Feeder` submits each trace job as a TrainingJob at its submission time (a gang of workers of
  `gpus/replicas` GPUs; `durationSeconds` is the trace's duration, so the twin completes it after
  that much work) and wakes the runtime at the next submission;
- the `Recorder` reads the store's event log (TrainingJob and Pod events, as any watcher would) and
  keeps the measurements: GPUs allocated and running over time, per queue, queue lengths, each job's
  submission, first start, completion, restarts and lost GPU-seconds. A job that has finished is
  deleted once recorded, with its checkpoints and its Workload, so that the store holds only live
  work (the Workload goes at once, as a foreground deletion takes dependents: left to the garbage
  collection of its owner, it was first marked Inactive by the scheduler, a write nobody read).

Nothing here decides anything: admission, placement, preemption, restarts and checkpoints are the
controllers', the scheduling core's and the twin's.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.errors import GoneError, NotFoundError
from gpufleet.api.labels import JOB_LABEL, POOL_LABEL, job_workload_name
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.pool import GPUPool
from gpufleet.api.queue import Queue
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import Node, Pod
from gpufleet.api.training import CheckpointPolicy, RestartPolicy, TrainingJob, TrainingJobSpec
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.plane import build_manager
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.sim.heap import FrozenHeap
from gpufleet.sim.jobfleet import GPUS_PER_NODE, mig_share, queue_name, runnable
from gpufleet.sim.philly import Trace, TraceJob
from gpufleet.store.eventpage import EventPages
from gpufleet.store.memory import MemoryStore
from gpufleet.store.protocol import ObjectRef
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.config import FaultRates, TwinConfig
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

DRAIN_LIMIT = 10 * 365 * 86400.0
"""Virtual time a drained run may take at most (a job that can never run would otherwise hold it)."""
QUIET_SECONDS = 3600.0
"""How often the twin publishes service metrics (the trace has no services) and an unchanged pool's
status is brought up to date; `gpufleet up` does both every minute, which would be most of the work.
Queue status (read by no decision) is written at most this often too, with all its changes, and so are
pending reasons whose numbers alone changed (a new reason type or node demand is written at once)."""
FAULT_CHECK_TICKS = 1024
"""Settles between two looks at whether a reconcile failed (`_check_reconciles`): a few seconds of a
run at most, for a look that costs nothing next to a settle."""
EVENTS_KEPT = 200_000
"""Events the store's log keeps (every participant reads it each settle round: far more than enough).
The in-memory store's log is emptied after every settle instead (`_settled`): each participant read it
to its end in the settle's last, quiet round, and an entry kept longer only waited to be freed from
memory that had gone cold (with it, the whole trace peaked at 553 MB instead of about 200, and ran
slower: `benchmarks/RESULTS.md`, "The event log emptied between instants")."""
MAX_RESTARTS = 1_000_000
"""A trace job is never given up on: preemptions and failures restart it from its checkpoint."""


SimStore = MemoryStore | SqliteStore
"""The simulation's store: in memory, or SQLite in a state directory kept for inspection."""


PROGRESS_LINE_SECONDS = 10.0
"""Wall seconds between two progress lines (`simulate(progress=...)`)."""
METER_SECONDS = 0.2
"""Wall seconds between two readings for a progress bar (`simulate(meter=...)`)."""


@dataclass(frozen=True, slots=True)
class SimProgress:
    """Where a run stands, for a progress bar."""

    day: float
    """Simulated days since the run's start."""
    finished: int
    jobs: int
    wall_seconds: float


@dataclass(frozen=True, slots=True)
class SimOptions:
    checkpoint_interval: float | None = None
    """Seconds of work between checkpoints (None: jobs never checkpoint, a restart starts over)."""
    gpu_mtbf_seconds: float | None = None
    """The fleet's mean time between GPU failures (None: no failures)."""
    gpu_repair_seconds: float = 3600.0
    restart_seconds: float = 0.0
    """From a pod's placement to its computing (container start, checkpoint load, collective set-up):
    paid by every start and restart, with the GPUs held but doing no work (the twin's pod start)."""
    node_mtbf_seconds: float | None = None
    """The fleet's mean time between node losses (None: none); a lost node is replaced at once."""
    spot_interruptions_per_day: float = 0.0
    """Interruptions of each spot node per day (with the twin's two-minute notice)."""
    seed: int = 0
    bucket_seconds: float = 3600.0
    """Width of the time series' buckets."""
    drain: bool = True
    """Run until every submitted job has finished (else stop at the window's end)."""
    scheduler: SchedulerConfig | None = None
    policy: str = "gpufleet"
    """`gpufleet` (a queue per virtual cluster, gpufleet's defaults), `fifo` (one StrictFIFO queue that
    never preempts) or `las` (one least-attained-service queue); the queues themselves are built by the
    caller (`sim.jobfleet`)."""
    gang_slowdown: Mapping[str, float] = field(default_factory=dict)
    """Per topology level, how many times slower a gang computes when it spans domains of it (the
    twin reads where its pods were placed; `TwinConfig.gang_slowdown`)."""
    keep_events: bool = False
    """Keep the Events the controllers record (for a state directory to be inspected afterwards).
    By default each is counted by reason and dropped without being built (`SimResult.events`,
    `controllers.events.record_all`): nothing in a simulation reads an Event, and keeping them cost
    CPU on every job and most of a long run's memory (docs/simulation.md, "Events are not kept")."""


def shape(gpus: int, per_node: int = GPUS_PER_NODE) -> tuple[int, int]:
    """(workers, GPUs per worker) of a job of `gpus` GPUs: one worker up to a node's GPUs, else the
    fewest equal workers of at most a node each (12 GPUs: 2 x 6; 32: 4 x 8)."""
    if gpus <= per_node:
        return 1, gpus
    size = max(d for d in range(1, per_node + 1) if gpus % d == 0)
    return gpus // size, size


def training_job(job: TraceJob, options: SimOptions, per_node: int = GPUS_PER_NODE) -> TrainingJob:
    replicas, size = shape(job.gpus, per_node)
    worker = PodRequest(mig=job.mig) if job.mig else PodRequest(gpus=size)
    queue = queue_name(job.cluster, options.policy)
    interval = options.checkpoint_interval if job.checkpoint_interval is None else job.checkpoint_interval
    return TrainingJob(
        metadata=ObjectMeta(name=job.name, namespace=queue),
        spec=TrainingJobSpec(
            queue=queue,
            priority_class="research",
            replicas=replicas,
            worker=worker,
            checkpoint=CheckpointPolicy(interval_seconds=interval) if interval else None,
            restart_policy=RestartPolicy(max_restarts=MAX_RESTARTS, backoff_seconds=0.0),
            duration_seconds=job.duration,
        ),
    )


class Series:
    """Step functions of time integrated into fixed buckets: `set(key, t, value)` closes the previous
    value's interval; `means()` is each key's time-average per bucket."""

    def __init__(self, start: float, width: float) -> None:
        self.start = start
        self.width = width
        self.sums: dict[str, np.ndarray] = {}
        self.value: dict[str, float] = {}
        self.since: dict[str, float] = {}

    def _add(self, key: str, t0: float, t1: float, value: float) -> None:
        if value == 0 or t1 <= t0:
            return
        sums = self._bucket(key, t1)
        b1 = int((t1 - self.start) // self.width)
        b0 = int((t0 - self.start) // self.width)
        if b0 == b1:
            sums[b0] += value * (t1 - t0)
            return
        sums[b0] += value * (self.start + (b0 + 1) * self.width - t0)
        sums[b0 + 1 : b1] += value * self.width
        sums[b1] += value * (t1 - (self.start + b1 * self.width))

    def _bucket(self, key: str, t: float) -> np.ndarray:
        b = int((t - self.start) // self.width)
        sums = self.sums.get(key)
        if sums is None or len(sums) <= b:
            grown = np.zeros(max(b + 1, 2 * (0 if sums is None else len(sums))))
            if sums is not None:
                grown[: len(sums)] = sums
            self.sums[key] = sums = grown
        return sums

    def point(self, key: str, t: float, amount: float) -> None:
        """Adds `amount` (an integral: GPU-seconds) to the bucket of `t`."""
        self._bucket(key, t)[int((t - self.start) // self.width)] += amount

    def set(self, key: str, t: float, value: float) -> None:
        old = self.value.get(key, 0.0)
        self._add(key, self.since.get(key, t), t, old)
        self.value[key] = value
        self.since[key] = t

    def add(self, key: str, t: float, delta: float) -> None:
        self.set(key, t, self.value.get(key, 0.0) + delta)

    def close(self, t: float) -> None:
        for key in list(self.value):
            self.set(key, t, self.value[key])

    def means(self, key: str, buckets: int) -> np.ndarray:
        sums = self.sums.get(key, np.zeros(0))
        out = np.zeros(buckets)
        n = min(buckets, len(sums))
        out[:n] = sums[:n]
        return out / self.width


@dataclass(slots=True)
class JobRecord:
    job: TraceJob
    queue: str
    submit: float
    start: float | None = None
    end: float | None = None
    restarts: int = 0
    lost_gpu_seconds: float = 0.0


@dataclass(slots=True)
class SimResult:
    trace: Trace
    pools: list[GPUPool]
    queues: list[Queue]
    options: SimOptions
    begin: float
    """Virtual time of the window's start (seconds since the epoch)."""
    end: float
    """Virtual time the simulation stopped at (the last job's completion when drained)."""
    window_end: float
    """End of the submission window (`end` when the whole trace was submitted)."""
    wall_seconds: float
    jobs: dict[str, JobRecord]
    series: Series
    buckets: int
    unplaceable: list[TraceJob]
    """Jobs the fleet can never run (larger than it, or a MIG profile it has none of): never submitted."""
    faults: dict[str, int] = field(default_factory=dict)
    cycles: int = 0
    peak_allocated: float = 0.0
    double_booked: list[str] = field(default_factory=list)
    """GPUs found held by two live pods at once (an invariant: always empty)."""
    events: dict[str, int] = field(default_factory=dict)
    """Events recorded and dropped unkept, by reason (empty with `SimOptions.keep_events`)."""

    @property
    def capacity(self) -> int:
        return sum(p.spec.nodes * p.spec.gpus_per_node for p in self.pools)


class Feeder:
    """Submits trace jobs at their submission times; a participant of the runtime."""

    def __init__(
        self,
        store: SimStore,
        jobs: Sequence[TraceJob],
        origin: float,
        options: SimOptions,
        on_submit: Callable[[TraceJob, float], None],
        per_node: int = GPUS_PER_NODE,
    ) -> None:
        self.store = store
        self.jobs = jobs
        self.origin = origin
        self.options = options
        self.on_submit = on_submit
        self.per_node = per_node
        self.next = 0
        self.specs: dict[tuple[object, ...], TrainingJobSpec] = {}
        """Each shape of job's spec, validated once: jobs of a shape differ in their duration alone."""

    def step(self, now: float) -> float | None:
        due: list[TraceJob] = []
        while self.next < len(self.jobs) and self.origin + self.jobs[self.next].submit <= now:
            due.append(self.jobs[self.next])
            self.next += 1
        if due:
            self.store.apply_many([self._training_job(j) for j in due])
            for job in due:
                self.on_submit(job, now)
        if self.next < len(self.jobs):
            return self.origin + self.jobs[self.next].submit
        return None

    @property
    def done(self) -> bool:
        return self.next >= len(self.jobs)

    def _training_job(self, job: TraceJob) -> TrainingJob:
        """`training_job`, with the spec of the job's shape validated at its first job only (building
        a job validated it whole, and the store validates what it is given again: a fortieth of a
        run); the store still validates each job, its duration with it."""
        queue = queue_name(job.cluster, self.options.policy)
        shape = (queue, job.gpus, job.mig, job.checkpoint_interval)
        spec = self.specs.get(shape)
        if spec is None:
            spec = self.specs[shape] = training_job(job, self.options, self.per_node).spec
        return TrainingJob(
            metadata=ObjectMeta(name=job.name, namespace=queue),
            spec=spec.model_copy(update={"duration_seconds": job.duration}),
        )


class Recorder:
    """Reads TrainingJob and Pod events and keeps the measurements; a participant of the runtime."""

    KINDS = ("TrainingJob", "Pod", "Checkpoint", "Node")

    def __init__(self, store: SimStore, series: Series, policy: str = "gpufleet") -> None:
        self.store = store
        self.policy = policy
        self.series = series
        self.cursor = store.resource_version
        self.pages = EventPages(store)
        self.jobs: dict[str, JobRecord] = {}
        self.pods: dict[tuple[str, str], tuple[float, bool, str]] = {}
        """Allocated pods: (GPUs, running, queue)."""
        self.pending: dict[str, int] = {}
        self.finished = 0
        self.held: dict[tuple[str, int], tuple[str, str]] = {}
        """(node, GPU index) -> the pod holding it (whole-GPU pods), to catch a GPU given twice."""
        self.double_booked: list[str] = []
        self.checkpoints: dict[tuple[str, str], dict[str, int]] = {}
        self.node_size: dict[str, int] = {}
        self.node_used: dict[str, float] = {}
        self.node_pool: dict[str, str] = {}
        """Node -> its GPUPool: GPUs held are also counted per pool (`held@POOL`, `held:QUEUE@POOL`),
        so idle GPU-hours and cost can be priced per pool."""
        self.fragmented = 0.0
        """Free GPUs on nodes that are partly used (a whole-node job cannot use them)."""
        """(namespace, job) -> its stored Checkpoints' names and steps."""
        self.peak_allocated = 0.0

    def submitted(self, job: TraceJob, now: float) -> None:
        queue = queue_name(job.cluster, self.policy)
        self.jobs[job.name] = JobRecord(job, queue, now)
        self.pending[queue] = self.pending.get(queue, 0) + 1
        self.series.add("pending", now, 1)
        self.series.add(f"pending:{queue}", now, 1)

    def step(self, now: float) -> float | None:
        done: list[JobRecord] = []
        superseded: list[ObjectRef] = []
        while True:
            try:
                events, reached = self.pages.read(self.cursor, kinds=self.KINDS, limit=5000)
            except GoneError as exc:
                raise RuntimeError("the simulation's recorder fell behind the store's event log") from exc
            for event in events:
                obj = event.object
                if isinstance(obj, Pod):
                    self._pod(obj, event.type == "DELETED", now)
                elif isinstance(obj, TrainingJob) and event.type != "DELETED":
                    record = self._job(obj, now)
                    if record is not None:
                        done.append(record)
                elif isinstance(obj, Checkpoint):
                    superseded += self._checkpoint(obj, event.type == "DELETED")
                elif isinstance(obj, Node) and obj.name not in self.node_size:
                    self.node_size[obj.name] = obj.spec.gpus
                    self.node_pool[obj.name] = obj.metadata.labels.get(POOL_LABEL, "")
            self.cursor = reached
            if len(events) < 5000:
                break
        if done:
            self._collect(done)
        if superseded:
            with contextlib.suppress(NotFoundError):
                self.store.delete_many(superseded)
        return None

    def _checkpoint(self, ckpt: Checkpoint, deleted: bool) -> list[ObjectRef]:
        """Keeps only a job's newest complete Checkpoint (what a restart resumes from): the twin writes
        one per interval, and a job of weeks would otherwise make every look at its checkpoints long."""
        namespace = ckpt.namespace or ""
        known = self.checkpoints.setdefault((namespace, ckpt.spec.job), {})
        if deleted:
            known.pop(ckpt.name, None)
            return []
        known[ckpt.name] = ckpt.spec.step
        if ckpt.status.phase != "Complete":
            return []
        older = [name for name, step in known.items() if step < ckpt.spec.step]
        for name in older:
            del known[name]
        return [ObjectRef("Checkpoint", name, namespace) for name in older]

    def _pod(self, pod: Pod, deleted: bool, now: float) -> None:
        key = (pod.namespace or "", pod.name)
        old = self.pods.pop(key, None)
        whole = pod.spec.mig is None and pod.spec.gpu_milli in (0, 1000)
        if old is not None:
            for index in pod.spec.gpus if whole else ():
                if self.held.get((pod.spec.node_name, index)) == key:
                    del self.held[(pod.spec.node_name, index)]
            gpus, running, queue = old
            self._use(pod.spec.node_name, -gpus, now)
            self._held(pod.spec.node_name, queue, -gpus, now)
            if running:
                self.series.add("running", now, -gpus)
        if deleted or pod.terminated:
            return
        gpus = (
            mig_share(pod.spec.mig.profile)  # a MIG instance counts as its part of the GPU's compute
            if pod.spec.mig is not None
            else len(pod.spec.gpus) * (pod.spec.gpu_milli or 1000) / 1000
        )
        running = pod.status.phase == "Running"
        queue = pod.namespace or ""
        self.pods[key] = (gpus, running, queue)
        for index in pod.spec.gpus if whole else ():
            holder = self.held.setdefault((pod.spec.node_name, index), key)
            if holder != key:
                self.double_booked.append(f"GPU {index} of {pod.spec.node_name}: {holder} and {key}")
        self._use(pod.spec.node_name, gpus, now)
        self._held(pod.spec.node_name, queue, gpus, now)
        self.peak_allocated = max(self.peak_allocated, self.series.value["allocated"])
        if running:
            self.series.add("running", now, gpus)
            record = self.jobs.get(pod.metadata.labels.get(JOB_LABEL, ""))
            if record is not None and record.start is None:
                record.start = now
                self.pending[record.queue] -= 1
                self.series.add("pending", now, -1)
                self.series.add(f"pending:{record.queue}", now, -1)

    def _held(self, node: str, queue: str, gpus: float, now: float) -> None:
        pool = self.node_pool.get(node, "")
        series = self.series
        series.add("allocated", now, gpus)
        series.add(f"allocated:{queue}", now, gpus)
        series.add(f"held@{pool}", now, gpus)
        series.add(f"held:{queue}@{pool}", now, gpus)

    def _use(self, node: str, gpus: float, now: float) -> None:
        size = self.node_size.get(node, 0)

        def stranded(used: float) -> float:
            return size - used if 0 < used < size else 0.0

        before = self.node_used.get(node, 0.0)
        after = max(0.0, before + gpus)
        self.node_used[node] = after
        self.fragmented += stranded(after) - stranded(before)
        self.series.set("fragmented", now, self.fragmented)

    def _job(self, job: TrainingJob, now: float) -> JobRecord | None:
        record = self.jobs.get(job.name)
        if record is None or record.end is not None:
            return None
        status = job.status
        if status.restarts > record.restarts or status.lost_gpu_seconds > record.lost_gpu_seconds:
            self.series.point("lost", now, status.lost_gpu_seconds - record.lost_gpu_seconds)
        record.restarts = status.restarts
        record.lost_gpu_seconds = status.lost_gpu_seconds
        if status.phase not in ("Succeeded", "Failed"):
            return None
        record.end = now
        self.finished += 1
        return record

    def _collect(self, done: list[JobRecord]) -> None:
        refs = [ObjectRef("TrainingJob", r.job.name, r.queue) for r in done]
        for record in done:
            names = self.checkpoints.pop((record.queue, record.job.name), {})
            refs += [ObjectRef("Checkpoint", name, record.queue) for name in names]
        with contextlib.suppress(NotFoundError):
            self.store.delete_many(refs)
        for record in done:
            # One by one: a Workload already gone must not keep the others.
            with contextlib.suppress(NotFoundError):
                self.store.delete("Workload", job_workload_name(record.job.name), record.queue)


def _check_reconciles(manager: ControllerManager) -> None:
    """A failure the control plane contained (logged with its traceback, then retried or the object
    left out: `controllers.failures`) makes the run's figures no longer the control plane's: the run
    stops, saying so."""
    if manager.contained_failures:
        raise RuntimeError(
            f"{manager.contained_failures} failure(s) of the control plane (logged above); the "
            "simulation stopped, since its figures would not be what the control plane decides"
        )


def _settled(store: MemoryStore) -> None:
    """The instant has settled: every participant read the event log up to its head in the last
    round, in which nothing was written (the SQLite store's readers may stop at the last event of
    their kinds, and keep their log)."""
    store.compact(keep=0)


def simulate(
    trace: Trace,
    pools: Sequence[GPUPool],
    queues: Sequence[Queue],
    *,
    begin: float = 0.0,
    days: float | None = None,
    options: SimOptions | None = None,
    state_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    meter: Callable[[SimProgress], None] | None = None,
) -> SimResult:
    """Runs the jobs of `trace` submitted in [begin, begin + days) (seconds after its first
    submission) on the fleet of `pools` with `queues`; returns what was measured.

    `progress` gets a line on where the run stands every 10 s of wall time (none while a `meter`
    takes readings for a progress bar, five a second) and one if Ctrl-C stops the run."""
    options = options or SimOptions()
    window = trace.window(begin, days)
    capacity = sum(p.spec.nodes * p.spec.gpus_per_node for p in pools)
    nodes = sum(p.spec.nodes for p in pools)
    per_node = max(p.spec.gpus_per_node for p in pools)
    runs = runnable(pools)
    jobs: list[TraceJob] = []
    unplaceable: list[TraceJob] = []
    for job in window.jobs:
        (jobs if runs(job) else unplaceable).append(job)
    origin = trace.start
    start = origin + begin
    clock = VirtualClock(start)
    faults = FaultRates(
        gpu_failures_per_gpu_hour=(
            3600.0 / (options.gpu_mtbf_seconds * capacity) if options.gpu_mtbf_seconds else 0.0
        ),
        gpu_repair_seconds=options.gpu_repair_seconds,
        node_losses_per_node_hour=(
            3600.0 / (options.node_mtbf_seconds * nodes) if options.node_mtbf_seconds else 0.0
        ),
        spot_interruptions_per_node_hour=options.spot_interruptions_per_day / 24.0,
        seed=options.seed,
    )
    discard = () if options.keep_events else ("Event",)
    with contextlib.ExitStack() as stack:
        store: SimStore = (
            SqliteStore.open(
                state_dir,
                synchronous="OFF",
                clock=clock.datetime,
                event_retention=EVENTS_KEPT,
                discard_kinds=discard,
            )
            if state_dir is not None
            else MemoryStore(
                clock=clock.datetime, event_retention=EVENTS_KEPT, discard_kinds=discard, share_results=True
            )
        )
        stack.callback(store.close)
        store.apply_many([*pools, *queues])
        twin = Twin(
            store,
            clock=clock,
            config=TwinConfig(
                faults=faults,
                metrics_interval_seconds=QUIET_SECONDS,
                pod_start_seconds=options.restart_seconds,
                gang_slowdown=dict(options.gang_slowdown),
                pod_logs=0,
            ),
        )
        manager = build_manager(
            store,
            config=options.scheduler,
            pool_status_seconds=QUIET_SECONDS,
            pool_write_seconds=QUIET_SECONDS,
            queue_status_seconds=QUIET_SECONDS,
            reason_refresh_seconds=QUIET_SECONDS,
            metrics=False,
        )
        series = Series(start, options.bucket_seconds)
        recorder = Recorder(store, series, options.policy)
        feeder = Feeder(store, jobs, origin, options, recorder.submitted, per_node)
        runtime = Runtime(store, clock=clock, participants=[feeder, twin, manager, recorder])
        wall = time.perf_counter()
        end = start + (days * 86400.0 if days is not None else 0.0)
        last_report = wall

        def where(wall_now: float) -> SimProgress:
            return SimProgress((clock.now() - start) / 86400, recorder.finished, len(jobs), wall_now - wall)

        report, every = _reporter(progress, meter)
        # The run's state only grows; frozen, the cyclic collector stops walking it (sim.heap).
        heap = stack.enter_context(FrozenHeap())

        def unfinished() -> bool:
            nonlocal last_report
            heap.tick()
            if heap.ticks % FAULT_CHECK_TICKS == 0:
                _check_reconciles(manager)
            if isinstance(store, MemoryStore):
                _settled(store)
            if report is not None and time.perf_counter() - last_report > every:
                last_report = time.perf_counter()
                report(where(last_report))
            if not options.drain:
                return clock.now() < end
            return not feeder.done or recorder.finished < len(jobs)

        try:
            runtime.run_while(unfinished, limit=DRAIN_LIMIT if options.drain else end - start)
        except KeyboardInterrupt:
            if progress is not None:  # where the run stood, since no summary or report comes
                progress(f"interrupted at {_line(where(time.perf_counter()))}; nothing reported")
            raise
        _check_reconciles(manager)
        now = clock.now()
        series.close(now)
        wall_seconds = time.perf_counter() - wall
        scheduling = manager.controllers[0]
        cycles = int(getattr(getattr(scheduling, "stats", None), "cycles", 0))
        return SimResult(
            trace=window,
            pools=list(pools),
            queues=list(queues),
            options=options,
            begin=start,
            end=now,
            window_end=min(now, end) if days is not None else now,
            wall_seconds=wall_seconds,
            jobs=recorder.jobs,
            series=series,
            buckets=max(1, math.ceil((now - start) / options.bucket_seconds)),
            unplaceable=unplaceable,
            faults=dict(twin.faults),
            cycles=cycles,
            peak_allocated=recorder.peak_allocated,
            double_booked=recorder.double_booked,
            events={reason: n for (_, reason), n in sorted(store.discarded.items())},
        )


def _reporter(
    progress: Callable[[str], None] | None, meter: Callable[[SimProgress], None] | None
) -> tuple[Callable[[SimProgress], None] | None, float]:
    """What takes a reading of where the run stands, and how often: a progress bar's meter, else a line."""
    if meter is not None:
        return meter, METER_SECONDS
    if progress is not None:
        return (lambda at: progress(_line(at))), PROGRESS_LINE_SECONDS
    return None, PROGRESS_LINE_SECONDS


def _line(at: SimProgress) -> str:
    return f"day {at.day:.2f}: {at.finished}/{at.jobs} jobs finished, {at.wall_seconds:.0f} s"
