"""The node agent as a DRA driver against a real API server: `gpufleet agent --dra` on a recorded MIG
node publishes ResourceSlices that the v1 API accepts, and prepares a claim allocated there for the
stand-in kubelet; the agent's ClusterRole and admission policy (`agent.dra` in the chart) let an agent
write its own node's slices and refuse it any other node's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.test_dra_kubelet import StandInKubelet
from gpufleet.agent.dra.slices import node_slice_specs
from gpufleet.agent.nvml import RecordedNvml
from gpufleet.kube.client import KubeTransport, load_api_client
from gpufleet.kube.dra_manifests import AGENT_DRA_RULES, device_classes, slice_policy
from gpufleet.kube.dra_node import published, withdraw
from gpufleet.kube.transport import ApiError, Json, Transport

from .conftest import RUN, Cluster, wait_for

pytestmark = pytest.mark.k8s

DRA = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gf-", dir="/tmp") as path:  # unix sockets: short paths
        yield Path(path)


@contextlib.contextmanager
def agent(node: str, where: Path) -> Iterator[subprocess.Popen[str]]:
    """`gpufleet agent --dra` for `node` on the recorded A100 MIG board, its kubelet dirs under `where`."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "agent", "--dra", "--node-name", node,
         "--profile", "a100-80gb-mig", "--plugin-dir", str(where / "device-plugins"),
         "--dra-plugins-dir", str(where / "plugins"), "--dra-registry-dir", str(where / "registry"),
         "--cdi-dir", str(where / "cdi"), "--nvidia-ctk", "",
         "--metrics-port", "0", "--metrics-address", "127.0.0.1",
         "--feature-file", "", "--no-label-node", "--no-sharing-config",
         "--pod-resources-socket", str(where / "none.sock")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**env, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output


def test_dra_agent_slices_are_accepted_and_its_claims_prepared(cluster: Cluster, short_dir: Path) -> None:
    node = cluster.node("dra-agent", gpus=0)
    try:
        with agent(node, short_dir):
            slices = wait_for("the agent's ResourceSlices", lambda: published(cluster.api, node), timeout=60)
            devices = {d["name"] for s in slices for d in s["spec"].get("devices", [])}
            info = RecordedNvml.from_profile("a100-80gb-mig").discover()
            assert devices == {d.name for s in node_slice_specs(info, node) for d in s.devices}
            assert {s["metadata"]["ownerReferences"][0]["name"] for s in slices} == {node}
            claim = allocated_claim(cluster, node, "gpu-6-mig-9-4-4")
            kubelet = StandInKubelet(short_dir / "registry")
            plugin = kubelet.register(timeout=30)
            uid = claim["metadata"]["uid"]
            ref = (cluster.namespace, uid, claim["metadata"]["name"])
            answer = kubelet.call(plugin.endpoint, "NodePrepareResources", ref)
            assert answer.claims[uid].error == ""
            spec_file = short_dir / "cdi" / f"k8s.gpu.nvidia.com-claim_{uid}.json"
            spec = json.loads(spec_file.read_text())
            # the instance is injected by its device nodes (its parent's /dev/nvidiaN first), not by a list
            # in NVIDIA_VISIBLE_DEVICES that a second claim in the container would override
            (device,) = spec["devices"]
            assert device["containerEdits"]["deviceNodes"][0] == {"path": info.gpus[6].device_path}
            assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=none"]
            kubelet.call(plugin.endpoint, "NodeUnprepareResources", ref)
            assert not spec_file.exists()
    finally:
        withdraw(cluster.api, node)  # a bare API server has no garbage collector to follow the Node


def allocated_claim(cluster: Cluster, node: str, device: str) -> Json:
    """A claim allocated `device` of the node's pool, as gpufleet's scheduler writes it."""
    path = f"{DRA}/namespaces/{cluster.namespace}/resourceclaims"
    request = {"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}
    made = cluster.api.request(
        "POST",
        path,
        body={"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
              "metadata": {"name": f"e2e-{RUN}-agent"}, "spec": {"devices": {"requests": [request]}}},
    )  # fmt: skip
    made["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": device}]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    return cluster.api.request("PUT", f"{path}/{made['metadata']['name']}/status", body=made)


class Impersonating(KubeTransport):
    """The admin's client acting as the agent's service account on `node`, as the agent's own token
    (with its node-name extra) would authenticate it."""

    def __init__(self, user: str, node: str) -> None:
        super().__init__(load_api_client(kubeconfig=os.environ["KUBECONFIG"]))
        self._as = {
            "Impersonate-User": user,
            "Impersonate-Group": "system:serviceaccounts",
            "Impersonate-Extra-authentication.kubernetes.io%2fnode-name": node,
        }

    def _credentials(self, *, fresh: bool = False) -> dict[str, str]:
        return {**super()._credentials(fresh=fresh), **self._as}


@pytest.fixture
def agent_permissions(api: Transport, namespace: str) -> Iterator[str]:
    """The chart's DRA ClusterRole, binding and admission policy for an agent account of this run."""
    account, name = f"e2e-{RUN}-agent", f"e2e-{RUN}-agent-dra"
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    admission = "/apis/admissionregistration.k8s.io/v1"
    rules = [{"apiGroups": [g], "resources": list(r), "verbs": list(v)} for g, r, v, _ in AGENT_DRA_RULES]
    made: list[str] = []

    def create(path: str, body: Json) -> None:
        api.request("POST", path, body=body)
        made.append(f"{path}/{body['metadata']['name']}")

    create(f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": rules})
    create(f"{rbac}/clusterrolebindings", {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    })  # fmt: skip
    policy, binding = slice_policy(namespace, account)
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    create(f"{admission}/validatingadmissionpolicies", policy)
    create(f"{admission}/validatingadmissionpolicybindings", binding)
    try:
        yield f"system:serviceaccount:{namespace}:{account}"
    finally:
        for path in reversed(made):
            with contextlib.suppress(ApiError):
                api.request("DELETE", path)


def test_dra_agent_may_write_only_its_own_nodes_slices(cluster: Cluster, agent_permissions: str) -> None:
    mine, other = cluster.node("dra-mine", gpus=0), cluster.node("dra-other", gpus=0)
    info = RecordedNvml.from_profile("pcie-l4").discover()
    as_agent = Impersonating(agent_permissions, mine)

    def slice_of(node: str) -> Json:
        (spec,) = node_slice_specs(info, node)
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{DRIVER}-0"}, "spec": spec.to_dict()}  # fmt: skip

    def refused(body: Json) -> Any:
        try:
            as_agent.request("POST", f"{DRA}/resourceslices", body=body)
        except ApiError as exc:
            return exc
        as_agent.request("DELETE", f"{DRA}/resourceslices/{body['metadata']['name']}")
        return None

    try:
        # the policy takes effect once the API server has compiled it
        denied = wait_for(
            "the admission policy to refuse another node's slice", lambda: refused(slice_of(other))
        )
        assert denied.status == 403 and f"the agent on node {mine}" in denied.message
        as_agent.request("POST", f"{DRA}/resourceslices", body=slice_of(mine))
        foreign = slice_of(mine) | {"metadata": {"name": f"{mine}-other-driver"}}
        foreign["spec"] = foreign["spec"] | {"driver": "example.com"}
        assert refused(foreign) is not None  # its node, but not our driver
        cluster.api.request("POST", f"{DRA}/resourceslices", body=slice_of(other))
        with pytest.raises(ApiError) as gone:
            as_agent.request("DELETE", f"{DRA}/resourceslices/{other}-{DRIVER}-0")
        assert gone.value.status == 403
        as_agent.request("DELETE", f"{DRA}/resourceslices/{mine}-{DRIVER}-0")
        with pytest.raises(ApiError) as claims:  # claims are read, never written
            as_agent.request("POST", f"{DRA}/namespaces/{cluster.namespace}/resourceclaims", body={})
        assert claims.value.status == 403
    finally:
        for node in (mine, other):
            withdraw(cluster.api, node)


@pytest.fixture
def agent_classes_and_queue(api: Transport, crds: None) -> Iterator[tuple[str, str]]:
    """The chart's MIG DeviceClass under a name of this run, and a queue with A100 MIG quota."""
    (mig,) = [c for c in device_classes() if c["metadata"]["name"] == "mig.nvidia.com"]
    name = f"e2e-{RUN}-mig.nvidia.com"
    mig["metadata"]["name"] = name
    api.request("POST", f"{DRA}/deviceclasses", body=mig)
    queue = f"e2e-{RUN}-a100"
    quotas = {"A100-80GB": {"nominal": 8}, "3g.40gb": {"nominal": 8}}
    body = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": queue},
            "spec": {"quotas": quotas}}  # fmt: skip
    api.request("POST", "/apis/gpufleet.io/v1alpha1/queues", body=body)
    yield name, queue
    for path in (f"/apis/gpufleet.io/v1alpha1/queues/{queue}", f"{DRA}/deviceclasses/{name}"):
        with contextlib.suppress(ApiError):
            api.request("DELETE", path)


def test_dra_a_claim_on_the_agents_slices_is_scheduled_then_prepared(
    cluster: Cluster, scheduler: Any, agent_classes_and_queue: tuple[str, str], short_dir: Path
) -> None:
    """The whole path: the agent publishes, gpufleet's scheduler allocates a MIG instance from its slices
    and binds the pod there, and the kubelet's prepare hands the container that instance."""
    mig_class, queue = agent_classes_and_queue
    node = cluster.node("dra-agent-sched", gpus=0)
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": mig_class,
            "selectors": [
                {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'}}
            ],
        },
    }
    claims = f"{DRA}/namespaces/{cluster.namespace}/resourceclaims"
    claim = cluster.api.request(
        "POST",
        claims,
        body={"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "infer"},
              "spec": {"devices": {"requests": [request]}}},
    )  # fmt: skip
    try:
        with agent(node, short_dir):
            wait_for("the agent's ResourceSlices", lambda: published(cluster.api, node), timeout=60)
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "infer", "labels": {"gpufleet.io/queue": queue}},
                "spec": {
                    "schedulerName": cluster.scheduler_name,
                    "nodeSelector": dict(cluster.selector),
                    "terminationGracePeriodSeconds": 5,
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "infer"}],
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            }
            cluster.api.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", body=pod)
            assert wait_for("the pod bound", lambda: cluster.node_of("infer"), timeout=90) == node
            allocated = cluster.api.request("GET", f"{claims}/infer")["status"]["allocation"]
            (result,) = allocated["devices"]["results"]
            assert (result["pool"], result["device"].split("-mig-")[1].split("-")[0]) == (node, "9")
            kubelet = StandInKubelet(short_dir / "registry")
            plugin = kubelet.register(timeout=30)
            uid = claim["metadata"]["uid"]
            answer = kubelet.call(plugin.endpoint, "NodePrepareResources", (cluster.namespace, uid, "infer"))
            (device,) = answer.claims[uid].devices
            assert device.device_name == result["device"]
            info = RecordedNvml.from_profile("a100-80gb-mig").discover()
            index = int(result["device"].split("-")[1])
            spec = json.loads((short_dir / "cdi" / f"k8s.gpu.nvidia.com-claim_{uid}.json").read_text())
            assert list(device.cdi_device_ids) == [f"k8s.gpu.nvidia.com/claim={uid}-{result['device']}"]
            (injected,) = spec["devices"]
            assert injected["containerEdits"]["deviceNodes"][0] == {"path": info.gpus[index].device_path}
            assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=none"]
    finally:
        withdraw(cluster.api, node)
