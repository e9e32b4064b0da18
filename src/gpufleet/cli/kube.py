"""CLI commands: `gpufleet kube ...` runs gpufleet in a Kubernetes cluster (the kubernetes world)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from typing import TYPE_CHECKING

import typer

from gpufleet.api.errors import GpuFleetError, ValidationError
from gpufleet.cli.placement import PLACEMENT_CLASS_HELP, PLACEMENT_HELP, scheduler_config
from gpufleet.kube.config import (
    DEFAULT_LATENCY_QUERY,
    DEFAULT_LEVELS,
    DEFAULT_RPS_QUERY,
    KubeConfig,
    TopologyLevel,
)
from gpufleet.kube.transport import ApiError, Transport
from gpufleet.observability import tracing
from gpufleet.observability.logs import setup_logging

# What runs a command (the scheduler, the operator, the CRDs) is imported by that command, after the
# options are read: `kube scheduler` asks for its first lists before it imports the scheduling core.
if TYPE_CHECKING:
    from collections.abc import Callable

    from gpufleet.kube.metrics import MetricSource
    from gpufleet.kube.scheduler import KubeScheduler

kube_app = typer.Typer(
    rich_markup_mode=None, help="Run gpufleet against a Kubernetes cluster.", no_args_is_help=True
)

KUBECONFIG = typer.Option(
    None, "--kubeconfig", help="Kubeconfig file (default: in-cluster, then KUBECONFIG)."
)
CONTEXT = typer.Option(None, "--context", help="Kubeconfig context.")
OTLP_ENDPOINT = typer.Option(None, "--otlp-endpoint", help=tracing.OTLP_HELP)
LOG_FORMAT = typer.Option("text", "--log-format", help="text (for a terminal) or json (one object a line).")


class ClusterError(GpuFleetError):
    """The Kubernetes API server could not be reached, or refused what a command asked."""


def _transport(kubeconfig: str | None, context: str | None) -> Transport:
    """The connection the kubeconfig describes; a kubeconfig that is missing, unreadable or not one
    is an error naming it (and --kubeconfig), not the client library's traceback."""
    import yaml
    from kubernetes.config.config_exception import ConfigException

    from gpufleet.api.text import read_text, yaml_problem
    from gpufleet.kube.client import KubeTransport

    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if kubeconfig is not None:
        try:
            read_text(kubeconfig)  # missing, unreadable or not UTF-8: said with the file's name
        except ValidationError as exc:
            raise ValidationError(exc.detail, obj=kubeconfig, field="--kubeconfig") from None
    try:
        return KubeTransport.from_environment(kubeconfig=kubeconfig, context=context)
    except ConfigException as exc:
        problem = str(exc).removeprefix("Invalid kube-config file. ")
        if "No configuration found" in problem:
            problem = (
                "no kubeconfig found and not running in a cluster: give --kubeconfig FILE or set KUBECONFIG"
            )
        if context is not None and f"name {context} in" in problem:
            raise ValidationError(
                f"no context {context!r} in the kubeconfig", obj=where, field="--context"
            ) from None
        raise ValidationError(problem, obj=where, field="--kubeconfig") from None
    except yaml.YAMLError as exc:
        raise ValidationError(
            f"not valid YAML: {yaml_problem(exc)}", obj=where, field="--kubeconfig"
        ) from None
    except UnicodeDecodeError as exc:
        raise ValidationError(f"not UTF-8 text: {exc.reason}", obj=where, field="--kubeconfig") from None
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        # The client's loader indexes the document as it expects it to be: a list, a string or a
        # mapping of the wrong shape fails inside it.
        raise ValidationError(
            f"not a kubeconfig (a mapping with clusters, users and contexts): {exc}",
            obj=where,
            field="--kubeconfig",
        ) from None


def _cluster_error(exc: ApiError, doing: str) -> ClusterError:
    if exc.status == 0:
        return ClusterError(f"cannot {doing}: the Kubernetes API server did not answer ({exc.message})")
    return ClusterError(f"cannot {doing}: the Kubernetes API server answered {exc}")


def parse_levels(values: list[str]) -> tuple[TopologyLevel, ...]:
    """`name=label-key` pairs, coarse to fine."""
    levels = []
    for value in values:
        name, sep, label = value.partition("=")
        if not sep or not name or not label:
            raise ValidationError(f"expected NAME=LABEL, got {value!r}", field="--topology-level")
        levels.append(TopologyLevel(name, label))
    return tuple(levels)


@kube_app.command("scheduler")
def scheduler(
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    name: str = typer.Option("gpufleet", "--scheduler-name", help="Pods with this schedulerName are ours."),
    placement: str | None = typer.Option(None, help=PLACEMENT_HELP),
    placement_class: list[str] = typer.Option([], "--placement-class", help=PLACEMENT_CLASS_HELP),
    topology_level: list[str] = typer.Option(
        [],
        "--topology-level",
        help="NAME=LABEL, coarse to fine, repeatable (default: zone, block, rack, clique).",
    ),
    namespace: str = typer.Option("gpufleet-system", help="Namespace of the leader-election Lease."),
    lease: str = typer.Option("gpufleet-scheduler", help="Name of the leader-election Lease."),
    identity: str = typer.Option("", help="This replica's identity (default: POD_NAME or the host name)."),
    leader_elect: bool = typer.Option(
        True, help="Run only while holding the Lease (two replicas: one active)."
    ),
    grace_seconds: int = typer.Option(30, help="Grace period given to preempted pods."),
    metrics_bind_address: str = typer.Option(
        ":9402", help="HOST:PORT or :PORT of the control plane's /metrics (0: none)."
    ),
    log_format: str = LOG_FORMAT,
    otlp_endpoint: str | None = OTLP_ENDPOINT,
    manager_kubeconfig: str | None = typer.Option(
        None,
        "--manager-kubeconfig",
        help="Federation: the manager cluster's kubeconfig; this cluster then reports into its Cluster "
        "(--cluster-name) and runs managed work only within its lease.",
    ),
    cluster_name: str = typer.Option("", "--cluster-name", help="Federation: this worker's Cluster name."),
    heartbeat_seconds: float = typer.Option(
        5.0, "--heartbeat-seconds", min=0.1, help="Federation: seconds between reports to the manager."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """The secondary scheduler: schedules every pod whose schedulerName is gpufleet's."""
    if bool(manager_kubeconfig) != bool(cluster_name):
        raise ValidationError(
            "a federation worker needs both --manager-kubeconfig and --cluster-name", field="--cluster-name"
        )
    from gpufleet.kube.informer import Informers, collect_after_sync
    from gpufleet.kube.scheduler_informers import scheduler_informers
    from gpufleet.observability.endpoint import parse_bind_address, serve_metrics

    setup_logging(log_format, level=logging.DEBUG if verbose else logging.INFO)
    tracing.configure(service="gpufleet-scheduler", endpoint=otlp_endpoint)
    parse_bind_address(metrics_bind_address)  # a malformed option is said before any connection
    who = identity or os.environ.get("POD_NAME") or socket.gethostname()
    levels = parse_levels(topology_level) if topology_level else DEFAULT_LEVELS
    config = KubeConfig(
        scheduler_name=name,
        topology_levels=levels,
        nvlink_level="clique" if any(level.name == "clique" for level in levels) else None,
        eviction_grace_seconds=grace_seconds,
        namespace=namespace,
        lease_name=lease,
    )
    api = _transport(kubeconfig, context)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # Nodes and Pods are listed while the rest is imported (a standby replica keeps them current too,
    # as kube-scheduler's does); the scheduler finds them made and adds its other informers.
    informers = Informers(api)
    scheduler_informers(informers)
    collect_after_sync(informers, stop)
    informers.start(stop)

    from gpufleet.kube.leader import LeaderElector, LeaseConfig
    from gpufleet.kube.scheduler import KubeScheduler

    placement_config = scheduler_config(placement, placement_class)
    serve_metrics(metrics_bind_address)
    sched = KubeScheduler(api, config=config, scheduler=placement_config, identity=who, informers=informers)
    informers.start(stop)
    run: Callable[[threading.Event], None] = sched.run
    if manager_kubeconfig:
        run = _federated(sched, api, _transport(manager_kubeconfig, None), cluster_name, heartbeat_seconds)
    if not leader_elect:
        run(stop)
        return
    elector = LeaderElector(api, LeaseConfig(lease, namespace, who))
    elector.run(stop, on_started=run)


def _federated(
    sched: KubeScheduler, api: Transport, manager: Transport, cluster: str, heartbeat_seconds: float
) -> Callable[[threading.Event], None]:
    """The scheduler's run with a federation worker beside it, reporting the scheduler's own view of the
    fleet, while this replica leads."""
    from gpufleet.cli.kube_federation import WorkerLoop

    def run(lost: threading.Event) -> None:
        WorkerLoop(api, manager, cluster, sched.fleet_copy, heartbeat_seconds=heartbeat_seconds).start(lost)
        sched.run(lost)

    return run


@kube_app.command("operator")
def operator(
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    name: str = typer.Option("gpufleet", "--scheduler-name", help="schedulerName written into the pods."),
    namespace: str = typer.Option(
        "gpufleet-system",
        help="Namespace of the leader-election Lease and of the sharing GPUPools' ConfigMaps "
        "(gpufleet-sharing-POOL, which the node agents read).",
    ),
    lease: str = typer.Option("gpufleet-operator", help="Name of the leader-election Lease."),
    identity: str = typer.Option("", help="This replica's identity (default: POD_NAME or the host name)."),
    leader_elect: bool = typer.Option(
        True, help="Run only while holding the Lease (two replicas: one active)."
    ),
    metrics: str = typer.Option(
        "serviceload",
        help="InferenceService load source: prometheus, pods (each replica's metrics endpoint) or "
        "serviceload (ServiceLoad objects written by someone else).",
    ),
    prometheus_url: str = typer.Option("", help="Prometheus base URL (with --metrics=prometheus)."),
    rps_query: str = typer.Option(DEFAULT_RPS_QUERY, help="PromQL for requests/s ($namespace, $service)."),
    latency_query: str = typer.Option(DEFAULT_LATENCY_QUERY, help="PromQL for p99 latency in ms."),
    metrics_port: int = typer.Option(8080, help="Replica metrics port (with --metrics=pods)."),
    metrics_path: str = typer.Option("/metrics", help="Replica metrics path (with --metrics=pods)."),
    sample_seconds: float = typer.Option(15.0, help="Seconds between two load samples of a service."),
    nodes: bool = typer.Option(True, help="GPUPools on Nodes, spot drain and GPU health."),
    node_selector: str = typer.Option("", help="Only Nodes with these labels (k=v,...) are looked after."),
    metrics_bind_address: str = typer.Option(
        ":9403", help="HOST:PORT or :PORT of the control plane's /metrics (0: none)."
    ),
    log_format: str = LOG_FORMAT,
    otlp_endpoint: str | None = OTLP_ENDPOINT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """The operator: TrainingJobs, InferenceServices, GPUPools, spot drain and GPU health."""
    from gpufleet.kube.leader import LeaderElector, LeaseConfig
    from gpufleet.kube.operator import Operator
    from gpufleet.observability.endpoint import serve_metrics

    setup_logging(log_format, level=logging.DEBUG if verbose else logging.INFO)
    tracing.configure(service="gpufleet-operator", endpoint=otlp_endpoint)
    source = metric_source(
        metrics,
        prometheus_url=prometheus_url,
        rps_query=rps_query,
        latency_query=latency_query,
        port=metrics_port,
        path=metrics_path,
    )
    serve_metrics(metrics_bind_address)
    who = identity or os.environ.get("POD_NAME") or socket.gethostname()
    api = _transport(kubeconfig, context)
    op = Operator(
        api,
        config=KubeConfig(scheduler_name=name, namespace=namespace),
        metrics=source,
        sample_seconds=sample_seconds,
        nodes=nodes,
        node_selector=node_selector or None,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    op.informers.start(stop)
    if not leader_elect:
        op.run(stop)
        return
    LeaderElector(api, LeaseConfig(lease, namespace, who)).run(stop, on_started=op.run)


def metric_source(
    kind: str, *, prometheus_url: str, rps_query: str, latency_query: str, port: int, path: str
) -> MetricSource | None:
    """The operator's metric source from its flags (None: read ServiceLoad objects)."""
    from gpufleet.kube.metrics import PodMetricsSource, PrometheusSource

    if kind == "serviceload":
        return None
    if kind == "pods":
        return PodMetricsSource(port=port, path=path)
    if kind == "prometheus":
        if not prometheus_url:
            raise ValidationError("--metrics=prometheus needs --prometheus-url", field="--prometheus-url")
        return PrometheusSource(prometheus_url, rps_query=rps_query, latency_query=latency_query)
    raise ValidationError(f"expected prometheus, pods or serviceload, got {kind!r}", field="--metrics")


@kube_app.command("install-crds")
def install(kubeconfig: str | None = KUBECONFIG, context: str | None = CONTEXT) -> None:
    """Creates or updates gpufleet's CustomResourceDefinitions and waits until they are served."""
    from gpufleet.kube.crds import install_crds

    api = _transport(kubeconfig, context)
    try:
        names = install_crds(api)
    except ApiError as exc:
        raise _cluster_error(exc, "install the CRDs") from None
    except TimeoutError as exc:
        raise ClusterError(str(exc)) from None
    for crd in names:
        typer.echo(f"customresourcedefinition/{crd} established")


def register(app: typer.Typer) -> None:
    """Adds this area's commands to the gpufleet app."""
    from gpufleet.cli import kube_console, kube_federation

    kube_console.register(kube_app)
    kube_federation.register(kube_app)
    app.add_typer(kube_app, name="kube")
