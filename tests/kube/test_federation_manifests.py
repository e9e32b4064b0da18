"""The federation in `gpufleet manifests all` and the chart: the manager cluster's Deployment and RBAC, a
worker scheduler's reach into the manager, and refusals of values that would fail or run work twice
(tests/kube/test_federation_rbac.py holds the roles to the code's requests)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.kube.manifests import Values, render_all, values_from

from .test_manifests import CHART, by_key, helm

MANAGER_VALUES: dict[str, Any] = {
    "scheduler": {"enabled": False},
    "agent": {"enabled": False},
    "federation": {"manager": {"enabled": True, "workers": ["w1", "w2"], "graceSeconds": 2.5}},
}
WORKER_VALUES: dict[str, Any] = {"federation": {"worker": {"clusterName": "w1", "heartbeatSeconds": 2}}}


def pod(objects: dict[tuple[str, str], dict], name: str) -> dict:
    spec: dict = objects[("Deployment", name)]["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(
    "overrides",
    [
        MANAGER_VALUES,
        {**MANAGER_VALUES, "namespace": "fleet", "federation": {"manager": {
            "enabled": True, "kubeconfigSecrets": ["w1-kubeconfig"], "kubeconfigSecretNamespace": "keys"}}},
        WORKER_VALUES,
        {"federation": {"worker": {"clusterName": "w1", "managerAccess": False}}},
    ],
    ids=["manager", "manager-narrowed", "worker", "worker-without-manager-access"],
)  # fmt: skip
def test_the_chart_renders_the_same_federation_objects(overrides: dict[str, Any]) -> None:
    values = values_from(overrides)
    assert helm(values.as_dict()) == by_key(render_all(values))


def test_a_manager_cluster_runs_the_manager_and_no_scheduler() -> None:
    objects = by_key(render_all(values_from(MANAGER_VALUES)))
    assert ("Deployment", "gpufleet-scheduler") not in objects
    assert ("DaemonSet", "gpufleet-agent") not in objects
    spec = pod(objects, "gpufleet-manager")
    assert spec["serviceAccountName"] == "gpufleet-manager"
    args = spec["containers"][0]["args"]
    assert args[:2] == ["kube", "manager"]
    assert "--grace-seconds=2.5" in args and "--lease=gpufleet-manager" in args
    assert "--namespace=gpufleet-system" in args
    # The kubeconfig Secrets: get only, in their namespace only (a Role), any name unless listed.
    secrets = objects[("Role", "gpufleet-manager-secrets")]
    assert secrets["metadata"]["namespace"] == "gpufleet-system"
    assert secrets["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    # One reporting identity per worker, reaching its own Cluster only.
    for worker in ("w1", "w2"):
        role = objects[("ClusterRole", f"gpufleet-worker-{worker}")]
        assert all(rule["resourceNames"] == [worker] for rule in role["rules"])
        assert ("ServiceAccount", f"gpufleet-worker-{worker}") in objects
    assert not any("*" in v for o in objects.values() for r in o.get("rules", []) for v in r["verbs"])


def test_listed_kubeconfig_secrets_are_the_only_ones_the_manager_may_read() -> None:
    manager = {"enabled": True, "kubeconfigSecrets": ["w1-kubeconfig"]}
    values = values_from({**MANAGER_VALUES, "federation": {"manager": manager}})
    secrets = by_key(render_all(values))[("Role", "gpufleet-manager-secrets")]
    assert secrets["rules"][0]["resourceNames"] == ["w1-kubeconfig"]


def test_a_worker_scheduler_gets_the_manager_kubeconfig_mounted_and_its_flags() -> None:
    objects = by_key(render_all(values_from(WORKER_VALUES)))
    spec = pod(objects, "gpufleet-scheduler")
    scheduler, operator = spec["containers"]
    assert scheduler["args"][-3:] == [
        "--manager-kubeconfig=/etc/gpufleet/manager/kubeconfig",
        "--cluster-name=w1",
        "--heartbeat-seconds=2",
    ]
    assert scheduler["volumeMounts"] == [
        {"name": "manager-kubeconfig", "mountPath": "/etc/gpufleet/manager", "readOnly": True}
    ]
    assert spec["volumes"] == [
        {
            "name": "manager-kubeconfig",
            "secret": {
                "secretName": "gpufleet-manager-kubeconfig",
                "items": [{"key": "kubeconfig", "path": "kubeconfig"}],
            },
        }
    ]
    assert "volumeMounts" not in operator and not any("manager" in a for a in operator["args"])
    assert ("ClusterRole", "gpufleet-federation-manager") in objects
    assert ("ServiceAccount", "gpufleet-federation-manager") in objects


def test_without_federation_values_nothing_of_it_is_rendered() -> None:
    objects = by_key(render_all())
    spec = pod(objects, "gpufleet-scheduler")
    assert "volumes" not in spec and not any("--cluster-name" in a for a in spec["containers"][0]["args"])
    assert not any("manager" in name or "federation" in name for _, name in objects)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"federation": {"manager": {"enabled": True}}}, "federation.manager.enabled"),
        ({"scheduler": {"enabled": False}, "federation": {"worker": {"clusterName": "w1"}}},
         "federation.worker.clusterName"),
        ({"scheduler": {"enabled": False},
          "federation": {"manager": {"enabled": True, "workers": ["ok", "W_2"]}}},
         "federation.manager.workers[1]"),
        ({"federation": {"manager": {"replica": 1}}}, "federation.manager.replica"),
    ],
    ids=["manager-beside-a-scheduler", "worker-without-scheduler", "bad-worker-name", "unknown-key"],
)  # fmt: skip
def test_values_that_would_fail_or_run_work_twice_are_refused_with_their_field(
    overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        values_from(overrides, source="values.yaml")
    assert caught.value.field == field and "values.yaml" in str(caught.value)


SCHEMA = json.loads((CHART / "values.schema.json").read_text())


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        ({}, False),
        (MANAGER_VALUES, False),
        (WORKER_VALUES, False),
        ({"federation": {"manager": {"enabled": True}}}, True),
        ({"scheduler": {"enabled": False}, "federation": {"worker": {"clusterName": "w1"}}}, True),
        ({"scheduler": {"enabled": False}, "federation": {"manager": {"enabled": True, "workers": ["W_2"]}}},
         True),
        ({"scheduler": {"enabled": False},
          "federation": {"manager": {"enabled": True, "workers": ["w" * 48]}}}, True),
    ],
    ids=["defaults", "manager", "worker", "manager-beside-a-scheduler", "worker-without-scheduler",
         "bad-worker-name", "worker-name-too-long"],
)  # fmt: skip
def test_helm_refuses_through_the_schema_what_manifests_all_refuses(
    overrides: dict[str, Any], refused: bool
) -> None:
    values = values_from(overrides).as_dict() if not refused else _merged(Values().as_dict(), overrides)
    errors = list(jsonschema.Draft7Validator(SCHEMA).iter_errors(values))
    assert bool(errors) is refused, [e.message for e in errors]
    if refused:
        with pytest.raises(ValidationError):
            values_from(overrides)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Values over the defaults, as Helm merges them before it checks the schema."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(base[key], value) if isinstance(value, dict) and key in base else value
    return out
