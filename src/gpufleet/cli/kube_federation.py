"""The federation in the Kubernetes world: `gpufleet kube manager` and the worker beside the scheduler.

- `ManagerLoop` (`gpufleet kube manager`): the management plane's `FederationController` on the
  manager cluster (`kube.federation.ManagerStore`), reaching Kubernetes workers through the kubeconfig
  Secrets their Clusters name. The manager cluster holds the Queues (their quotas count over every
  worker), the Clusters and the TrainingJobs and InferenceServices users submit; it runs no gpufleet
  scheduler or operator: its work runs only in workers.
- `WorkerLoop` (`gpufleet kube scheduler --manager-kubeconfig ... --cluster-name ...`): the worker side,
  a `WorkerAgent` on the worker's own API server, reporting the scheduler's view of the fleet into its
  Cluster in the manager and keeping managed work inside its lease (the operator stops what it
  suspends). A worker that cannot read its own API server sends no heartbeat: what it would report is
  stale, and the manager must see the cluster as lost, not as alive and full.

The federation core and `kube/` do not import each other (import-linter); this module joins them, as
`cli.federation_http` does for the embedded world. Both loops run on a wall clock in a thread of
their own; `run` returns when `stop` is set.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from gpufleet.cli.kube import CONTEXT, KUBECONFIG, LOG_FORMAT, _transport
from gpufleet.federation.mirror import FederationController
from gpufleet.federation.reach import LIVE_DEADLINE_SECONDS, WorkerReach
from gpufleet.federation.worker import WorkerAgent
from gpufleet.fleet.state import FleetState
from gpufleet.kube.federation import KubeManagerLink, ManagerStore, connect_kube
from gpufleet.kube.store import KubeStore
from gpufleet.kube.transport import ApiError, Transport
from gpufleet.kube.worker_cache import CopyCache
from gpufleet.observability.logs import setup_logging

if TYPE_CHECKING:
    from gpufleet.federation.link import ManagerLink, WorkerClient
    from gpufleet.kube.federation import KubeWorker

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""How soon a pass that failed is tried again."""


def _run(step: Callable[[float], float | None], stop: threading.Event, clock: Callable[[], float],
         what: str, idle: float) -> None:  # fmt: skip
    while not stop.is_set():
        now = clock()
        try:
            wake = step(now)
        except Exception:  # one failed pass must not end the loop: the next one starts afresh
            log.exception("%s: pass failed; trying again", what)
            wake = now + RETRY_SECONDS
        stop.wait(max(0.05, min(idle, (now + idle if wake is None else wake) - clock())))


class ManagerLoop:
    """The management plane on a manager cluster."""

    def __init__(
        self,
        api: Transport,
        *,
        manager: str = "manager",
        grace_seconds: float = 5.0,
        period_seconds: float = 1.0,
        connect_transport: Callable[[dict[str, object]], Transport] | None = None,
        clock: Callable[[], float] = time.time,
        watch_workers: bool = False,
        reach: WorkerReach | None = None,
    ) -> None:
        """`watch_workers`: each worker's jobs and services are watched, not listed every pass (what
        `gpufleet kube manager` does; the unit tests' virtual clock steps passes faster than a watch).
        `reach`: how a pass calls the workers (`federation.reach`; `gpufleet kube manager` gives each
        worker's calls a deadline, so one that hangs does not hold up the others)."""
        self.caches: weakref.WeakSet[CopyCache] = weakref.WeakSet()
        """The watched copies of the workers' clients (a client replaced closes its own)."""
        self.controller = FederationController(
            ManagerStore(api),
            connect_kube(api, connect_transport, cache=self._cache if watch_workers else None),
            manager=manager,
            grace_seconds=grace_seconds,
            period_seconds=period_seconds,
            reach=reach,
        )
        self.period_seconds = period_seconds
        self.clock = clock

    def step(self, now: float) -> float | None:
        return self.controller.step(now)

    def run(self, stop: threading.Event) -> None:
        try:
            _run(self.step, stop, self.clock, "federation manager", self.period_seconds)
        finally:  # a replica that lost the lead stops watching the workers
            for cache in list(self.caches):
                cache.close()  # a KubeWorker starts its cache again at its next list

    def _cache(self, api: Transport) -> CopyCache:
        cache = CopyCache(api)
        self.caches.add(cache)
        return cache


class WorkerLoop:
    """A Kubernetes worker's reports to its manager and its lease rule."""

    def __init__(
        self,
        api: Transport,
        manager_api: Transport,
        cluster: str,
        fleet: Callable[[], FleetState | None],
        *,
        heartbeat_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.agent = WorkerAgent(
            KubeStore(api), cluster, KubeManagerLink(manager_api), fleet, heartbeat_seconds=heartbeat_seconds
        )
        self.clock = clock

    def step(self, now: float) -> float | None:
        try:
            return self.agent.step(now)
        except ApiError as exc:
            # Its own API server: no heartbeat goes out this time, and the lease runs down.
            log.warning("cluster %s: cannot read its own API server: %s", self.agent.cluster, exc)
            return now + RETRY_SECONDS

    def run(self, stop: threading.Event) -> None:
        _run(self.step, stop, self.clock, f"cluster {self.agent.cluster}", self.agent.period())

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), daemon=True, name="federation-worker")
        thread.start()
        return thread


def manager(
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    name: str = typer.Option(
        "manager", "--manager-name", help="Marks the workers' copies (gpufleet.io/managed-by)."
    ),
    grace_seconds: float = typer.Option(
        5.0,
        "--grace-seconds",
        min=0,
        help="Wait past a silent cluster's lease before its work moves (covers the workers' lease checks).",
    ),
    period_seconds: float = typer.Option(1.0, "--period-seconds", min=0.1, help="Seconds between passes."),
    namespace: str = typer.Option("gpufleet-system", help="Namespace of the leader-election Lease."),
    lease: str = typer.Option("gpufleet-manager", help="Name of the leader-election Lease."),
    identity: str = typer.Option("", help="This replica's identity (default: POD_NAME or the host name)."),
    leader_elect: bool = typer.Option(
        True, help="Run only while holding the Lease (two replicas: one active)."
    ),
    watch_workers: bool = typer.Option(
        True, help="Watch each worker's jobs and services instead of listing them all every pass."
    ),
    log_format: str = LOG_FORMAT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """The federation manager: dispatches TrainingJobs and InferenceServices to worker clusters."""
    from gpufleet.kube.leader import LeaderElector, LeaseConfig

    setup_logging(log_format, level=logging.DEBUG if verbose else logging.INFO)
    api = _transport(kubeconfig, context)
    loop = ManagerLoop(
        api,
        manager=name,
        grace_seconds=grace_seconds,
        period_seconds=period_seconds,
        watch_workers=watch_workers,
        reach=WorkerReach(deadline_seconds=LIVE_DEADLINE_SECONDS),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if not leader_elect:
        loop.run(stop)
        return
    who = identity or os.environ.get("POD_NAME") or socket.gethostname()
    LeaderElector(api, LeaseConfig(lease, namespace, who)).run(stop, on_started=loop.run)


def register(app: typer.Typer) -> None:
    app.command("manager")(manager)


if TYPE_CHECKING:  # mypy proves the Kubernetes implementations match the federation's protocols

    def _implements(worker: KubeWorker, link: KubeManagerLink) -> tuple[WorkerClient, ManagerLink]:
        return worker, link
