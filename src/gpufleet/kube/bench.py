"""`gpufleet bench kube`: pods bound per second on a real API server, any scheduler, side by side.

The load is kube-scheduler's own throughput shape: fake GPU nodes (8 GPUs each, Ready, no not-ready
taint, the labels gpufleet reads) and pods that each ask for GPUs and select only the run's nodes.
Two ways to time it:

- pending (the default): every pod exists before the scheduler starts; the bench starts it (gpufleet's
  own scheduler, or the command given, such as kube-scheduler) and times from that start to the last
  bind, so start-up, the first list and the first decisions are all counted;
- stream: the scheduler already runs; the bench times from the first pod created to the last bind.

A watch on the run's pods notes when each one is first seen bound. The API server's own metrics
(`apiserver_request_total`, `process_cpu_seconds_total`) are read before and after, so the requests
and the server CPU each scheduler causes are compared too; the scheduler's CPU and peak memory are
read from its process when the bench started it. Everything the run made is deleted at the end (on an
API server without a controller manager its namespace stays Terminating, as every namespace does there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.api.errors import ConflictError
from gpufleet.api.labels import BENCH_RUN_LABEL
from gpufleet.kube.config import GANG_LABEL, GANG_SIZE_LABEL, GPU_MODEL_LABEL, QUEUE_LABEL
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

log = logging.getLogger(__name__)

GPUS_PER_NODE = 8
WRITERS = 16
"""Concurrent writes while setting up nodes and pods."""


class MetricsReader(Protocol):
    def metrics_text(self) -> str:
        """The API server's `/metrics`, as Prometheus text."""
        ...


@dataclass(frozen=True, slots=True)
class KubeBenchResult:
    scheduler: str
    mode: str
    nodes: int
    pods: int
    gang_size: int
    gpus_per_pod: int
    bound: int
    seconds: float
    pods_per_s: float
    first_bind_s: float | None
    p50_bind_ms: float | None
    p99_bind_ms: float | None
    scheduler_cpu_s: float | None
    scheduler_peak_rss_mib: float | None
    apiserver_requests: int | None
    apiserver_cpu_s: float | None
    apiserver_cpu_ms_per_pod: float | None
    events_at_last_bind: int | None = None
    """Events the API server had taken (POSTs since the start) when the last pod was bound."""
    events_done_s: float | None = None
    """From the start until the scheduler's Events were all written (one per pod, or none came for
    `EVENTS_QUIET_SECONDS`): a scheduler that writes its Events after its binds pays for them here."""
    apiserver_cpu_ms_per_pod_with_events: float | None = None
    """The API server's CPU per pod from the start until `events_done_s`."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


EVENTS_QUIET_SECONDS = 5.0
"""After the last bind, Events are waited for until one per pod came or none came for this long."""
EVENTS_WAIT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class ServerSample:
    requests: float
    cpu_seconds: float
    event_posts: float = 0.0


def server_sample(reader: MetricsReader | None) -> ServerSample | None:
    """The API server's request count and CPU seconds so far; None where its metrics cannot be read."""
    if reader is None:
        return None
    try:
        text = reader.metrics_text()
    except ApiError as exc:
        log.warning("API server metrics not read: %s", exc)
        return None
    requests = cpu = events = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "apiserver_request":
            for sample in family.samples:
                if sample.name != "apiserver_request_total":
                    continue
                requests += sample.value
                if sample.labels.get("resource") == "events" and sample.labels.get("verb") == "POST":
                    events += sample.value
        elif family.name == "process_cpu_seconds":
            cpu += sum(s.value for s in family.samples)
    return ServerSample(requests, cpu, events)


class BindWatch:
    """Notes when each of the run's pods is first seen bound (a watch from a list's resourceVersion)."""

    def __init__(self, api: Transport, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.bound_at: dict[str, float] = {}
        self.created_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.version = "0"

    def start(self) -> None:
        listed = self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods", query={"limit": 1})
        self.version = str(listed.get("metadata", {}).get("resourceVersion") or "0")
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-watch")
        self._thread.start()

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while not self._stop.is_set():
            query: dict[str, str | int | bool] = {
                "resourceVersion": self.version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": 60,
            }
            try:
                for event in self.api.watch(path, query=query, timeout=70):
                    self._note(event)
                    if self._stop.is_set():
                        return
            except ApiError as exc:
                if self._stop.is_set():
                    return
                log.warning("bench watch: %s; watching again", exc)
                time.sleep(0.2)

    def _note(self, event: Json) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        self.version = str(meta.get("resourceVersion") or self.version)
        if event.get("type") not in ("ADDED", "MODIFIED"):
            return
        name = str(meta.get("name"))
        now = time.monotonic()
        with self._lock:
            self.created_at.setdefault(name, now)
            if (obj.get("spec") or {}).get("nodeName") and name not in self.bound_at:
                self.bound_at[name] = now

    def count(self) -> int:
        with self._lock:
            return len(self.bound_at)

    def stop(self) -> None:
        self._stop.set()


@dataclass(slots=True)
class Started:
    """A scheduler process the bench started, watched for CPU and peak memory."""

    process: subprocess.Popen[bytes]
    started: float
    peak_rss: int = 0

    def sample(self) -> None:
        self.peak_rss = max(self.peak_rss, _peak_rss(self.process.pid))

    def cpu_seconds(self) -> float | None:
        return _cpu_seconds(self.process.pid)

    def stop(self, grace: float = 15.0) -> None:
        """Stops the process and whatever it started (a wrapper such as a profiler leaves its child)."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # children still in its group

    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            self.process.send_signal(sig)


def _proc_status(pid: int, key: str) -> int:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _peak_rss(pid: int) -> int:
    return _proc_status(pid, "VmHWM") or _proc_status(pid, "VmRSS")


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def gpufleet_scheduler_command(
    kubeconfig: str | None, scheduler_name: str, extra: Sequence[str] = ()
) -> list[str]:
    """gpufleet's own scheduler, as its CLI starts it, without leader election."""
    import sys

    command = [sys.executable, "-m", "gpufleet.cli.main", "kube", "scheduler", "--no-leader-elect"]
    command += ["--scheduler-name", scheduler_name]
    if kubeconfig:
        command += ["--kubeconfig", kubeconfig]
    return command + list(extra)


class KubeBench:
    """One run: its namespace, nodes and pods on the API server, and the timing."""

    def __init__(
        self,
        api: Transport,
        *,
        nodes: int,
        pods: int,
        gang_size: int = 1,
        gpus_per_pod: int = 1,
        scheduler_name: str = "gpufleet",
        metrics: MetricsReader | None = None,
        run: str | None = None,
    ) -> None:
        if gpus_per_pod < 1 or gpus_per_pod > GPUS_PER_NODE:
            raise ValueError(f"--gpus-per-pod must be 1 to {GPUS_PER_NODE}, got {gpus_per_pod}")
        if gang_size < 1 or pods % gang_size:
            raise ValueError(f"--pods ({pods}) must be a multiple of --gang-size ({gang_size})")
        if pods * gpus_per_pod > nodes * GPUS_PER_NODE:
            raise ValueError(
                f"{pods} pods of {gpus_per_pod} GPUs do not fit {nodes} nodes of {GPUS_PER_NODE} GPUs"
            )
        self.api = api
        self.nodes = nodes
        self.pods = pods
        self.gang_size = gang_size
        self.gpus_per_pod = gpus_per_pod
        self.scheduler_name = scheduler_name
        self.metrics = metrics
        self.run_id = run or uuid.uuid4().hex[:6]
        self.namespace = f"gpufleet-bench-{self.run_id}"
        self.queue = f"bench-{self.run_id}"

    # ------------------------------------------------------------------ the run
    def measure(
        self,
        *,
        start: Callable[[], subprocess.Popen[bytes]] | None,
        timeout: float = 600.0,
        progress: Callable[[str], None] = lambda _: None,
    ) -> KubeBenchResult:
        """Sets up, times the scheduler (started here after the pods exist, or already running), cleans up."""
        with self.setup(progress):
            watch = BindWatch(self.api, self.namespace)
            watch.start()
            try:
                if start is None:
                    return self._stream(watch, timeout, progress)
                return self._pending(watch, start, timeout, progress)
            finally:
                watch.stop()

    def _pending(
        self,
        watch: BindWatch,
        start: Callable[[], subprocess.Popen[bytes]],
        timeout: float,
        progress: Callable[[str], None],
    ) -> KubeBenchResult:
        self.create_pods(progress)
        _wait(lambda: len(watch.created_at) >= self.pods, 60, "the watch to see every pod")
        bound = max(watch.count(), self._bound_now())
        if bound:
            raise ConflictError(
                f"{bound} pods were bound before the scheduler started: another scheduler "
                f"serves schedulerName {self.scheduler_name!r}; stop it and run again",
                field="--scheduler",
            )
        before = server_sample(self.metrics)
        began = time.monotonic()
        started = Started(start(), began)
        progress(f"scheduler started (pid {started.process.pid})")
        try:
            self._wait_bound(watch, started, timeout, progress)
            after = server_sample(self.metrics)
            cpu = started.cpu_seconds()
            started.sample()
            settled = self._wait_events(before, after, progress)
        finally:
            started.stop()
        result = self._result("pending", watch, began, before, after, cpu, started.peak_rss)
        return _with_events(result, before, after, settled, began, self.pods)

    def _bound_now(self) -> int:
        """The run's pods bound now, read from a list: the watch may not yet have delivered a bind
        another scheduler made while the pods were being created."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        query: dict[str, str | int | bool] = {"limit": 500}
        bound = 0
        while True:
            page = self.api.request("GET", path, query=query)
            bound += sum(1 for pod in page.get("items") or [] if (pod.get("spec") or {}).get("nodeName"))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return bound
            query = {"limit": 500, "continue": token}

    def _wait_events(
        self, before: ServerSample | None, after: ServerSample | None, progress: Callable[[str], None]
    ) -> tuple[ServerSample, float] | None:
        """Waits for the Events that trail the binds: until one per pod was posted, or none came for
        `EVENTS_QUIET_SECONDS`. The sample then, and when."""
        if before is None or after is None:
            return None
        progress("waiting for the scheduler's Events")
        last, last_change = after, time.monotonic()
        deadline = last_change + EVENTS_WAIT_SECONDS
        while last.event_posts - before.event_posts < self.pods:
            now = time.monotonic()
            if now - last_change >= EVENTS_QUIET_SECONDS or now > deadline:
                return last, last_change
            time.sleep(0.25)
            sample = server_sample(self.metrics)
            if sample is None:
                return None
            if sample.event_posts > last.event_posts:
                last_change = time.monotonic()
            last = sample
        return last, last_change

    def _stream(self, watch: BindWatch, timeout: float, progress: Callable[[str], None]) -> KubeBenchResult:
        before = server_sample(self.metrics)
        began = time.monotonic()
        self.create_pods(progress)
        self._wait_bound(watch, None, timeout, progress)
        after = server_sample(self.metrics)
        return self._result("stream", watch, began, before, after, None, 0)

    def _wait_bound(
        self, watch: BindWatch, started: Started | None, timeout: float, progress: Callable[[str], None]
    ) -> None:
        deadline = time.monotonic() + timeout
        shown = 0.0
        while watch.count() < self.pods:
            if started is not None:
                started.sample()
                if started.process.poll() is not None:
                    raise RuntimeError(f"the scheduler exited with {started.process.returncode}")
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{watch.count()} of {self.pods} pods bound after {timeout:g}s")
            if now - shown >= 5:
                progress(f"{watch.count()} of {self.pods} pods bound")
                shown = now
            time.sleep(0.05)

    def _result(
        self,
        mode: str,
        watch: BindWatch,
        began: float,
        before: ServerSample | None,
        after: ServerSample | None,
        cpu: float | None,
        peak_rss: int,
    ) -> KubeBenchResult:
        times = sorted(watch.bound_at.values())
        seconds = times[-1] - began
        # A pod's bind latency: from when it could first be scheduled (created, or the start) to bound.
        latencies = sorted(
            (at - max(began, watch.created_at.get(name, began))) * 1000 for name, at in watch.bound_at.items()
        )
        requests = cpu_server = None
        if before is not None and after is not None:
            requests = int(after.requests - before.requests)
            cpu_server = round(after.cpu_seconds - before.cpu_seconds, 2)
        return KubeBenchResult(
            scheduler=self.scheduler_name,
            mode=mode,
            nodes=self.nodes,
            pods=self.pods,
            gang_size=self.gang_size,
            gpus_per_pod=self.gpus_per_pod,
            bound=len(times),
            seconds=round(seconds, 3),
            pods_per_s=round(len(times) / seconds, 1) if seconds > 0 else math.inf,
            first_bind_s=round(times[0] - began, 3) if times else None,
            p50_bind_ms=round(_quantile(latencies, 0.5), 1) if latencies else None,
            p99_bind_ms=round(_quantile(latencies, 0.99), 1) if latencies else None,
            scheduler_cpu_s=round(cpu, 2) if cpu is not None else None,
            scheduler_peak_rss_mib=round(peak_rss / 2**20, 1) if peak_rss else None,
            apiserver_requests=requests,
            apiserver_cpu_s=cpu_server,
            apiserver_cpu_ms_per_pod=round(cpu_server * 1000 / self.pods, 3)
            if cpu_server is not None
            else None,
        )

    # ------------------------------------------------------------------ set-up and clean-up
    @contextlib.contextmanager
    def setup(self, progress: Callable[[str], None] = lambda _: None) -> Iterator[None]:
        self._namespace()
        try:
            if self.scheduler_name != "default-scheduler":
                self._queue()
            progress(f"creating {self.nodes} nodes")
            self._parallel(self._node, range(self.nodes))
            yield
        finally:
            progress("cleaning up")
            self.cleanup()

    def _namespace(self) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        self.api.request("POST", "/api/v1/namespaces", body=body)
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        try:  # no controller manager: nobody else makes it, and pods are refused without it
            self.api.request("POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts", body=account)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def _queue(self) -> None:
        from gpufleet.kube.crds import install_crds

        install_crds(self.api)
        body = {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": self.queue, "labels": {BENCH_RUN_LABEL: self.run_id}},
            "spec": {"quotas": {"H100-80GB": {"nominal": self.nodes * GPUS_PER_NODE}}},
        }
        self.api.request("POST", "/apis/gpufleet.io/v1alpha1/queues", body=body)

    def _node(self, i: int) -> None:
        name = f"bench-{self.run_id}-{i}"
        labels = {
            BENCH_RUN_LABEL: self.run_id,
            "kubernetes.io/hostname": name,
            GPU_MODEL_LABEL: "H100-80GB",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": str(GPUS_PER_NODE),
            "gpufleet.io/block": f"b{i // 256}",
            "gpufleet.io/rack": f"b{i // 256}-r{i // 16}",
        }
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        self.api.request("POST", "/api/v1/nodes", body=body)
        resources = {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench node",
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}  # fmt: skip
        status = {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}
        self.api.request("PATCH", f"/api/v1/nodes/{name}/status", body=status, content_type=MERGE_PATCH)
        # The node lifecycle controller's part: a Ready node loses the not-ready taint admission gave it.
        self.api.request(
            "PATCH", f"/api/v1/nodes/{name}", body={"spec": {"taints": None}}, content_type=MERGE_PATCH
        )

    def create_pods(self, progress: Callable[[str], None] = lambda _: None) -> None:
        progress(f"creating {self.pods} pods")
        self._parallel(self._pod, range(self.pods))

    def _pod(self, i: int) -> None:
        labels = {BENCH_RUN_LABEL: self.run_id, QUEUE_LABEL: self.queue}
        if self.gang_size > 1:
            labels |= {GANG_LABEL: f"g{i // self.gang_size}", GANG_SIZE_LABEL: str(self.gang_size)}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": self.namespace, "labels": labels},
            "spec": {
                "schedulerName": self.scheduler_name,
                "nodeSelector": {BENCH_RUN_LABEL: self.run_id},
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {
                            "limits": {"nvidia.com/gpu": str(self.gpus_per_pod)},
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                        },
                    }
                ],
            },
        }
        self.api.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", body=body)

    def cleanup(self) -> None:
        gone = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        for path, query in (
            (f"/api/v1/namespaces/{self.namespace}/pods", {}),
            ("/api/v1/nodes", {"labelSelector": f"{BENCH_RUN_LABEL}={self.run_id}"}),
            ("/apis/gpufleet.io/v1alpha1/queues", {"labelSelector": f"{BENCH_RUN_LABEL}={self.run_id}"}),
            (f"/api/v1/namespaces/{self.namespace}/events", {}),
        ):
            try:  # deleting thousands of objects at once can take the server minutes when loaded
                self.api.request("DELETE", path, query=query, body=gone, timeout=CLEANUP_SECONDS)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("clean-up of %s: %s", path, exc)
        with contextlib.suppress(ApiError):
            self.api.request("DELETE", f"/api/v1/namespaces/{self.namespace}")

    def _parallel(self, work: Callable[[int], None], items: range) -> None:
        with ThreadPoolExecutor(WRITERS) as pool:
            for _ in pool.map(work, items):
                pass


CLEANUP_SECONDS = 300.0


def start_command(
    command: Sequence[str] | str, log_path: str | None = None
) -> Callable[[], subprocess.Popen[bytes]]:
    """A `start` for `KubeBench.measure`: runs the command in its own process group, output to a file."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)

    def start() -> subprocess.Popen[bytes]:
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - the child keeps it
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    return start


def _with_events(
    result: KubeBenchResult,
    before: ServerSample | None,
    after: ServerSample | None,
    settled: tuple[ServerSample, float] | None,
    began: float,
    pods: int,
) -> KubeBenchResult:
    if before is None or after is None or settled is None:
        return result
    sample, at = settled
    return dataclasses.replace(
        result,
        events_at_last_bind=int(after.event_posts - before.event_posts),
        events_done_s=round(max(at - began, result.seconds), 3),
        apiserver_cpu_ms_per_pod_with_events=round(
            (sample.cpu_seconds - before.cpu_seconds) * 1000 / pods, 3
        ),
    )


def _quantile(values: Sequence[float], q: float) -> float:
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)
