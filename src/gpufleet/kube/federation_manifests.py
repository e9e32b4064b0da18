"""The federation's objects in `gpufleet manifests all` and the chart (values `federation.*`).

Two kinds of cluster take part (docs/federation.md, "The Kubernetes world"):

- **The manager cluster** (`federation.manager.enabled`) runs `gpufleet kube manager` and no gpufleet
  scheduler or operator (those would run its TrainingJobs there as well as in a worker). Its
  ServiceAccount reads Clusters, Queues and the work, writes their status and annotations and core/v1
  Events, and may only *get* the Secrets holding the workers' kubeconfigs (a Role in their namespace,
  narrowed to their names when they are listed). For each worker named in `federation.manager.workers`
  it also holds a ServiceAccount whose ClusterRole reaches only that worker's Cluster: read it, patch its
  status. The worker's admin mints a token for it (`kubectl create token`) and puts a kubeconfig with it
  in the worker cluster's Secret.
- **A worker cluster** (`federation.worker.clusterName`) runs the usual scheduler with
  `--manager-kubeconfig` (that Secret, mounted read-only) and `--cluster-name`; its scheduler may also
  patch TrainingJobs and InferenceServices (the lease rule suspends and fences managed copies). The
  identity the manager reaches the worker with is the ServiceAccount `gpufleet-federation-manager` there,
  whose ClusterRole is what `kube.federation.KubeWorker` does: the work's namespaces, the managed copies,
  their queues and moved checkpoints, and reading Events.

Each rule is what the code calls (tests/kube/test_federation_rbac.py records the requests of the
federation's flows on in-memory API servers and checks each against these roles, and each rule against
the requests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.api.errors import ValidationError
from gpufleet.api.secret import SYSTEM_NAMESPACE
from gpufleet.kube.manifest_parts import (
    Rule,
    binding,
    labels,
    locked_down,
    meta,
    pod_security,
    role,
    selector,
)
from gpufleet.kube.transport import Json

if TYPE_CHECKING:
    from gpufleet.kube.manifests import Values

MANAGER = "gpufleet-manager"
MANAGER_ACCESS = "gpufleet-federation-manager"
"""In a worker cluster: the ServiceAccount (and its ClusterRole) the manager's kubeconfig for it names."""
SCHEDULER_FEDERATION = "gpufleet-scheduler-federation"
WORKER_PREFIX = "gpufleet-worker-"
"""In the manager cluster: `gpufleet-worker-<Cluster>`, a worker scheduler's ServiceAccount and role."""
MANAGER_KUBECONFIG_DIR = "/etc/gpufleet/manager"


@dataclass
class FederationManager:
    enabled: bool = False
    """This is a federation's manager cluster: run `gpufleet kube manager` (needs scheduler.enabled false)."""
    replicas: int = 2
    name: str = "manager"
    """`--manager-name`: marks the workers' copies (gpufleet.io/managed-by)."""
    graceSeconds: float = 5
    periodSeconds: float = 1
    kubeconfigSecretNamespace: str = SYSTEM_NAMESPACE
    """Where the Secrets with the workers' kubeconfigs are (a kubeconfigSecretRef's default namespace)."""
    kubeconfigSecrets: list[str] = field(default_factory=list)
    """Their names: the manager may get only these. Empty: any Secret of that namespace."""
    workers: list[str] = field(default_factory=list)
    """Cluster names: each gets a ServiceAccount gpufleet-worker-NAME that may read only its Cluster and
    patch only its status, for that worker's scheduler."""
    resources: dict[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    )


@dataclass
class FederationWorker:
    clusterName: str = ""
    """This cluster is a federation worker of that Cluster name: the scheduler reports to the manager."""
    managerKubeconfigSecret: str = "gpufleet-manager-kubeconfig"
    """The Secret (in `namespace`) with the kubeconfig that reaches the manager cluster."""
    managerKubeconfigKey: str = "kubeconfig"
    heartbeatSeconds: float = 5
    managerAccess: bool = True
    """Add the ServiceAccount gpufleet-federation-manager and its ClusterRole: the manager's identity here."""


@dataclass
class Federation:
    manager: FederationManager = field(default_factory=FederationManager)
    worker: FederationWorker = field(default_factory=FederationWorker)


MANAGER_RULES: tuple[Rule, ...] = (
    (
        "gpufleet.io",
        ("clusters",),
        ("get", "list"),
        "the worker clusters, each pass; a conditions write that lost a race is redone on the fresh one",
    ),
    ("gpufleet.io", ("clusters/status",), ("patch",), "each Cluster's Ready, LeaseExpired and Draining"),
    ("gpufleet.io", ("queues",), ("list",), "the quota tree, counted over every worker"),
    (
        "gpufleet.io",
        ("trainingjobs", "inferenceservices"),
        ("list", "patch"),
        "the work to dispatch; the cluster, generation and charged model it was given, as annotations",
    ),
    (
        "gpufleet.io",
        ("trainingjobs/status", "inferenceservices/status"),
        ("patch",),
        "status mirrored from the worker that runs it; the reason of work that fits nowhere",
    ),
    ("", ("events",), ("create",), "Dispatched and take-back Events, and the workers' Events mirrored"),
)
MANAGER_SECRET_RULES: tuple[Rule, ...] = (
    ("", ("secrets",), ("get",), "the workers' kubeconfigs that Clusters name, read only"),
)
MANAGER_LEASE_RULES: tuple[Rule, ...] = (
    ("coordination.k8s.io", ("leases",), ("get", "create", "update"), "leader election between the replicas"),
)
WORKER_REPORT_RULES: tuple[Rule, ...] = (
    ("gpufleet.io", ("clusters",), ("get",), "a worker's scheduler: its own Cluster, read at each heartbeat"),
    (
        "gpufleet.io",
        ("clusters/status",),
        ("patch",),
        "a worker's scheduler: its heartbeat and summary into its own Cluster's status",
    ),
)
SCHEDULER_FEDERATION_RULES: tuple[Rule, ...] = (
    (
        "gpufleet.io",
        ("trainingjobs", "inferenceservices"),
        ("patch",),
        "federation worker: start managed copies within the manager's lease, suspend and fence them after",
    ),
)
MANAGER_ACCESS_RULES: tuple[Rule, ...] = (
    ("", ("namespaces",), ("create",), "the work's namespace, where the worker has none of its name"),
    (
        "gpufleet.io",
        ("trainingjobs", "inferenceservices"),
        ("list", "watch", "create", "delete"),
        "managed copies: watched (or listed each pass), created on dispatch, deleted once not held here",
    ),
    (
        "gpufleet.io",
        ("queues",),
        ("get", "list", "create", "patch", "delete"),
        "the queue of managed work, with the quota the manager grants here; deleted once nothing names it",
    ),
    (
        "gpufleet.io",
        ("checkpoints",),
        ("create", "patch"),
        "a moved job's last Checkpoint, written before its copy so it resumes from it",
    ),
    ("gpufleet.io", ("checkpoints/status",), ("patch",), "that Checkpoint marked Complete"),
    (
        "",
        ("events",),
        ("list", "watch"),
        "the worker's Events about managed work, mirrored into the manager: watched (or listed each period)",
    ),
)

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check(federation: Federation, *, scheduler_enabled: bool, source: str) -> None:
    """What would fail in the cluster, or run work twice, refused with the value's path."""
    manager, worker = federation.manager, federation.worker
    if manager.enabled and scheduler_enabled:
        raise ValidationError(
            "a manager cluster runs no gpufleet scheduler or operator (its operator would run the "
            "manager's TrainingJobs there as well as in a worker): set scheduler.enabled: false",
            obj=source,
            field="federation.manager.enabled",
        )
    if worker.clusterName and not scheduler_enabled:
        raise ValidationError(
            "a worker's reports come from its scheduler: set scheduler.enabled: true",
            obj=source,
            field="federation.worker.clusterName",
        )
    for index, name in enumerate(manager.workers):
        if not isinstance(name, str) or not _NAME.match(name) or len(name) > 63 - len(WORKER_PREFIX):
            raise ValidationError(
                f"{name!r} is not a Cluster name that fits gpufleet-worker-NAME (lowercase letters, digits "
                f"and '-', at most {63 - len(WORKER_PREFIX)})",
                obj=source,
                field=f"federation.manager.workers[{index}]",
            )


def scheduler_args(worker: FederationWorker) -> list[str]:
    """The worker's scheduler flags: none unless this cluster is a federation worker."""
    if not worker.clusterName:
        return []
    return [
        f"--manager-kubeconfig={MANAGER_KUBECONFIG_DIR}/kubeconfig",
        f"--cluster-name={worker.clusterName}",
        f"--heartbeat-seconds={worker.heartbeatSeconds}",
    ]


def scheduler_mounts(worker: FederationWorker) -> list[Json]:
    if not worker.clusterName:
        return []
    return [{"name": "manager-kubeconfig", "mountPath": MANAGER_KUBECONFIG_DIR, "readOnly": True}]


def scheduler_volumes(worker: FederationWorker) -> list[Json]:
    """The manager kubeconfig's Secret, only its key, as the file the flag names."""
    if not worker.clusterName:
        return []
    secret = {
        "secretName": worker.managerKubeconfigSecret,
        "items": [{"key": worker.managerKubeconfigKey, "path": "kubeconfig"}],
    }
    return [{"name": "manager-kubeconfig", "secret": secret}]


def worker_objects(namespace: str, worker: FederationWorker) -> list[Json]:
    """In a worker cluster: the scheduler's lease-rule writes, and the manager's identity and access."""
    if not worker.clusterName:
        return []
    objects = [
        role("ClusterRole", SCHEDULER_FEDERATION, None, "scheduler", SCHEDULER_FEDERATION_RULES),
        _bound(SCHEDULER_FEDERATION, "scheduler", "gpufleet-scheduler", namespace),
    ]
    if worker.managerAccess:
        objects += [
            meta("v1", "ServiceAccount", MANAGER_ACCESS, namespace, "federation"),
            role("ClusterRole", MANAGER_ACCESS, None, "federation", MANAGER_ACCESS_RULES),
            _bound(MANAGER_ACCESS, "federation", MANAGER_ACCESS, namespace),
        ]
    return objects


def manager_objects(v: Values) -> list[Json]:
    """In the manager cluster: the manager's Deployment and RBAC, and one reporting role per worker."""
    m, ns = v.federation.manager, v.namespace
    if not m.enabled:
        return []
    secrets = role("Role", f"{MANAGER}-secrets", m.kubeconfigSecretNamespace, "manager", MANAGER_SECRET_RULES)
    if m.kubeconfigSecrets:
        secrets["rules"][0]["resourceNames"] = list(m.kubeconfigSecrets)
    objects = [
        meta("v1", "ServiceAccount", MANAGER, ns, "manager"),
        role("ClusterRole", MANAGER, None, "manager", MANAGER_RULES),
        _bound(MANAGER, "manager", MANAGER, ns),
        secrets,
        binding("RoleBinding", f"{MANAGER}-secrets", m.kubeconfigSecretNamespace, "manager", MANAGER, ns),
        role("Role", f"{MANAGER}-leader-election", ns, "manager", MANAGER_LEASE_RULES),
        binding("RoleBinding", f"{MANAGER}-leader-election", ns, "manager", MANAGER, ns),
        _manager_deployment(v),
    ]
    for cluster in m.workers:
        name = f"{WORKER_PREFIX}{cluster}"
        reporting = role("ClusterRole", name, None, "federation", WORKER_REPORT_RULES)
        for rule in reporting["rules"]:  # its own Cluster only
            rule["resourceNames"] = [cluster]
        objects += [meta("v1", "ServiceAccount", name, ns, "federation"), reporting]
        objects.append(_bound(name, "federation", name, ns))
    return objects


def _bound(name: str, component: str, account: str, namespace: str) -> Json:
    return binding("ClusterRoleBinding", name, None, component, account, namespace)


def _manager_deployment(v: Values) -> Json:
    m, ns = v.federation.manager, v.namespace
    args = [
        "kube",
        "manager",
        f"--manager-name={m.name}",
        f"--grace-seconds={m.graceSeconds}",
        f"--period-seconds={m.periodSeconds}",
        f"--namespace={ns}",
        f"--lease={MANAGER}",
        f"--log-format={v.logFormat}",
    ]
    container = {
        "name": "manager",
        "image": f"{v.image.repository}:{v.image.tag}",
        "imagePullPolicy": v.image.pullPolicy,
        "command": ["gpufleet"],
        "args": args,
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "resources": m.resources,
        "securityContext": locked_down(),
    }
    deployment = meta("apps/v1", "Deployment", MANAGER, ns, "manager")
    deployment["spec"] = {
        "replicas": m.replicas,
        "selector": {"matchLabels": selector("manager")},
        "template": {
            "metadata": {"labels": labels("manager")},
            "spec": {
                "serviceAccountName": MANAGER,
                "securityContext": pod_security(),
                "containers": [container],
            },
        },
    }
    return deployment


def federation_from(merged: dict[str, Any]) -> Federation:
    return Federation(
        manager=FederationManager(**merged["manager"]), worker=FederationWorker(**merged["worker"])
    )
