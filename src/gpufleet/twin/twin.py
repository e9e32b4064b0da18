"""The digital twin: virtual nodes, a virtual kubelet, training work, traffic and faults.

What the twin does to the store is what real machines would report:
- Node status: a created node becomes Ready after `provision_seconds`; GPU failures (XIDs), node loss
  and spot interruption notices appear in its status.
- Pod status: a bound pod starts (Running), an inference pod becomes ready once its model is loaded,
  a training job's pods succeed when the job's work is done, and pods fail when their GPU or node does.
- Checkpoints: written at each job's checkpoint interval, and once more on a spot notice.
- ServiceLoad: each InferenceService's requests per second and p99 latency, every metrics interval.

It reads TrainingJob and InferenceService specs (durations, checkpoint intervals, traffic overrides)
and never the controllers' or the scheduler's state. Faults asked for from another thread (the HTTP
API) are queued and applied at the next step.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from gpufleet.api import evictions
from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec
from gpufleet.api.errors import ConflictError, GoneError, GpuFleetError, NotFoundError
from gpufleet.api.inference import InferenceService
from gpufleet.api.labels import JOB_LABEL, SERVICE_LABEL
from gpufleet.api.meta import Condition, ObjectMeta, set_condition
from gpufleet.api.runtime import (
    GpuHealth,
    Node,
    Pod,
    ServiceLoad,
    ServiceLoadSpec,
    Workload,
)
from gpufleet.api.training import TrainingJob, TrainingJobSpec
from gpufleet.store.eventpage import EventPages
from gpufleet.store.protocol import Store, WatchEvent
from gpufleet.twin import draslices
from gpufleet.twin import traffic as traffic_model
from gpufleet.twin.checkpointsteps import CheckpointSteps
from gpufleet.twin.clock import Clock, as_datetime
from gpufleet.twin.config import SPOT_NOTICE_SECONDS, TwinConfig
from gpufleet.twin.loop import EventLoop, Timer
from gpufleet.twin.podlogs import PodLogBook
from gpufleet.twin.podtable import PodTable
from gpufleet.twin.training import Run

log = logging.getLogger(__name__)

KINDS = ("Node", "Pod", "Checkpoint", "TrainingJob")
XID_GPU_FALLEN_OFF_BUS = 79


@dataclass(frozen=True, slots=True)
class GpuFailure:
    node: str
    gpu: int
    xid: int = XID_GPU_FALLEN_OFF_BUS


@dataclass(frozen=True, slots=True)
class GpuRepair:
    node: str
    gpu: int


@dataclass(frozen=True, slots=True)
class NodeLoss:
    node: str
    reason: str = evictions.NODE_LOST


@dataclass(frozen=True, slots=True)
class SpotInterruption:
    node: str
    notice_seconds: float = SPOT_NOTICE_SECONDS


Fault = GpuFailure | GpuRepair | NodeLoss | SpotInterruption


class Twin:
    """A participant of the runtime driver that plays the fleet's machines."""

    def __init__(self, store: Store, *, clock: Clock, config: TwinConfig | None = None) -> None:
        self.store = store
        self.clock = clock
        self.config = config or TwinConfig()
        self.loop = EventLoop()
        self.rng = np.random.default_rng(self.config.faults.seed)
        self.traffic_rng = np.random.default_rng(self.config.faults.seed + 1)
        self.cursor: str | None = None
        self.pages = EventPages(store)
        self.nodes: dict[str, Node] = {}
        self.pods = PodTable()
        self.runs: dict[tuple[str, str], Run] = {}
        self.checkpoints = CheckpointSteps()
        """Each job's complete checkpoints: where a run (re)starts from."""
        self.jobs: dict[tuple[str, str], TrainingJobSpec] = {}
        """Each TrainingJob's spec, from its events: what a run reads as it starts (its duration,
        checkpoint interval and replicas), without reading and validating the whole job again."""
        self.node_timers: dict[str, list[Timer]] = {}
        self.pod_timers: dict[tuple[str, str], Timer] = {}
        self._faults: deque[tuple[float, Fault]] = deque()
        """Injected faults, each with the time it was injected at."""
        self._lock = threading.Lock()
        self._metrics_timer: Timer | None = None
        self.faults: Counter[str] = Counter()
        """Faults that happened, by kind (GpuFailure, NodeLoss, SpotInterruption, GpuRepair)."""
        self.logs = PodLogBook(pods=self.config.pod_logs)
        """Each pod's lifecycle as log lines (`gpufleet logs`), written below where it happens."""

    # ============================================================= public interface
    def inject(self, fault: Fault) -> None:
        """Queues a fault at the clock's present; it happens at the first step at or after that time
        (safe from any thread)."""
        at = self.clock.now()
        with self._lock:
            self._faults.append((at, fault))

    def step(self, now: float) -> float | None:
        if self.cursor is None:
            self._resync(now)
        self._dispatch(now)
        for fault in self._faults_due(now):
            self._apply(fault, now)
        self.loop.run_due(now)
        if self._metrics_timer is None:
            self._metrics_timer = self.loop.schedule(at=now, action=self._publish_metrics, name="metrics")
        wake = self.loop.next_time()
        with self._lock:
            later = self._faults[0][0] if self._faults else None
        return later if wake is None or (later is not None and later < wake) else wake

    def _faults_due(self, now: float) -> list[Fault]:
        """The injected faults whose time has come. On the wall clock a fault can arrive while the
        runtime is still at an instant it read before: it waits for the next one, so that it never
        lands between two rounds of an instant, after a checkpoint stamped at that same instant, as
        if nothing had been lost."""
        due: list[Fault] = []
        with self._lock:
            while self._faults and self._faults[0][0] <= now:
                due.append(self._faults.popleft()[1])
        return due

    # ================================================================ store events
    def _resync(self, now: float) -> None:
        self.cursor = self.store.resource_version
        self.jobs = {(job.namespace or "default", job.name): job.spec for job in self.store.list(TrainingJob)}
        for node in self.store.list(Node):
            self._node_event(node, deleted=False, now=now)
        for pod in self.store.list(Pod):
            self._pod_event(pod, deleted=False, now=now)
        self.checkpoints.clear()
        for ckpt in self.store.list(Checkpoint):
            self.checkpoints.take(ckpt, deleted=False)

    def _dispatch(self, now: float) -> None:
        assert self.cursor is not None
        while True:
            try:
                batch, reached = self.pages.read(self.cursor, kinds=KINDS, limit=2000)
            except GoneError:
                self._resync(now)
                continue
            for event in batch:
                self._handle(event, now)
            self.cursor = reached
            if len(batch) < 2000:
                return

    def _handle(self, event: WatchEvent, now: float) -> None:
        obj = event.object
        deleted = event.type == "DELETED"
        if isinstance(obj, Node):
            self._node_event(obj, deleted=deleted, now=now)
        elif isinstance(obj, Pod):
            self._pod_event(obj, deleted=deleted, now=now)
        elif isinstance(obj, Checkpoint):
            self.checkpoints.take(obj, deleted=deleted)
        elif isinstance(obj, TrainingJob):
            key = (obj.namespace or "default", obj.name)
            if deleted:
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = obj.spec

    # ======================================================================== nodes
    def _node_event(self, node: Node, *, deleted: bool, now: float) -> None:
        if node.spec.dra:
            # A DRA node's slices follow its phase and GPU health, which this event may have changed.
            if deleted:
                draslices.withdraw(self.store, node.name)
            else:
                draslices.publish(self.store, node)
        if deleted:
            self.nodes.pop(node.name, None)
            for timer in self.node_timers.pop(node.name, []):
                timer.cancel()
            return
        first = node.name not in self.nodes
        self.nodes[node.name] = node
        if not first:
            return
        if node.status.phase == "Provisioning":
            at = now + self.config.provision_seconds
            self._node_timer(node.name, at, functools.partial(self._make_ready, node.name), "ready")
        elif node.status.phase == "Ready":
            self._schedule_random_faults(node.name, now)
            if node.status.interruption_time is not None:
                deadline = node.status.interruption_time.timestamp()
                self._node_timer(
                    node.name,
                    max(now, deadline),
                    lambda t, n=node.name: self._lose(
                        n, evictions.SPOT_INTERRUPTION, "spot capacity reclaimed", t
                    ),
                    "reclaim",
                )

    def _node_timer(self, node: str, at: float, action: object, name: str) -> None:
        assert callable(action)
        self.node_timers.setdefault(node, []).append(self.loop.schedule(at=at, action=action, name=name))

    def _write_node_status(self, name: str, change: object, now: float) -> Node | None:
        """Applies `change(node)` to the stored node's status and writes it (re-read on a conflict)."""
        assert callable(change)
        for _ in range(3):
            try:
                node = self.store.get(Node, name)
            except NotFoundError:
                return None
            status = node.status.model_copy(deep=True)
            change(status)
            try:
                written = self.store.update_status(node.model_copy(update={"status": status}))
            except ConflictError:
                continue
            self.nodes[name] = written
            return written
        return None

    def _make_ready(self, name: str, now: float) -> None:
        def ready(status: object) -> None:
            status.phase = "Ready"  # type: ignore[attr-defined]
            status.ready_time = as_datetime(now)  # type: ignore[attr-defined]
            status.conditions = set_condition(  # type: ignore[attr-defined]
                status.conditions,  # type: ignore[attr-defined]
                Condition(
                    type="Ready", status="True", reason="KubeletReady", message="virtual kubelet ready"
                ),
                now=as_datetime(now),
            )

        if self._write_node_status(name, ready, now) is not None:
            self._schedule_random_faults(name, now)

    def _schedule_random_faults(self, name: str, now: float) -> None:
        rates = self.config.faults
        node = self.nodes.get(name)
        if node is None:
            return
        gpus = max(node.spec.gpus, 0)
        if rates.gpu_failures_per_gpu_hour > 0 and gpus:
            delay = self.rng.exponential(3600.0 / (rates.gpu_failures_per_gpu_hour * gpus))
            gpu = int(self.rng.integers(gpus))
            self._node_timer(name, now + delay, lambda t: self._random(GpuFailure(name, gpu), t), "gpu-fault")
        if rates.node_losses_per_node_hour > 0:
            delay = self.rng.exponential(3600.0 / rates.node_losses_per_node_hour)
            self._node_timer(name, now + delay, lambda t: self._random(NodeLoss(name), t), "node-loss")
        if rates.spot_interruptions_per_node_hour > 0 and node.spec.capacity_type == "spot":
            delay = self.rng.exponential(3600.0 / rates.spot_interruptions_per_node_hour)
            self._node_timer(name, now + delay, lambda t: self._random(SpotInterruption(name), t), "spot")

    def _random(self, fault: Fault, now: float) -> None:
        node = self.nodes.get(fault.node)
        if node is None or node.status.phase != "Ready":
            return
        self._apply(fault, now)
        if isinstance(fault, GpuFailure):
            rates = self.config.faults
            if rates.gpu_failures_per_gpu_hour > 0 and node.spec.gpus:
                delay = self.rng.exponential(3600.0 / (rates.gpu_failures_per_gpu_hour * node.spec.gpus))
                gpu = int(self.rng.integers(node.spec.gpus))
                self._node_timer(
                    fault.node,
                    now + delay,
                    lambda t: self._random(GpuFailure(fault.node, gpu), t),
                    "gpu-fault",
                )

    # ======================================================================= faults
    def _apply(self, fault: Fault, now: float) -> None:
        node = self.nodes.get(fault.node)
        if node is None:
            log.warning("fault %s: no node %s", fault, fault.node)
            return
        self.faults[type(fault).__name__] += 1
        if isinstance(fault, GpuFailure):
            self._fail_gpu(fault, now)
        elif isinstance(fault, GpuRepair):
            self._repair_gpu(fault.node, fault.gpu, now)
        elif isinstance(fault, NodeLoss):
            self._lose(fault.node, fault.reason, "the node stopped responding", now)
        else:
            self._notice(fault, now)

    def _fail_gpu(self, fault: GpuFailure, now: float) -> None:
        message = f"XID {fault.xid} on GPU {fault.gpu}"

        def fail(status: object) -> None:
            gpus = [g for g in status.unhealthy_gpus if g.index != fault.gpu]  # type: ignore[attr-defined]
            gpus.append(GpuHealth(index=fault.gpu, xid=fault.xid, message=message, since=as_datetime(now)))
            status.unhealthy_gpus = sorted(gpus, key=lambda g: g.index)  # type: ignore[attr-defined]
            status.conditions = set_condition(  # type: ignore[attr-defined]
                status.conditions,  # type: ignore[attr-defined]
                Condition(type="GPUHealthy", status="False", reason=f"XID{fault.xid}", message=message),
                now=as_datetime(now),
            )

        if self._write_node_status(fault.node, fail, now) is None:
            return
        for pod in self._pods_on(fault.node):
            if fault.gpu in pod.spec.gpus or (pod.spec.mig is not None and pod.spec.mig.gpu == fault.gpu):
                self._finish_pod(
                    pod, "Failed", now, reason=evictions.GPU_FAILURE, message=f"{message} of {fault.node}"
                )
        repair = self.config.faults.gpu_repair_seconds
        if repair is not None:
            self._node_timer(
                fault.node, now + repair, lambda t: self._repair_gpu(fault.node, fault.gpu, t), "gpu-repair"
            )

    def _repair_gpu(self, name: str, gpu: int, now: float) -> None:
        def repair(status: object) -> None:
            left = [g for g in status.unhealthy_gpus if g.index != gpu]  # type: ignore[attr-defined]
            status.unhealthy_gpus = left  # type: ignore[attr-defined]
            if not left:
                status.conditions = set_condition(  # type: ignore[attr-defined]
                    status.conditions,  # type: ignore[attr-defined]
                    Condition(
                        type="GPUHealthy", status="True", reason="Repaired", message="all GPUs healthy"
                    ),
                    now=as_datetime(now),
                )

        self._write_node_status(name, repair, now)

    def _lose(self, name: str, reason: str, message: str, now: float) -> None:
        def lost(status: object) -> None:
            status.phase = "Lost"  # type: ignore[attr-defined]
            status.conditions = set_condition(  # type: ignore[attr-defined]
                status.conditions,  # type: ignore[attr-defined]
                Condition(type="Ready", status="False", reason=reason, message=message),
                now=as_datetime(now),
            )

        if self._write_node_status(name, lost, now) is None:
            return
        for timer in self.node_timers.pop(name, []):
            timer.cancel()
        for pod in self._pods_on(name):
            self._finish_pod(pod, "Failed", now, reason=reason, message=f"{message} ({name})")

    def _notice(self, fault: SpotInterruption, now: float) -> None:
        deadline = now + fault.notice_seconds

        def notice(status: object) -> None:
            status.interruption_time = as_datetime(deadline)  # type: ignore[attr-defined]
            status.conditions = set_condition(  # type: ignore[attr-defined]
                status.conditions,  # type: ignore[attr-defined]
                Condition(
                    type="SpotInterruption",
                    status="True",
                    reason="InterruptionNotice",
                    message=f"reclaimed in {fault.notice_seconds:g}s",
                ),
                now=as_datetime(now),
            )

        if self._write_node_status(fault.node, notice, now) is None:
            return
        for pod in self._pods_on(fault.node):
            self.logs.write(
                (pod.namespace or "default", pod.name),
                now,
                f"spot interruption notice: node {fault.node} is reclaimed in {fault.notice_seconds:g}s",
            )
        # Jobs on the node save their state while they still can.
        for key in {
            (p.namespace or "default", p.metadata.labels.get(JOB_LABEL, ""))
            for p in self._pods_on(fault.node)
        }:
            run = self.runs.get(key)
            if run is not None and run.interval is not None:
                run.advance(now)
                self._checkpoint(key, now)
        self._node_timer(
            fault.node,
            deadline,
            lambda t: self._lose(fault.node, evictions.SPOT_INTERRUPTION, "spot capacity reclaimed", t),
            "reclaim",
        )

    # ========================================================================= pods
    def _pods_on(self, node: str) -> list[Pod]:
        return [p for p in self.pods.values() if p.spec.node_name == node and not p.terminated]

    def _pod_event(self, pod: Pod, *, deleted: bool, now: float) -> None:
        key = (pod.namespace or "default", pod.name)
        if deleted:
            known = self.pods.get(key)
            if known is not None and known.metadata.uid == pod.metadata.uid:
                del self.pods[key]
                timer = self.pod_timers.pop(key, None)
                if timer is not None:
                    timer.cancel()
                if not known.terminated:
                    self.logs.write(key, now, f"stopped: {self._why_deleted(pod)}")
                self._update_run(pod, now)
            return
        known = self.pods.get(key)
        self.pods[key] = pod
        new = known is None or known.metadata.uid != pod.metadata.uid
        if new and pod.status.phase == "Pending":
            owner = (pod.spec.owner.kind, pod.spec.owner.name)
            self.logs.write(key, now, f"placed on node {pod.spec.node_name}{_devices(pod)}", owner=owner)
            node = self.nodes.get(pod.spec.node_name)
            if node is None or node.status.phase == "Lost":
                self._finish_pod(
                    pod, "Failed", now, reason=evictions.NODE_LOST, message=f"no node {pod.spec.node_name}"
                )
                return
            at = now + self.config.pod_start_seconds
            self.pod_timers[key] = self.loop.schedule(
                at=at, action=functools.partial(self._start, key), name="start"
            )
        elif new and pod.status.phase == "Running":
            self._resume(pod, now)
        elif known is not None and known.status.phase != pod.status.phase:
            self._update_run(pod, now)

    def _resume(self, pod: Pod, now: float) -> None:
        """After a restart of the twin: a running pod carries on (an inference pod may still be loading)."""
        key = (pod.namespace or "default", pod.name)
        if SERVICE_LABEL in pod.metadata.labels and not pod.status.ready:
            self.pod_timers[key] = self.loop.schedule(
                at=now + self.config.model_load_seconds,
                action=functools.partial(self._ready, key),
                name="ready",
            )
        self._update_run(pod, now)

    def _why_deleted(self, pod: Pod) -> str:
        """Why the control plane deleted a pod that had not finished: its workload's eviction of the
        pod's attempt, as the scheduler recorded it before deleting (preemption, drain, suspension)."""
        try:
            workload = self.store.get(Workload, pod.spec.workload, pod.namespace)
        except NotFoundError:
            return "deleted (its workload is gone)"
        for eviction in reversed(workload.status.evictions):
            if eviction.attempt == pod.spec.attempt:
                by = f" by {eviction.preemptor}" if eviction.preemptor else ""
                return f"{eviction.reason}{by}: {eviction.message}"
        return "deleted by the control plane"

    def _write_pod_status(self, key: tuple[str, str], change: object) -> Pod | None:
        assert callable(change)
        pod = self.pods.get(key)
        if pod is None:
            return None
        for _ in range(3):
            # The changes (`_start`, `_ready`, `_finish_pod`) assign fields and change no nested value
            # in place: a shallow copy is enough, a deep one was a fiftieth of a simulation's CPU.
            status = pod.status.model_copy()
            change(status)
            try:
                written = self.store.update_status(pod.model_copy(update={"status": status}))
            except ConflictError:
                try:
                    pod = self.store.get(Pod, key[1], key[0])
                except NotFoundError:
                    return None
                continue
            except NotFoundError:
                return None
            self.pods[key] = written
            return written
        return None

    def _start(self, key: tuple[str, str], now: float) -> None:
        self.pod_timers.pop(key, None)
        pod = self.pods.get(key)
        if pod is None or pod.status.phase != "Pending":
            return
        inference = SERVICE_LABEL in pod.metadata.labels

        def start(status: object) -> None:
            status.phase = "Running"  # type: ignore[attr-defined]
            status.start_time = as_datetime(now)  # type: ignore[attr-defined]
            status.ready = not inference  # type: ignore[attr-defined]

        written = self._write_pod_status(key, start)
        if written is None:
            return
        self.logs.write(key, now, f"started on node {written.spec.node_name}")
        if inference:
            self.pod_timers[key] = self.loop.schedule(
                at=now + self.config.model_load_seconds,
                action=functools.partial(self._ready, key),
                name="ready",
            )
        self._update_run(written, now)

    def _ready(self, key: tuple[str, str], now: float) -> None:
        self.pod_timers.pop(key, None)
        pod = self.pods.get(key)
        if pod is None or pod.status.phase != "Running":
            return

        def ready(status: object) -> None:
            status.ready = True  # type: ignore[attr-defined]

        if self._write_pod_status(key, ready) is not None:
            self.logs.write(key, now, "model loaded: ready to serve")

    def _finish_pod(
        self, pod: Pod, phase: str, now: float, *, reason: str | None, message: str | None
    ) -> None:
        key = (pod.namespace or "default", pod.name)
        timer = self.pod_timers.pop(key, None)
        if timer is not None:
            timer.cancel()

        def finish(status: object) -> None:
            status.phase = phase  # type: ignore[attr-defined]
            status.ready = False  # type: ignore[attr-defined]
            status.finish_time = as_datetime(now)  # type: ignore[attr-defined]
            status.reason = reason  # type: ignore[attr-defined]
            status.message = message  # type: ignore[attr-defined]

        written = self._write_pod_status(key, finish)
        if written is not None:
            self.logs.write(key, now, f"{phase}: {reason}: {message}" if reason else phase)
            self._update_run(written, now)

    # ============================================================== training work
    def _update_run(self, pod: Pod, now: float) -> None:
        """Re-reads which pods of the pod's job run and starts, re-paces or stops the job's run."""
        job = pod.metadata.labels.get(JOB_LABEL)
        if job is None:
            return
        namespace = pod.namespace or "default"
        key = (namespace, job)
        mine = self.pods.of_job(namespace, job)
        running = [p for p in mine if p.status.phase == "Running"]
        failed = any(p.status.phase == "Failed" for p in mine)
        run = self.runs.get(key)
        if run is not None and (failed or not running):
            run.cancel()  # interrupted: what was not checkpointed is lost
            del self.runs[key]
            return
        if not running or failed:
            return
        if run is None:
            run = self._new_run(namespace, job, now)
            if run is None:
                return
            self.runs[key] = run
            step = round(run.progress)
            text = f"resumed from checkpoint step {step}" if step else "started from step 0 (no checkpoint)"
            for p in running:
                self.logs.write((namespace, p.name), now, f"training run {text}")
        run.advance(now)
        run.running = len(running)
        run.slowdown = self._slowdown(running)
        self._pace(key, run, now)

    def _slowdown(self, running: list[Pod]) -> float:
        """The factor of the slowest link a gang's running pods talk over (1: all in one domain of every
        level that has a factor), read from the nodes the scheduler put them on."""
        factors = self.config.gang_slowdown
        if not factors or len(running) < 2:
            return 1.0
        worst = 1.0
        for level, factor in factors.items():
            if factor <= worst:
                continue
            domains = set()
            for pod in running:
                node = self.nodes.get(pod.spec.node_name)
                labels = node.metadata.labels if node is not None else {}
                domains.add(pod.spec.node_name if level == "host" else labels.get(level))
            if len(domains) > 1:
                worst = factor
        return worst

    def _new_run(self, namespace: str, job: str, now: float) -> Run | None:
        spec = self.jobs.get((namespace, job))
        if spec is None:
            return None
        return Run(
            job=job,
            namespace=namespace,
            duration=spec.duration_seconds,
            interval=spec.checkpoint.interval_seconds if spec.checkpoint else None,
            replicas=spec.replicas,
            progress=self.checkpoints.newest(namespace, job),
            updated=now,
        )

    def _pace(self, key: tuple[str, str], run: Run, now: float) -> None:
        """(Re)schedules the run's next checkpoint and its completion at its current rate."""
        run.cancel()
        if run.duration is not None:
            left = run.time_to(run.duration)
            if left is not None:
                run.timers.append(
                    self.loop.schedule(at=now + left, action=lambda t: self._complete(key, t), name="done")
                )
        target = run.next_checkpoint()
        if target is not None:
            wait = run.time_to(target)
            if wait is not None:
                run.timers.append(
                    self.loop.schedule(
                        at=now + wait, action=lambda t: self._on_checkpoint(key, t), name="ckpt"
                    )
                )

    def _on_checkpoint(self, key: tuple[str, str], now: float) -> None:
        run = self.runs.get(key)
        if run is None:
            return
        run.advance(now)
        self._checkpoint(key, now)
        self._pace(key, run, now)

    def _checkpoint(self, key: tuple[str, str], now: float) -> None:
        run = self.runs[key]
        namespace, job = key
        step = round(run.progress)
        try:
            uri_base = self.store.get(TrainingJob, job, namespace).spec.checkpoint
        except NotFoundError:
            return
        uri = (
            f"{uri_base.uri.rstrip('/')}/step-{step}"
            if uri_base and uri_base.uri
            else f"twin://{namespace}/{job}/step-{step}"
        )
        ckpt = Checkpoint(
            metadata=ObjectMeta(name=f"{job}-step-{step}", namespace=namespace, labels={JOB_LABEL: job}),
            spec=CheckpointSpec(job=job, step=step, uri=uri, size_bytes=0, time=as_datetime(now)),
        )
        try:
            stored = self.store.apply(ckpt)
            status = stored.status.model_copy(update={"phase": "Complete"})
            written = self.store.update_status(stored.model_copy(update={"status": status}))
        except GpuFleetError as exc:
            log.warning("checkpoint %s/%s not written: %s", namespace, ckpt.name, exc)
            return
        self.checkpoints.take(written, deleted=False)  # a run may restart before its event is read
        for pod in self.pods.of_job(namespace, job):
            if pod.status.phase == "Running":
                self.logs.write((namespace, pod.name), now, f"checkpoint written at step {step}: {uri}")

    def _complete(self, key: tuple[str, str], now: float) -> None:
        run = self.runs.pop(key, None)
        if run is None:
            return
        run.cancel()
        namespace, job = key
        for pod in self.pods.of_job(namespace, job):
            if pod.status.phase == "Running":
                self._finish_pod(pod, "Succeeded", now, reason="Completed", message="the job's work is done")

    # ================================================================== inference
    def _publish_metrics(self, now: float) -> None:
        self._metrics_timer = self.loop.schedule(
            at=now + self.config.metrics_interval_seconds, action=self._publish_metrics, name="metrics"
        )
        services = self.store.list(InferenceService).items
        if not services:
            return
        ready: dict[tuple[str, str], int] = {}
        for (ns, _), pod in self.pods.items():
            owner = pod.metadata.labels.get(SERVICE_LABEL)
            if owner is not None and pod.status.phase == "Running" and pod.status.ready:
                ready[(ns, owner)] = ready.get((ns, owner), 0) + 1
        for service in services:
            namespace = service.namespace or "default"
            curve = traffic_model.traffic_for(self.config.traffic, service.metadata.annotations)
            rps = traffic_model.observed_rps(
                curve, now, self.traffic_rng, day_seconds=self.config.day_seconds
            )
            count = ready.get((namespace, service.name), 0)
            load = ServiceLoad(
                metadata=ObjectMeta(name=service.name, namespace=namespace),
                spec=ServiceLoadSpec(
                    requests_per_second=round(rps, 3),
                    p99_latency_ms=round(traffic_model.p99_latency_ms(curve, rps, count), 3),
                    ready_replicas=count,
                    time=as_datetime(now),
                ),
            )
            try:
                self.store.apply(load)
            except GpuFleetError as exc:
                log.warning("load of %s not written: %s", service.describe(), exc)


def _devices(pod: Pod) -> str:
    """What the pod holds on its node, for its log: GPU indices, a share of one, or a MIG instance."""
    if pod.spec.mig is not None:
        return f", MIG {pod.spec.mig.profile} on GPU {pod.spec.mig.gpu}"
    if not pod.spec.gpus:
        return ""
    share = f" at {pod.spec.gpu_milli / 1000:g} each" if 0 < pod.spec.gpu_milli < 1000 else ""
    return f", GPUs {','.join(str(g) for g in pod.spec.gpus)}{share}"
