"""`gpufleet manifests all`, the Helm chart and their agreement."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.api.crd import custom_resource_definitions
from gpufleet.api.errors import ValidationError
from gpufleet.cli.main import app
from gpufleet.kube.manifests import SCHEDULER_RULES, Values, render_all, values_from

from .helm_subset import Chart

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpufleet"


def by_key(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects if o}


def helm(values: dict) -> dict[tuple[str, str], dict]:
    rendered = list(yaml.safe_load_all(Chart(CHART, values).render()))
    crds = list(yaml.safe_load_all((CHART / "crds" / "gpufleet-crds.yaml").read_text()))
    return by_key(rendered + crds)


def test_values_yaml_holds_the_renderers_defaults() -> None:
    assert yaml.safe_load((CHART / "values.yaml").read_text()) == Values().as_dict()


def test_the_chart_renders_what_manifests_all_prints() -> None:
    assert helm(Values().as_dict()) == by_key(render_all())


def test_with_other_values_too() -> None:
    overrides = {
        "namespace": "gpu",
        "serviceMonitor": {"enabled": True},
        "scheduler": {"replicas": 3, "placement": "bestfit", "placementByClass": ["inference=packing"]},
        "agent": {"privileged": True, "runtimeClassName": ""},
    }
    values = values_from(overrides)
    assert helm(values.as_dict()) == by_key(render_all(values))
    rendered = by_key(render_all(values))
    assert rendered[("ServiceMonitor", "gpufleet-agent")]["metadata"]["namespace"] == "gpu"
    agent = rendered[("DaemonSet", "gpufleet-agent")]["spec"]["template"]["spec"]
    assert (
        agent["containers"][0]["securityContext"] == {"privileged": True} and "runtimeClassName" not in agent
    )
    without = by_key(render_all(values_from({"agent": {"enabled": False}})))
    assert ("DaemonSet", "gpufleet-agent") not in without


def test_the_charts_crds_are_the_generated_ones() -> None:
    shipped = list(yaml.safe_load_all((CHART / "crds" / "gpufleet-crds.yaml").read_text()))
    target = CHART / "crds" / "gpufleet-crds.yaml"
    assert shipped == custom_resource_definitions(), (
        f"regenerate with: gpufleet manifests crds --output-file {target}"
    )


def test_rbac_is_least_privilege_and_justified() -> None:
    objects = by_key(render_all())
    role = objects[("ClusterRole", "gpufleet-scheduler")]
    verbs = {(r["apiGroups"][0], res, v) for r in role["rules"] for res in r["resources"] for v in r["verbs"]}
    assert ("", "pods/binding", "create") in verbs and ("", "pods/eviction", "create") in verbs
    assert not any(v in ("*", "deletecollection", "update") for _, _, v in verbs)
    # Deleting is the operator's, for what it creates: worker pods and rendezvous Services.
    assert {(g, res) for g, res, v in verbs if v == "delete"} == {("", "pods"), ("", "services")}
    assert not any("*" in res for _, res, _ in verbs)
    assert all(why for *_, why in SCHEDULER_RULES)
    assert "Binding subresource" in role["metadata"]["annotations"]["gpufleet.io/rbac-reasons"]
    lease = objects[("Role", "gpufleet-scheduler-leader-election")]
    assert lease["metadata"]["namespace"] == "gpufleet-system"  # leases only in gpufleet's namespace


def test_the_scheduler_runs_two_replicas_with_leader_election() -> None:
    deployment = by_key(render_all())[("Deployment", "gpufleet-scheduler")]
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["kube", "scheduler"]
    assert "--topology-level=clique=nvidia.com/gpu.clique" in container["args"]
    assert container["env"][0]["name"] == "POD_NAME"


def test_unknown_values_are_refused_with_their_path() -> None:
    with pytest.raises(ValidationError, match=r"field scheduler\.replica"):
        values_from({"scheduler": {"replica": 3}})


def test_the_cli_prints_the_same_objects(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["manifests", "all"])
    assert result.exit_code == 0
    assert by_key(list(yaml.safe_load_all(result.output))) == by_key(render_all())
    values = tmp_path / "values.yaml"
    values.write_text("installCRDs: false\n")
    result = CliRunner().invoke(app, ["manifests", "all", "-f", str(values)])
    assert "CustomResourceDefinition" not in result.output and "Deployment" in result.output


def _agent_args(objects: dict[tuple[str, str], dict]) -> list[str]:
    return objects[("DaemonSet", "gpufleet-agent")]["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(
    ("strategy", "args"),
    [("mixed", ["--mig-strategy=mixed"]), ("single", ["--mig-strategy=single"]), ("", [])],
)
def test_the_agents_mig_strategy_is_set_cluster_wide(strategy: str, args: list[str]) -> None:
    """agent.migStrategy (default mixed: a MIG pool may mix profiles on a node) reaches every agent as
    --mig-strategy, in the chart and in `manifests all` alike; '' leaves it to the nodes' config files."""
    values = values_from({"agent": {"migStrategy": strategy}}) if strategy != "mixed" else Values()
    rendered = by_key(render_all(values))
    assert helm(values.as_dict()) == rendered
    assert [a for a in _agent_args(rendered) if a.startswith("--mig-strategy")] == args


def test_an_unknown_mig_strategy_is_refused_with_its_field() -> None:
    with pytest.raises(ValidationError, match=r"field agent\.migStrategy: 'half' is not one of none, single"):
        values_from({"agent": {"migStrategy": "half"}})


def test_operator_values_are_read_from_a_values_file() -> None:
    values = values_from({"operator": {"metrics": "pods", "sampleSeconds": 5}})
    container = by_key(render_all(values))[("Deployment", "gpufleet-scheduler")]["spec"]["template"]["spec"]
    args = container["containers"][1]["args"]
    assert "--metrics=pods" in args and "--sample-seconds=5" in args
    assert helm(values.as_dict()) == by_key(render_all(values))


def test_placement_by_class_reaches_the_scheduler_and_bad_names_are_refused() -> None:
    values = values_from({"scheduler": {"placement": "bestfit", "placementByClass": ["inference=packing"]}})
    scheduler = next(
        o for o in render_all(values) if o["kind"] == "Deployment" and "scheduler" in o["metadata"]["name"]
    )
    args = scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--placement=bestfit" in args and "--placement-class=inference=packing" in args
    with pytest.raises(
        ValidationError, match=r"field scheduler\.placementByClass: unknown workload class 'train'"
    ):
        values_from({"scheduler": {"placementByClass": ["train=fgd+"]}})
    with pytest.raises(ValidationError, match=r"field scheduler\.placement: unknown placement policy 'best'"):
        values_from({"scheduler": {"placement": "best"}})


def test_the_dra_agent_gets_device_classes_and_only_its_nodes_slices() -> None:
    values = values_from({"agent": {"dra": True}})
    rendered = by_key(render_all(values))
    assert helm(values.as_dict()) == rendered
    assert "--dra" in _agent_args(rendered)
    assert "--dra" not in _agent_args(by_key(render_all()))
    assert ("DeviceClass", "gpu.nvidia.com") not in by_key(render_all())  # only with agent.dra
    classes = [rendered["DeviceClass", name]["spec"]["selectors"][0]["cel"]["expression"] for name in
               ("gpu.nvidia.com", "mig.nvidia.com")]  # fmt: skip
    assert all('device.driver == "gpu.nvidia.com"' in c for c in classes)
    role = rendered["ClusterRole", "gpufleet-agent-dra"]
    verbs = {(res, v) for r in role["rules"] for res in r["resources"] for v in r["verbs"]}
    assert verbs == {
        ("resourceclaims", "get"),
        ("resourceslices", "list"),
        ("resourceslices", "create"),
        ("resourceslices", "update"),
        ("resourceslices", "delete"),
    }
    policy = rendered["ValidatingAdmissionPolicy", "gpufleet-agent-resourceslices"]["spec"]
    assert (
        "system:serviceaccount:gpufleet-system:gpufleet-agent" in policy["matchConditions"][0]["expression"]
    )
    binding = rendered["ValidatingAdmissionPolicyBinding", "gpufleet-agent-resourceslices"]["spec"]
    assert binding == {"policyName": "gpufleet-agent-resourceslices", "validationActions": ["Deny"]}
    mounts = rendered["DaemonSet", "gpufleet-agent"]["spec"]["template"]["spec"]["containers"][0][
        "volumeMounts"
    ]
    assert {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"} <= {
        m["mountPath"] for m in mounts
    }


def test_the_in_cluster_console_only_lists_and_watches_and_mounts_the_token_secret() -> None:
    assert not any(o["metadata"]["name"] == "gpufleet-console" for o in render_all())  # off by default
    values = values_from({"console": {"enabled": True, "port": 9000}, "scheduler": {"schedulerName": "gf"}})
    assert helm(values.as_dict()) == by_key(render_all(values))
    objects = by_key(render_all(values))
    role = objects[("ClusterRole", "gpufleet-console")]
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"list", "watch"}
    assert not any("secrets" in rule["resources"] for rule in role["rules"])
    pod = objects[("Deployment", "gpufleet-console")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][:2] == ["kube", "console"] and "--scheduler-name=gf" in container["args"]
    assert (
        "--tokens-dir=/etc/gpufleet/console-tokens" in container["args"]
        and "--port=9000" in container["args"]
    )
    tokens = next(v for v in pod["volumes"] if v["name"] == "tokens")
    assert tokens["secret"] == {"secretName": "gpufleet-console-tokens", "optional": True}
    service = objects[("Service", "gpufleet-console")]["spec"]
    assert service["ports"] == [{"name": "http", "port": 9000, "targetPort": "http"}]
    assert objects[("ClusterRoleBinding", "gpufleet-console")]["subjects"][0]["name"] == "gpufleet-console"
