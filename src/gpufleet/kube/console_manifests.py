"""The web console inside the cluster (`console.enabled`): `gpufleet kube console` as a Deployment.

The same command a user runs on their machine, with the pod's ServiceAccount for a kubeconfig. Its
ClusterRole only lists and watches (the informers of the kinds the page shows, and the Events it streams):
the console writes nothing. Queue tokens are read from the token Secret mounted as files
(`--tokens-dir`, the Secret optional so the pod starts before the first token is made), so the
ServiceAccount needs no access to Secrets. The admin token is made at each start and printed in the
pod's log with the URL (`kubectl logs` is already the cluster admin's); a ClusterIP Service serves it,
for `kubectl port-forward` or an Ingress in front of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.kube.console_tokens import SECRET_NAME
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

NAME = "gpufleet-console"
TOKENS_DIR = "/etc/gpufleet/console-tokens"


@dataclass
class Console:
    enabled: bool = False
    port: int = 8766
    resources: dict[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    )


CONSOLE_RULES: tuple[Rule, ...] = (
    (
        "gpufleet.io",
        ("queues", "trainingjobs", "inferenceservices", "gpupools"),
        ("list", "watch"),
        "console: the informers of the queues, work and pools it shows",
    ),
    ("", ("nodes", "pods"), ("list", "watch"), "console: the informers of the fleet map and the costs"),
    ("", ("events",), ("list", "watch"), "console: the latest Events, then each new one"),
)


def console_objects(
    namespace: str, image: str, pull_policy: str, scheduler_name: str, c: Console
) -> list[Json]:
    """ServiceAccount, read-only ClusterRole and its binding, Deployment and Service; none unless enabled."""
    if not c.enabled:
        return []
    deployment = meta("apps/v1", "Deployment", NAME, namespace, "console")
    deployment["spec"] = {
        "replicas": 1,
        "selector": {"matchLabels": selector("console")},
        "template": {
            "metadata": {"labels": labels("console")},
            "spec": {
                "serviceAccountName": NAME,
                "securityContext": pod_security(),
                "containers": [
                    {
                        "name": "console",
                        "image": image,
                        "imagePullPolicy": pull_policy,
                        "command": ["gpufleet"],
                        "args": [
                            "kube",
                            "console",
                            "--host=0.0.0.0",
                            f"--port={c.port}",
                            f"--scheduler-name={scheduler_name}",
                            f"--tokens-dir={TOKENS_DIR}",
                        ],
                        "ports": [{"name": "http", "containerPort": c.port}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                        "resources": c.resources,
                        "securityContext": locked_down(),
                        "volumeMounts": [
                            {"name": "tokens", "mountPath": TOKENS_DIR, "readOnly": True},
                            # The admin token's private directory (the root filesystem is read-only).
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "tokens", "secret": {"secretName": SECRET_NAME, "optional": True}},
                    {"name": "tmp", "emptyDir": {}},
                ],
            },
        },
    }
    service = meta("v1", "Service", NAME, namespace, "console")
    service["spec"] = {
        "selector": selector("console"),
        "ports": [{"name": "http", "port": c.port, "targetPort": "http"}],
    }
    return [
        meta("v1", "ServiceAccount", NAME, namespace, "console"),
        role("ClusterRole", NAME, None, "console", CONSOLE_RULES),
        binding("ClusterRoleBinding", NAME, None, "console", NAME, namespace),
        deployment,
        service,
    ]
