"""The manifests of `examples/` as a newcomer uses them: `gpufleet apply -f examples/` on a running
`gpufleet up`, after which every job and service runs on the GPUs it asked for.

And the pod template, which a newcomer coming from Kubernetes writes GPUs into: a GPU resource there
that the request does not say is refused, naming the template's field and the field to use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpufleet.api.documents import load_objects
from gpufleet.cli.client import Client

from .conftest import Plane, Result, start_plane, stop_plane, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    # A minute of fleet time a second, so the twin's nodes come up and pods start without waiting.
    started = start_plane(tmp_path_factory.mktemp("examples") / "state", "--time-scale", "60")
    yield started
    stop_plane(started)


@pytest.fixture
def state(plane: Plane) -> Path:
    return plane.state


@pytest.fixture
def client(plane: Plane) -> Iterator[Client]:
    opened = Client(plane.url, (plane.state / "admin-token").read_text().strip())
    yield opened
    opened.close()


def _items(client: Client, kind: str) -> list[dict[str, Any]]:
    return client.list_objects(client.resource_type(kind), None)


def test_the_examples_cover_every_kind_a_newcomer_needs() -> None:
    objects = [obj for path in sorted(EXAMPLES.glob("*.yaml")) for obj in load_objects(path)]
    kinds = Counter(obj.kind for obj in objects)
    assert {"Queue", "GPUPool", "TrainingJob", "InferenceService", "Checkpoint", "ModelVersion"} <= set(kinds)
    queues = [obj for obj in objects if obj.kind == "Queue"]
    assert any(q.spec.parent is not None for q in queues), "a queue tree, not a flat list"
    pools = [obj for obj in objects if obj.kind == "GPUPool"]
    assert any(p.spec.sharing.mode == "mig" for p in pools), "a MIG pool"
    jobs = [obj for obj in objects if obj.kind == "TrainingJob"]
    assert any(j.spec.topology.required and j.spec.replicas > 1 for j in jobs), "a gang with topology"
    assert any(j.spec.elastic for j in jobs), "an elastic job"
    services = [obj for obj in objects if obj.kind == "InferenceService"]
    assert any(s.spec.autoscaling.target_requests_per_replica for s in services), "autoscaling"
    assert "examples/" in (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")


def test_applied_examples_run_on_the_gpus_they_ask_for(cli: Callable[..., Result], client: Client) -> None:
    applied = cli("apply", "-f", str(EXAMPLES))
    assert applied.code == 0, applied.err
    expected = [obj for path in sorted(EXAMPLES.glob("*.yaml")) for obj in load_objects(path)]
    assert applied.out.count(" created") == len(expected), applied.out

    def running() -> bool:
        jobs = _items(client, "TrainingJob")
        services = _items(client, "InferenceService")
        return all(j["status"].get("phase") == "Running" for j in jobs) and all(
            s["status"].get("readyReplicas", 0) >= s["spec"]["replicas"]["min"] for s in services
        )

    wait_for(running, timeout=90, what="every example job and service to run")
    pods = _items(client, "Pod")
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_owner.setdefault(pod["spec"]["owner"]["name"], []).append(pod)
    nodes = {node["metadata"]["name"]: node for node in _items(client, "Node")}

    gang = by_owner["llm-pretrain"]
    assert len(gang) == 4 and all(len(p["spec"]["gpus"]) == 8 for p in gang)
    racks = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"].get("rack") for p in gang}
    assert len(racks) == 1, f"topology required rack, got racks {racks}"
    elastic = by_owner["vision-sweep"]
    assert 1 <= len(elastic) <= 4 and all(len(p["spec"]["gpus"]) == 4 for p in elastic)
    chat = by_owner["chat"]
    assert len(chat) >= 2 and all(len(p["spec"]["gpus"]) == 1 for p in chat)
    embed = by_owner["embed"]
    assert len(embed) >= 2 and all(p["spec"]["mig"]["profile"] == "1g.10gb" for p in embed)
    assert all(nodes[p["spec"]["nodeName"]]["metadata"]["labels"].get("gpufleet.io/pool") == "a100-mig"
               for p in embed)  # fmt: skip
    # DRA: each worker's claim, made from the template, holds the 2 GPUs the worker runs on
    claims = {c["metadata"]["name"]: c for c in _items(client, "ResourceClaim")}
    dra = by_owner["dra-finetune"]
    assert len(dra) == 2
    for pod in dra:
        (entry,) = pod["spec"]["resourceClaims"]
        claim = claims[entry["resourceClaimName"]]
        devices = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
        assert sorted(devices) == sorted(f"gpu-{g}" for g in pod["spec"]["gpus"]) and len(devices) == 2
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]


def test_a_gpu_limit_in_the_pod_template_is_refused_naming_the_field_to_use(
    plane: Plane, cli: Callable[..., Result], tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: gpufleet.io/v1alpha1\n"
        "kind: TrainingJob\n"
        "metadata: {name: from-a-pod-spec, namespace: team-a}\n"
        "spec:\n"
        "  queue: team-a\n"
        "  replicas: 1\n"
        "  worker:\n"
        "    template:\n"
        "      spec:\n"
        "        containers:\n"
        "          - name: main\n"
        "            image: pytorch\n"
        "            resources: {limits: {nvidia.com/gpu: 8}}\n"
    )
    done = cli("apply", "-f", str(job))
    assert done.code == 2
    assert "Traceback" not in done.err and len(done.err.strip().splitlines()) == 1, done.err
    assert "field spec.worker.template.spec.containers[0].resources.limits.nvidia.com/gpu" in done.err
    assert "spec.worker.gpus: 8" in done.err
    assert f"{job}:13:" in done.err  # the line of the limit

    # Over the API too, as any other client sends it: 422 naming the same field.
    body = yaml.safe_load(job.read_text())
    token = (plane.state / "admin-token").read_text().strip()
    response = httpx.post(
        f"{plane.url}/v1/apply", json={"items": [body]}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "spec.worker.template.spec.containers[0].resources.limits.nvidia.com/gpu"
    assert "spec.worker.gpus: 8" in error["message"]
