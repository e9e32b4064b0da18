"""Everything gpufleet needs in a cluster as plain objects: what `gpufleet manifests all` prints.

The Helm chart in `deploy/helm/gpufleet` renders the same objects from the same defaults
(`values.yaml` holds `Values`' defaults; a test keeps the two in step).

RBAC is least privilege and every rule says why it exists (`RULES`); the reasons are also put on
each ClusterRole as an annotation so `kubectl describe` shows them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.api.crd import custom_resource_definitions
from gpufleet.api.errors import ValidationError
from gpufleet.kube.console_manifests import Console, console_objects
from gpufleet.kube.dra_manifests import AGENT_DRA_RULES, device_classes, slice_policy
from gpufleet.kube.federation_manifests import (
    Federation,
    check,
    federation_from,
    manager_objects,
    scheduler_args,
    scheduler_mounts,
    scheduler_volumes,
    worker_objects,
)
from gpufleet.kube.manifest_parts import APP, Rule, binding, labels, locked_down, meta, pod_security, role
from gpufleet.kube.transport import Json
from gpufleet.observability.logs import FORMATS
from gpufleet.scheduler.policy_choice import placement_choice


@dataclass
class Image:
    repository: str = "ghcr.io/gpufleet/gpufleet"
    tag: str = "0.1.0"
    pullPolicy: str = "IfNotPresent"


@dataclass
class Scheduler:
    enabled: bool = True
    """False in a federation's manager cluster, which runs no scheduler or operator."""
    replicas: int = 2
    schedulerName: str = "gpufleet"
    placement: str = ""
    """One policy for every workload class; empty: each class has its built-in default."""
    placementByClass: list[str] = field(default_factory=list)
    """CLASS=POLICY per workload class; wins over `placement`."""
    topologyLevels: list[str] = field(
        default_factory=lambda: [
            "zone=topology.kubernetes.io/zone",
            "block=gpufleet.io/block",
            "rack=gpufleet.io/rack",
            "clique=nvidia.com/gpu.clique",
        ]
    )
    evictionGraceSeconds: int = 30
    metricsPort: int = 9402
    """Where the scheduler serves the control plane's /metrics (`--metrics-bind-address`)."""
    resources: dict[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    )


@dataclass
class Agent:
    enabled: bool = True
    privileged: bool = False
    """True only where the agent must reconfigure MIG (NVML's create/destroy need it); reading
    devices, health and metrics work with the NVIDIA container runtime's device injection."""
    runtimeClassName: str = "nvidia"
    nodeSelector: dict[str, str] = field(default_factory=lambda: {"nvidia.com/gpu.present": "true"})
    tolerations: list[dict[str, Any]] = field(
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    metricsPort: int = 9400
    migStrategy: str = "mixed"
    """How MIG devices are advertised (`--mig-strategy`, as ClusterPolicy's `mig.strategy`): mixed, one
    `nvidia.com/mig-<profile>` resource per profile, since a gpufleet MIG pool may mix profiles on a
    node (and GPUs not in MIG mode stay `nvidia.com/gpu`); single, none, or '' for the config files'."""
    dra: bool = False
    """Serve the GPUs as NVIDIA's DRA driver (`gpu.nvidia.com`: ResourceSlices, the kubelet's DRA API,
    CDI specs) instead of the `nvidia.com/gpu` device plugin, with NVIDIA's DeviceClasses, the agent's
    DRA permissions and the admission policy that holds each agent to its node's slices."""
    sharingConfig: bool = True
    """Follow the Node's `gpufleet.io/sharing-config` label: apply its pool's ConfigMap entry (in the
    chart's namespace, written by the operator) and re-apply on changes; false: the local config only."""
    resources: dict[str, Any] = field(
        default_factory=lambda: {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        }
    )


@dataclass
class Operator:
    metrics: str = "serviceload"
    """InferenceService load: prometheus, pods (each replica's metrics endpoint) or serviceload."""
    prometheusUrl: str = ""
    sampleSeconds: int = 15
    metricsPort: int = 9403
    """Where the operator serves its own /metrics (`--metrics-bind-address`)."""


@dataclass
class ServiceMonitor:
    enabled: bool = False
    interval: str = "30s"


@dataclass
class PrometheusRule:
    """The chart's PrometheusRule of gpufleet's alerts, generated from deploy/prometheus/gpufleet-rules.yaml.
    Only the chart renders it (the rules are not in the package); without Helm, give Prometheus that file."""

    enabled: bool = False


@dataclass
class GrafanaDashboards:
    """The chart's ConfigMaps of gpufleet's Grafana dashboards (deploy/grafana), labelled
    `grafana_dashboard: "1"` for Grafana's dashboard sidecar. Only the chart renders them."""

    enabled: bool = False


@dataclass
class Values:
    """The chart's values; field names are the YAML keys."""

    namespace: str = "gpufleet-system"
    installCRDs: bool = True
    logFormat: str = "text"
    """`--log-format` of the scheduler, the operator and the agent: text or json."""
    otlpEndpoint: str = ""
    """`--otlp-endpoint` of the scheduler and the operator: an OTLP/HTTP collector's base URL for
    their traces; empty: no tracing."""
    image: Image = field(default_factory=Image)
    scheduler: Scheduler = field(default_factory=Scheduler)
    operator: Operator = field(default_factory=Operator)
    agent: Agent = field(default_factory=Agent)
    serviceMonitor: ServiceMonitor = field(default_factory=ServiceMonitor)
    prometheusRule: PrometheusRule = field(default_factory=PrometheusRule)
    grafanaDashboards: GrafanaDashboards = field(default_factory=GrafanaDashboards)
    federation: Federation = field(default_factory=Federation)
    console: Console = field(default_factory=Console)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


SCHEDULER_RULES: tuple[Rule, ...] = (
    (
        "",
        ("pods",),
        ("get", "list", "watch"),
        "informer cache: pending pods to schedule, bound pods' capacity",
    ),
    ("", ("pods",), ("patch",), "note the chosen GPUs on a pod before binding it"),
    ("", ("pods/binding",), ("create",), "bind pods to nodes through the Binding subresource"),
    (
        "",
        ("pods/eviction",),
        ("create",),
        "preempt, and drain interrupted or unhealthy nodes, through the Eviction API so budgets apply",
    ),
    ("", ("pods/status",), ("patch",), "PodScheduled and DisruptionTarget conditions with the reason"),
    ("", ("nodes",), ("get", "list", "watch"), "informer cache: capacity, topology labels, taints"),
    ("", ("events",), ("create",), "FailedScheduling, Preempted, drain and scaling events"),
    (
        "gpufleet.io",
        ("queues",),
        ("get", "list", "watch"),
        "the quota tree; the operator reads a workload's queue to see whether it takes spot capacity",
    ),
    ("gpufleet.io", ("queues/status",), ("patch",), "each Queue's Valid condition"),
    (
        "gpufleet.io",
        ("trainingjobs/status", "inferenceservices/status"),
        ("patch",),
        "pending reasons in the owner's status; the operator's job status",
    ),
    ("batch", ("jobs",), ("get", "list", "watch"), "the size of Jobs that ask for gang scheduling"),
    (
        "resource.k8s.io",
        ("deviceclasses", "resourceslices", "resourceclaims"),
        ("get", "list", "watch"),
        "DRA: the devices nodes publish, the classes claims ask for, the claims pods name",
    ),
    (
        "resource.k8s.io",
        ("resourceclaims/status",),
        ("patch",),
        "DRA: a claim's allocation and reservedFor, written before the pod's Binding, released when it goes",
    ),
    (
        "",
        ("pods",),
        ("create", "delete"),
        "operator: training workers of each attempt and inference replicas, removed when done",
    ),
    (
        "",
        ("services",),
        ("get", "list", "watch", "create", "delete"),
        "operator: headless rendezvous Services and InferenceService Services",
    ),
    (
        "gpufleet.io",
        ("trainingjobs", "checkpoints"),
        ("get", "list", "watch"),
        "operator: jobs and resume points",
    ),
    (
        "gpufleet.io",
        ("inferenceservices", "modelversions", "gpupools"),
        ("get", "list", "watch"),
        "operator: services to run, versions to roll out, pools to apply to nodes",
    ),
    ("gpufleet.io", ("gpupools/status",), ("patch",), "operator: a pool's nodes, ready nodes and GPUs"),
    (
        "gpufleet.io",
        ("serviceloads",),
        ("get", "list", "watch", "create", "patch"),
        "operator: the load samples it takes for each InferenceService",
    ),
    (
        "gpufleet.io",
        ("serviceloads/status",),
        ("patch",),
        "operator: the autoscaler's memory across restarts",
    ),
    (
        "",
        ("nodes",),
        ("patch",),
        "operator: cordon for spot interruption and GPU health, pool labels, spot taint, sharing config",
    ),
)
LEASE_RULES: tuple[Rule, ...] = (
    ("coordination.k8s.io", ("leases",), ("get", "create", "update"), "leader election between the replicas"),
)
SHARING_CONFIG_RULES: tuple[Rule, ...] = (
    (
        "",
        ("configmaps",),
        # `list`: at start the operator looks for the ConfigMaps of pools deleted while it was away.
        ("get", "list", "create", "update", "delete"),
        "operator: each sharing GPUPool's ConfigMap of device-plugin and mig-parted configs",
    ),
)
AGENT_RULES: tuple[Rule, ...] = (
    (
        "",
        ("nodes",),
        ("get", "patch"),
        "GPU Feature Discovery labels on the agent's own Node; its sharing-config labels read",
    ),
)
AGENT_SHARING_RULES: tuple[Rule, ...] = (
    (
        "",
        ("configmaps",),
        # No `get`: the agent lists its ConfigMap by name (metadata.name field selector), which answers
        # for a missing one too, and watches it.
        ("list", "watch"),
        "agent: the sharing ConfigMap its Node's gpufleet.io/sharing-config label names",
    ),
)
AGENT_EVENT_RULES: tuple[Rule, ...] = (
    (
        "",
        ("events",),
        ("create",),
        "agent: sharing-config Events on its Node (a Node's Events must be in default)",
    ),
)
NODE_EVENTS_NAMESPACE = "default"


def render_all(values: Values | None = None) -> list[Json]:
    """Every object, in the order `kubectl apply` needs them (namespace and CRDs first)."""
    v = values or Values()
    objects: list[Json] = [meta("v1", "Namespace", v.namespace, None)]
    if v.installCRDs:
        objects.extend(custom_resource_definitions())
    if v.scheduler.enabled:
        objects.extend(_scheduler(v))
        objects.extend(worker_objects(v.namespace, v.federation.worker))
    if v.agent.enabled:
        objects.extend(_agent(v))
    objects.extend(manager_objects(v))
    objects.extend(
        console_objects(v.namespace, _image(v), v.image.pullPolicy, v.scheduler.schedulerName, v.console)
    )
    return objects


def _image(v: Values) -> str:
    return f"{v.image.repository}:{v.image.tag}"


def _otlp(v: Values) -> list[str]:
    return [f"--otlp-endpoint={v.otlpEndpoint}"] if v.otlpEndpoint else []


def _scheduler(v: Values) -> list[Json]:
    name, ns, s = "gpufleet-scheduler", v.namespace, v.scheduler
    args = [
        "kube",
        "scheduler",
        f"--scheduler-name={s.schedulerName}",
        *([f"--placement={s.placement}"] if s.placement else []),
        *(f"--placement-class={item}" for item in s.placementByClass),
        f"--namespace={ns}",
        f"--lease={name}",
        f"--grace-seconds={s.evictionGraceSeconds}",
    ]
    args += [f"--topology-level={level}" for level in s.topologyLevels]
    args += [f"--metrics-bind-address=:{s.metricsPort}", f"--log-format={v.logFormat}", *_otlp(v)]
    args += scheduler_args(v.federation.worker)
    deployment = meta("apps/v1", "Deployment", name, ns, "scheduler")
    selector = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "scheduler"}
    deployment["spec"] = {
        "replicas": s.replicas,
        "selector": {"matchLabels": selector},
        "template": {
            "metadata": {"labels": labels("scheduler")},
            "spec": {
                "serviceAccountName": name,
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 100,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": selector},
                                    "topologyKey": "kubernetes.io/hostname",
                                },
                            }
                        ]
                    }
                },
                "securityContext": pod_security(),
                "containers": [
                    {
                        "name": "scheduler",
                        "image": _image(v),
                        "imagePullPolicy": v.image.pullPolicy,
                        "command": ["gpufleet"],
                        "args": args,
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                        ],
                        "ports": [{"name": "sched-metrics", "containerPort": s.metricsPort}],
                        "resources": s.resources,
                        "securityContext": locked_down(),
                        **_mounts(scheduler_mounts(v.federation.worker)),
                    },
                    {
                        # The operator is leader-elected on a Lease of its own, so the two leaders
                        # may sit in different replicas.
                        "name": "operator",
                        "image": _image(v),
                        "imagePullPolicy": v.image.pullPolicy,
                        "command": ["gpufleet"],
                        "args": [
                            "kube",
                            "operator",
                            f"--scheduler-name={s.schedulerName}",
                            f"--namespace={ns}",
                            "--lease=gpufleet-operator",
                            f"--metrics={v.operator.metrics}",
                            f"--prometheus-url={v.operator.prometheusUrl}",
                            f"--sample-seconds={v.operator.sampleSeconds}",
                            f"--metrics-bind-address=:{v.operator.metricsPort}",
                            f"--log-format={v.logFormat}",
                            *_otlp(v),
                        ],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                        ],
                        "ports": [{"name": "oper-metrics", "containerPort": v.operator.metricsPort}],
                        "resources": s.resources,
                        "securityContext": locked_down(),
                    },
                ],
                **_volumes(scheduler_volumes(v.federation.worker)),
            },
        },
    }
    return [
        meta("v1", "ServiceAccount", name, ns, "scheduler"),
        role("ClusterRole", name, None, "scheduler", SCHEDULER_RULES),
        binding("ClusterRoleBinding", name, None, "scheduler", name, ns),
        role("Role", f"{name}-leader-election", ns, "scheduler", LEASE_RULES),
        binding("RoleBinding", f"{name}-leader-election", ns, "scheduler", name, ns),
        role("Role", f"{name}-sharing-config", ns, "scheduler", SHARING_CONFIG_RULES),
        binding("RoleBinding", f"{name}-sharing-config", ns, "scheduler", name, ns),
        deployment,
        *_control_plane_metrics(v),
    ]


def _mounts(mounts: list[Json]) -> Json:
    return {"volumeMounts": mounts} if mounts else {}


def _volumes(volumes: list[Json]) -> Json:
    return {"volumes": volumes} if volumes else {}


def _control_plane_metrics(v: Values) -> list[Json]:
    """A Service per process of the scheduler's pods, so each is its own scrape job
    (gpufleet-scheduler-metrics, gpufleet-operator-metrics), and their ServiceMonitor."""
    ns = v.namespace
    selector = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "scheduler"}
    objects: list[Json] = []
    for process, port, target in (
        ("scheduler", v.scheduler.metricsPort, "sched-metrics"),
        ("operator", v.operator.metricsPort, "oper-metrics"),
    ):
        service = meta("v1", "Service", f"gpufleet-{process}-metrics", ns, "scheduler")
        service["spec"] = {
            "selector": selector,
            "clusterIP": "None",
            "ports": [{"name": "metrics", "port": port, "targetPort": target}],
        }
        objects.append(service)
    if v.serviceMonitor.enabled:
        monitor = meta(
            "monitoring.coreos.com/v1", "ServiceMonitor", "gpufleet-control-plane", ns, "scheduler"
        )
        monitor["spec"] = {
            "selector": {"matchLabels": labels("scheduler")},
            "endpoints": [{"port": "metrics", "interval": v.serviceMonitor.interval}],
        }
        objects.append(monitor)
    return objects


def _agent(v: Values) -> list[Json]:
    name, ns, a = "gpufleet-agent", v.namespace, v.agent
    security: Json = (
        {"privileged": True}
        if a.privileged
        else {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0}
    )
    selector = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "agent"}
    sharing_args = (
        ["--sharing-config", f"--sharing-namespace={ns}"] if a.sharingConfig else ["--no-sharing-config"]
    )
    mig_args = [f"--mig-strategy={a.migStrategy}"] if a.migStrategy else []
    pod_spec: Json = {
        "serviceAccountName": name,
        "priorityClassName": "system-node-critical",
        "nodeSelector": a.nodeSelector,
        "tolerations": a.tolerations,
        "containers": [
            {
                "name": "agent",
                "image": _image(v),
                "imagePullPolicy": v.image.pullPolicy,
                "command": ["gpufleet"],
                "args": [
                    "agent",
                    f"--metrics-port={a.metricsPort}",
                    f"--log-format={v.logFormat}",
                    "--label-node",
                    *mig_args,
                    *sharing_args,
                    *(["--dra"] if a.dra else []),
                ],
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
                ],
                "ports": [{"name": "metrics", "containerPort": a.metricsPort}],
                "resources": a.resources,
                "securityContext": security,
                "volumeMounts": [
                    {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
                    {
                        "name": "pod-resources",
                        "mountPath": "/var/lib/kubelet/pod-resources",
                        "readOnly": True,
                    },
                    *(_DRA_MOUNTS if a.dra else []),
                ],
            }
        ],
        "volumes": [
            {
                "name": "device-plugins",
                "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
            },
            {
                "name": "pod-resources",
                "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
            },
            *(_DRA_VOLUMES if a.dra else []),
        ],
    }
    if a.runtimeClassName:
        pod_spec["runtimeClassName"] = a.runtimeClassName
    daemonset = meta("apps/v1", "DaemonSet", name, ns, "agent")
    daemonset["spec"] = {
        "selector": {"matchLabels": selector},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        "template": {"metadata": {"labels": labels("agent")}, "spec": pod_spec},
    }
    service = meta("v1", "Service", f"{name}-metrics", ns, "agent")
    service["spec"] = {
        "selector": selector,
        "clusterIP": "None",
        "ports": [{"name": "metrics", "port": a.metricsPort, "targetPort": "metrics"}],
    }
    objects: list[Json] = [
        meta("v1", "ServiceAccount", name, ns, "agent"),
        role("ClusterRole", name, None, "agent", AGENT_RULES),
        binding("ClusterRoleBinding", name, None, "agent", name, ns),
    ]
    if a.sharingConfig:
        # Roles: the agents read ConfigMaps only in gpufleet's namespace, write Events only in default.
        events = NODE_EVENTS_NAMESPACE
        objects += [
            role("Role", f"{name}-sharing-config", ns, "agent", AGENT_SHARING_RULES),
            binding("RoleBinding", f"{name}-sharing-config", ns, "agent", name, ns),
            role("Role", f"{name}-node-events", events, "agent", AGENT_EVENT_RULES),
            binding("RoleBinding", f"{name}-node-events", events, "agent", name, ns),
        ]
    if a.dra:
        objects += [
            role("ClusterRole", f"{name}-dra", None, "agent", AGENT_DRA_RULES),
            binding("ClusterRoleBinding", f"{name}-dra", None, "agent", name, ns),
            *slice_policy(ns, name),
            *device_classes(),
        ]
    objects += [daemonset, service]
    if v.serviceMonitor.enabled:
        monitor = meta("monitoring.coreos.com/v1", "ServiceMonitor", name, ns, "agent")
        monitor["spec"] = {
            "selector": {"matchLabels": labels("agent")},
            "endpoints": [{"port": "metrics", "interval": v.serviceMonitor.interval}],
        }
        objects.append(monitor)
    return objects


# The DRA driver's host dirs: its socket and checkpoint, the kubelet's plugin registry, the CDI specs
# the container runtime reads.
_DRA_DIRS = (
    ("dra-plugins", "/var/lib/kubelet/plugins"),
    ("dra-registry", "/var/lib/kubelet/plugins_registry"),
    ("cdi", "/var/run/cdi"),
)
_DRA_MOUNTS = [{"name": n, "mountPath": path} for n, path in _DRA_DIRS]
_DRA_VOLUMES = [{"name": n, "hostPath": {"path": path, "type": "DirectoryOrCreate"}} for n, path in _DRA_DIRS]

MIG_STRATEGIES = ("none", "single", "mixed", "")


def values_from(overrides: Any, *, source: str = "values") -> Values:
    """Values with `overrides` (a parsed values file) merged over the defaults; unknown keys refused,
    and an `agent.migStrategy` or scheduler placement the agent or scheduler would refuse at start."""
    merged = _merge(Values().as_dict(), overrides or {}, source, "")
    if merged["agent"]["migStrategy"] not in MIG_STRATEGIES:
        raise ValidationError(
            f"{merged['agent']['migStrategy']!r} is not one of none, single, mixed or '' (the config files')",
            obj=source,
            field="agent.migStrategy",
        )
    if merged["logFormat"] not in FORMATS:
        raise ValidationError(
            f"expected {' or '.join(FORMATS)}, got {merged['logFormat']!r}", obj=source, field="logFormat"
        )
    endpoint = merged["otlpEndpoint"]
    if endpoint and not str(endpoint).startswith(("http://", "https://")):  # refused at start otherwise
        raise ValidationError(
            f"expected an http:// or https:// URL, got {endpoint!r}", obj=source, field="otlpEndpoint"
        )
    scheduler = merged["scheduler"]
    placement_choice(  # the scheduler would refuse these at start, in a crash loop
        scheduler["placement"] or None,
        scheduler["placementByClass"],
        placement_field="scheduler.placement",
        by_class_field="scheduler.placementByClass",
        obj=source,
    )
    federation = federation_from(merged["federation"])
    check(federation, scheduler_enabled=bool(scheduler["enabled"]), source=source)
    return Values(
        namespace=merged["namespace"],
        installCRDs=merged["installCRDs"],
        logFormat=merged["logFormat"],
        otlpEndpoint=merged["otlpEndpoint"],
        image=Image(**merged["image"]),
        scheduler=Scheduler(**merged["scheduler"]),
        operator=Operator(**merged["operator"]),
        agent=Agent(**merged["agent"]),
        serviceMonitor=ServiceMonitor(**merged["serviceMonitor"]),
        prometheusRule=PrometheusRule(**merged["prometheusRule"]),
        grafanaDashboards=GrafanaDashboards(**merged["grafanaDashboards"]),
        federation=federation,
        console=Console(**merged["console"]),
    )


def _merge(base: dict[str, Any], over: Any, source: str, path: str) -> dict[str, Any]:
    if not isinstance(over, dict):
        raise ValidationError("must be a mapping", obj=source, field=path or ".")
    out = dict(base)
    for key, value in over.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in base:
            raise ValidationError(
                f"unknown value (known: {', '.join(sorted(base))})", obj=source, field=where
            )
        # Free-form maps (resources, nodeSelector) are replaced whole; the chart's own sections merge.
        if isinstance(base[key], dict) and key not in ("resources", "nodeSelector"):
            out[key] = _merge(base[key], value, source, where)
        else:
            out[key] = value
    return out
