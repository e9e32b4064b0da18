"""`gpufleet agent --dra` as the DaemonSet runs it: through the official client against the in-memory API
server served over HTTP, registered by the stand-in kubelet, publishing its node's slices and
preparing a claim allocated in the API server; no device plugin is served beside it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpufleet.agent.dra.slices import node_slice_specs
from gpufleet.agent.nvml import RecordedNvml
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.cli.main import app
from kube.fake_http import serve, write_kubeconfig
from kube.fakeapi import FakeApiServer

from .test_dra_kubelet import DRIVER, StandInKubelet

NODE = "a100-mig-0"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims"


def test_dra_agent_cli_publishes_slices_and_prepares_claims_through_the_api_server(short_dir: Path) -> None:
    api = FakeApiServer()
    api.put("/api/v1/nodes", {"metadata": {"name": NODE}})
    api.put("/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    results = [{"request": "gpus", "driver": DRIVER, "pool": NODE, "device": "gpu-6-mig-9-0-4"}]
    claim = api.put(
        CLAIMS,
        {
            "metadata": {"name": "infer"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "mig"}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        },
    )
    server = serve(api)
    kubeconfig = short_dir / "kubeconfig"
    write_kubeconfig(kubeconfig, server.server_address[1])
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "agent", "--dra", "--node-name", NODE,
         "--profile", "a100-80gb-mig", "--kubeconfig", str(kubeconfig),
         "--plugin-dir", str(short_dir / "device-plugins"), "--dra-plugins-dir", str(short_dir / "plugins"),
         "--dra-registry-dir", str(short_dir / "registry"), "--cdi-dir", str(short_dir / "cdi"),
         "--metrics-port", "0", "--metrics-address", "127.0.0.1", "--feature-file", "", "--no-label-node",
         "--no-sharing-config", "--pod-resources-socket", str(short_dir / "none.sock")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**env, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        kubelet = StandInKubelet(short_dir / "registry")
        info = kubelet.register(timeout=60)
        deadline = time.monotonic() + 30
        while not (slices := api.get("/apis/resource.k8s.io/v1/resourceslices")["items"]):
            assert time.monotonic() < deadline, "no ResourceSlice published"
            time.sleep(0.1)
        assert {s["spec"]["nodeName"] for s in slices} == {NODE}
        uid = claim["metadata"]["uid"]
        answer = kubelet.call(info.endpoint, "NodePrepareResources", ("team-a", uid, "infer"))
        assert answer.claims[uid].error == ""
        spec = json.loads((short_dir / "cdi" / f"k8s.gpu.nvidia.com-claim_{uid}.json").read_text())
        assert [d["name"] for d in spec["devices"]] == [f"{uid}-gpu-6-mig-9-0-4"]
        assert not list((short_dir / "device-plugins").glob("*.sock"))  # DRA instead, never both
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        server.shutdown()
    assert proc.returncode == 0, output
    assert not (short_dir / "registry" / f"{DRIVER}-reg.sock").exists()  # the kubelet unregisters it


def test_dra_agent_inspect_prints_the_slices_it_would_publish() -> None:
    result = CliRunner().invoke(
        app, ["agent", "inspect", "--profile", "a100-80gb-mig", "--dra", "--node-name", "n1"]
    )
    assert result.exit_code == 0, result.output
    slices = list(yaml.safe_load_all(result.output))
    assert [s["metadata"]["name"] for s in slices] == ["n1-gpu.nvidia.com-0", "n1-gpu.nvidia.com-1"]
    specs = [ResourceSliceSpec.model_validate(s["spec"]) for s in slices]
    assert specs == node_slice_specs(RecordedNvml.from_profile("a100-80gb-mig").discover(), "n1")
