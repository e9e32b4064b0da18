"""`gpufleet up --clusters N`: a management plane and N embedded worker planes in one process;
`gpufleet up --manager`: the management plane alone, for workers that run as their own `gpufleet up`
and join it with `gpufleet cluster join` (cli/cluster.py).

The manager plane is the one the user talks to (the state directory, `--port`): it holds the queues,
the TrainingJobs and InferenceServices and one `Cluster` per worker, and runs only the federation's controller
(`federation.mirror`), never a scheduler of its own. Each worker plane (`STATE/clusters/wN`, its API on a
free loopback port) has its own store, digital-twin nodes and controllers, plus the worker agent
(`federation.worker`) that reports into its Cluster and keeps managed work inside the lease. The planes
reach each other only over their HTTP APIs, with the tokens the join Secrets hold
(`federation.join`), exactly as separate processes do.

What goes where: TrainingJobs, InferenceServices, Queues, Clusters and Secrets to the manager, which
dispatches the work and makes each one's queue in its worker with the quota it grants there; pools and
model versions to every worker (each worker is a copy of the fleet file's pools). Worker prices are the
pools' prices, 10% dearer per worker, so the dispatcher's choice is visible.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console

from gpufleet.api.cluster import (
    Cluster,
    ClusterConnection,
    ClusterSpec,
    EmbeddedWorker,
    SecretKeyRef,
)
from gpufleet.api.inference import InferenceService
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.pool import GPUPool
from gpufleet.api.queue import Queue
from gpufleet.api.resource import Resource
from gpufleet.api.secret import Secret
from gpufleet.api.training import TrainingJob
from gpufleet.cli.federation_http import connect_embedded, joined_worker
from gpufleet.cli.timescale import clock_for
from gpufleet.controllers.plane import build_manager
from gpufleet.federation.join import JoinSettings, join_secret, token_secret
from gpufleet.federation.mirror import FederationController
from gpufleet.federation.reach import LIVE_DEADLINE_SECONDS, WorkerReach
from gpufleet.observability import metrics
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.federation_access import MANAGER_ROLE, WORKER_ROLE
from gpufleet.server.serve import ApiServer
from gpufleet.store import SqliteStore
from gpufleet.twin.clock import Clock, as_datetime
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

MANAGER_KINDS = (TrainingJob, InferenceService, Queue, Cluster, Secret)
"""What a fleet file gives the manager: the work it dispatches, the queues, joined workers' Clusters."""
LEASE_SECONDS = 30.0
HEARTBEAT_SECONDS = 5.0
GRACE_SECONDS = 10.0
"""Covers the workers' lease checks (every round, at most a poll apart) and a heartbeat in flight."""


@dataclass
class PlaneProcess:
    """One control plane of the process: its store, API server and runtime."""

    name: str
    store: SqliteStore
    tokens: TokenRegistry
    server: ApiServer
    runtime: Runtime | None = None
    threads: list[threading.Thread] = field(default_factory=list)


@dataclass
class Federation:
    manager: PlaneProcess
    workers: list[PlaneProcess]

    @property
    def planes(self) -> list[PlaneProcess]:
        return [self.manager, *self.workers]

    def close(self) -> None:
        for plane in self.planes:
            plane.store.close()


def split(objects: list[Resource]) -> tuple[list[Resource], list[Resource]]:
    """(manager's, every worker's) objects of the fleet file."""
    manager: list[Resource] = [o for o in objects if isinstance(o, MANAGER_KINDS)]
    every = [o for o in objects if not isinstance(o, MANAGER_KINDS)]
    return manager, every


def _plane(name: str, directory: Path, clock: Clock, host: str, port: int) -> PlaneProcess:
    def now() -> datetime:
        return as_datetime(clock.now())

    store = SqliteStore.open(directory, clock=now)
    tokens = TokenRegistry(directory, now=now)
    server = ApiServer(create_app(store, tokens, now=now), state_dir=directory, host=host, port=port)
    server.bind()
    return PlaneProcess(name, store, tokens, server)


def _cluster(worker: PlaneProcess, index: int, pools: list[GPUPool], token: SecretKeyRef) -> Cluster:
    prices: dict[str, float] = {}
    for pool in pools:
        price = pool.spec.price_per_gpu_hour * (1 + 0.1 * index)
        prices[pool.spec.gpu_model] = max(prices.get(pool.spec.gpu_model, 0.0), round(price, 4))
    return Cluster(
        metadata=ObjectMeta(name=worker.name),
        spec=ClusterSpec(
            connection=ClusterConnection(
                embedded=EmbeddedWorker(url=worker.server.url, token_secret_ref=token)
            ),
            price_per_gpu_hour=prices,
            lease_seconds=LEASE_SECONDS,
        ),
    )


def build(
    directory: Path,
    objects: list[Resource],
    *,
    clock: Clock,
    config: SchedulerConfig,
    clusters: int,
    host: str,
    port: int,
    grace_seconds: float = GRACE_SECONDS,
) -> Federation:
    """Opens every plane's store, binds every API port, applies the objects and wires the runtimes;
    nothing runs yet (`start` runs it)."""
    manager = _plane("manager", directory, clock, host, port)
    workers = [
        _plane(f"w{i + 1}", directory / "clusters" / f"w{i + 1}", clock, "127.0.0.1", 0)
        for i in range(clusters)
    ]
    to_manager, to_every = split(objects)
    pools = [o for o in objects if isinstance(o, GPUPool)]
    for index, worker in enumerate(workers):
        for obj in to_every:
            worker.store.apply(obj)
        # Joined as `gpufleet cluster join` joins a separate process: each side keeps the federation
        # token the other minted for it in a Secret, and the Cluster names the manager's.
        secret, ref = token_secret(worker.name, worker.tokens.create_role(MANAGER_ROLE, worker.name))
        manager.store.apply(secret)
        manager.store.apply(_cluster(worker, index, pools, ref))
        minted = manager.tokens.create_role(WORKER_ROLE, worker.name)
        settings = JoinSettings(manager.server.url, minted, worker.name)
        worker.store.apply(join_secret(settings))
    for obj in to_manager:
        manager.store.apply(obj)
    controller = FederationController(
        manager.store,
        connect_embedded(manager.store),
        grace_seconds=grace_seconds,
        reach=WorkerReach(deadline_seconds=LIVE_DEADLINE_SECONDS),
    )
    manager.runtime = Runtime(manager.store, clock=clock, participants=[controller])
    for worker in workers:
        controllers = build_manager(worker.store, config=config)
        agent = joined_worker(worker.store, controllers, heartbeat_seconds=HEARTBEAT_SECONDS)
        twin = Twin(worker.store, clock=clock)
        worker.runtime = Runtime(worker.store, clock=clock, participants=[twin, controllers, agent])
    return Federation(manager, workers)


def start(federation: Federation, stop: threading.Event) -> None:
    """The workers' API servers and every runtime in background threads; the caller serves the
    manager's API in the foreground (Ctrl-C)."""
    for worker in federation.workers:
        thread = threading.Thread(target=worker.server.run, name=f"gpufleet-api-{worker.name}", daemon=True)
        thread.start()
        worker.threads.append(thread)
    for plane in federation.planes:
        assert plane.runtime is not None
        plane.threads.append(plane.runtime.start(stop))


def shut_down(federation: Federation, stop: threading.Event) -> None:
    stop.set()
    for worker in federation.workers:
        worker.server.stop()
    for plane in federation.planes:
        for thread in plane.threads:
            thread.join(timeout=10)
    federation.close()


def serve(
    directory: Path,
    objects: list[Resource],
    out: Console,
    *,
    host: str,
    port: int,
    time_scale: float,
    config: SchedulerConfig,
    clusters: int,
    grace_seconds: float = GRACE_SECONDS,
) -> None:
    """`gpufleet up --clusters N` (or `--manager`) in the foreground until Ctrl-C."""
    clock = clock_for(directory, time_scale)
    metrics.use_clock(clock.now)  # checkpoint ages are taken on it (GpufleetCheckpointOverdue)
    federation = build(
        directory,
        objects,
        clock=clock,
        config=config,
        clusters=clusters,
        host=host,
        port=port,
        grace_seconds=grace_seconds,
    )
    stop = threading.Event()
    start(federation, stop)
    manager = federation.manager
    out.print(f"[bold green]gpufleet is up[/]: a management plane at [bold]{manager.server.url}[/]")
    for worker in federation.workers:
        out.print(f"  cluster {worker.name:<4} worker plane at {worker.server.url}")
    out.print(f"  admin token  {manager.tokens.admin_token_path}")
    if not federation.workers:
        out.print("  no workers yet: start a `gpufleet up` and join it with")
        out.print(f"    gpufleet cluster join NAME --manager {manager.server.url} --manager-token TOKEN")
    out.print("  TrainingJobs applied to the manager run in the cheapest worker that fits them;")
    out.print("  `gpufleet get clusters` shows each worker's capacity and heartbeat.\nCtrl-C stops it.")
    try:
        manager.server.run()
    finally:
        shut_down(federation, stop)
