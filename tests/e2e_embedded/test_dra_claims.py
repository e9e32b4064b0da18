"""DRA claims end to end in the embedded world: DeviceClass, ResourceClaimTemplate and ResourceClaim
objects applied with a TrainingJob whose pod template names them; the claims made per pod, allocated and
reserved before the pods are bound, released when the pods go, and restored after a restart."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api.dra import ResourceClaim
from gpufleet.api.runtime import Pod
from gpufleet.controllers.claims import DELETE_PROTECTION

from .conftest import World, make_world

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: dra}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, dra: true}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec:
  quotas: {H100-80GB: {nominal: 12}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
    - cel: {expression: 'device.driver == "gpu.nvidia.com"'}
    - cel: {expression: 'device.attributes["gpu.nvidia.com"].type == "gpu"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: four-gpus, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: gpus
          exactly: {deviceClassName: gpu.nvidia.com, allocationMode: ExactCount, count: 4}
"""


def job(
    name: str, replicas: int, *, duration: int = 3600, claim: str = "resourceClaimTemplateName: four-gpus"
) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: ml}}
spec:
  queue: team
  replicas: {replicas}
  durationSeconds: {duration}
  worker:
    template:
      spec:
        resourceClaims: [{{name: gpus, {claim}}}]
        containers: [{{name: main, image: pytorch, resources: {{claims: [{{name: gpus}}]}}}}]
"""


def claims(world: World) -> dict[str, ResourceClaim]:
    return {c.name: c for c in world.store.list(ResourceClaim, namespace="ml")}


def held(world: World) -> list[tuple[str, str]]:
    """Every (pool, device) allocated to a stored claim, once per claim holding it."""
    return [
        (r.pool, r.device)
        for c in claims(world).values()
        if c.status.allocation is not None
        for r in c.status.allocation.devices.results
    ]


def pods(world: World, job_name: str) -> list[Pod]:
    return [p for p in world.store.list(Pod, namespace="ml") if p.spec.owner.name == job_name]


def test_dra_template_claims_are_made_per_pod_allocated_and_released(world: World) -> None:
    world.apply(FLEET)
    world.apply(job("ft", 2, duration=600))
    world.runtime.run_for(60)
    running = pods(world, "ft")
    assert len(running) == 2
    made = claims(world)
    assert sorted(made) == ["job-ft-worker-gpus-0", "job-ft-worker-gpus-1"]
    for pod in running:
        (entry,) = pod.spec.resource_claims
        claim = made[entry.resource_claim_name]
        allocation = claim.status.allocation
        assert allocation is not None and len(allocation.devices.results) == 4
        assert {r.driver for r in allocation.devices.results} == {"gpu.nvidia.com"}
        assert allocation.node_selector is not None
        pinned = allocation.node_selector.node_selector_terms[0].match_fields[0].values
        assert pinned == [pod.spec.node_name]
        assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
        # the pod's GPUs are the devices its claim got
        assert sorted(pod.spec.gpus) == sorted(
            int(r.device.split("-")[1]) for r in allocation.devices.results
        )
    assert len(held(world)) == len(set(held(world))) == 8
    # admitted on the model its devices are, and charged against the queue's quota
    (workload,) = world.store.list("Workload", namespace="ml").items
    assert workload.status.admission is not None
    assert workload.status.admission.usage == {"H100-80GB": 8000}
    world.runtime.run_for(900)
    assert world.get("TrainingJob", "ft", "ml").status.phase == "Succeeded"
    assert claims(world) == {}, "a claim made from a template goes with its pod"


def test_dra_claims_count_against_quota_and_pend_without_their_template(world: World) -> None:
    world.apply(FLEET)
    world.apply(job("big", 4))  # 16 GPUs > quota 12
    world.apply(job("orphan", 1, claim="resourceClaimTemplateName: missing"))
    world.runtime.run_for(60)
    assert pods(world, "big") == [] and pods(world, "orphan") == []
    workloads = {w.spec.owner.name: w for w in world.store.list("Workload", namespace="ml")}
    big = workloads["big"].status.pending_reason
    assert big is not None and big.type == "QuotaExceeded", big
    orphan = workloads["orphan"].status.pending_reason
    assert orphan is not None and orphan.type == "ClaimsNotReady" and "missing" in orphan.message
    world.apply(FLEET.split("---")[-1].replace("four-gpus", "missing"))
    world.runtime.run_for(60)
    assert len(pods(world, "orphan")) == 1 and "job-orphan-worker-gpus-0" in claims(world)


def test_dra_shared_claim_is_allocated_once_and_reserved_for_each_pod(world: World) -> None:
    world.apply(FLEET)
    world.apply(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-pair, namespace: ml}
spec:
  devices:
    requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""
    )
    world.apply(job("pair", 2, duration=600, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(60)
    running = pods(world, "pair")
    assert len(running) == 2 and len({p.spec.node_name for p in running}) == 1
    shared = claims(world)["shared-pair"]
    assert shared.status.allocation is not None and len(shared.status.allocation.devices.results) == 2
    assert sorted(r.uid for r in shared.status.reserved_for) == sorted(p.metadata.uid for p in running)
    world.runtime.run_for(900)
    after = claims(world)["shared-pair"]
    assert after.status.reserved_for == [] and after.status.allocation is None, "deallocated when unreserved"
    assert DELETE_PROTECTION not in after.metadata.finalizers


def test_dra_a_claim_in_use_is_deleted_only_when_its_pods_are_done(world: World) -> None:
    world.apply(FLEET)
    world.apply(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-pair, namespace: ml}
spec:
  devices:
    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}]
"""
    )
    world.apply(job("pair", 2, duration=600, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(60)
    assert DELETE_PROTECTION in claims(world)["shared-pair"].metadata.finalizers
    world.store.delete(ResourceClaim, "shared-pair", "ml")  # held by the protection while in use
    world.apply(job("late", 1, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(60)
    held_back = claims(world)["shared-pair"]
    assert held_back.metadata.deletion_timestamp is not None and held_back.status.allocation is not None
    assert len([p for p in pods(world, "pair") if not p.terminated]) == 2
    late = next(w for w in world.store.list("Workload", namespace="ml") if w.spec.owner.name == "late")
    assert late.status.pending_reason is not None and "is being deleted" in late.status.pending_reason.message
    world.runtime.run_for(900)  # the pair finishes: the claim is deallocated and its delete completes
    assert "shared-pair" not in claims(world) and pods(world, "late") == []


def test_dra_devices_held_by_claims_survive_a_restart(tmp_path: Path) -> None:
    world = make_world(tmp_path / "state.db")
    world.apply(FLEET.replace("nominal: 12", "nominal: 16"))
    world.apply(job("first", 2))
    world.runtime.run_for(60)
    before = {c.name: c.status.allocation for c in claims(world).values()}
    assert len(before) == 2
    world.store.close()
    # a new control plane over the same store: the devices the claims hold stay theirs
    again = make_world(tmp_path / "state.db", clock=world.clock)
    again.apply(job("second", 2))
    again.runtime.run_for(60)
    assert {
        c.name: c.status.allocation for c in claims(again).values() if c.name.startswith("job-first")
    } == before
    assert len(pods(again, "second")) == 2
    assert len(held(again)) == len(set(held(again))) == 16
    again.store.close()


def test_dra_preemption_releases_the_victims_claims_for_the_preemptor(world: World) -> None:
    world.apply(FLEET.replace("nominal: 12", "nominal: 16").replace("count: 4", "count: 8"))
    world.apply(job("low", 2).replace("queue: team", "queue: team\n  priorityClass: research"))
    world.runtime.run_for(60)
    assert len(pods(world, "low")) == 2 and len(held(world)) == 16
    world.apply(job("high", 1).replace("queue: team", "queue: team\n  priorityClass: production-training"))
    world.runtime.run_for(60)
    (winner,) = pods(world, "high")
    assert not [p for p in pods(world, "low") if not p.terminated]
    made = claims(world)
    assert not [name for name in made if name.startswith("job-low")], "the victims' claims went with them"
    claim = made["job-high-worker-gpus-0"]
    assert claim.status.allocation is not None and len(claim.status.allocation.devices.results) == 8
    assert [r.uid for r in claim.status.reserved_for] == [winner.metadata.uid]
    assert len(held(world)) == len(set(held(world))) == 8


def test_dra_inference_replicas_take_claims_from_their_template(world: World) -> None:
    world.apply(FLEET)
    world.apply(
        """
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: chat, namespace: ml}
spec:
  queue: team
  replicas: {min: 2, max: 2}
  replica:
    template:
      spec:
        resourceClaims: [{name: gpus, resourceClaimTemplateName: four-gpus}]
"""
    )
    world.runtime.run_for(120)
    replicas = [p for p in world.store.list(Pod, namespace="ml") if p.spec.owner.name == "chat"]
    assert len(replicas) == 2
    for pod in replicas:
        (entry,) = pod.spec.resource_claims
        claim = claims(world)[entry.resource_claim_name]
        assert claim.status.allocation is not None and len(pod.spec.gpus) == 4
        assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
    assert len(held(world)) == len(set(held(world))) == 8


MIG = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: mig}
spec: {gpuModel: A100-40GB, gpusPerNode: 1, nodes: 1, dra: true, sharing: {mig: {"*": [3g.20gb, 3g.20gb]}}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: mig.nvidia.com}
spec:
  selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].type == "mig"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: half, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: mig
          exactly:
            deviceClassName: mig.nvidia.com
            selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].profile == "3g.20gb"'}}]
---
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: svc, namespace: ml}
spec:
  replicas: {min: 3, max: 3}
  replica:
    template:
      spec:
        resourceClaims: [{name: mig, resourceClaimTemplateName: half}]
"""


def test_dra_mig_partitions_of_one_gpu_are_shared_by_two_pods(world: World) -> None:
    world.apply(MIG)
    world.runtime.run_for(120)
    placed = [p for p in world.store.list(Pod, namespace="ml") if p.spec.mig is not None]
    assert len(placed) == 2, "a 40GB A100 holds two 3g.20gb partitions, not three"
    devices = {}
    for pod in placed:
        (entry,) = pod.spec.resource_claims
        allocation = claims(world)[entry.resource_claim_name].status.allocation
        assert allocation is not None
        (result,) = allocation.devices.results
        devices[pod.name] = result.device
        # the pod's MIG instance is the partition its claim got: gpu-0-mig-<profile>-<start>-<slices>
        assert pod.spec.mig is not None and result.device.split("-")[4] == str(pod.spec.mig.start)
    assert len(set(devices.values())) == 2 and all(d.startswith("gpu-0-mig-") for d in devices.values())
    waiting = [w for w in world.store.list("Workload", namespace="ml") if w.status.phase == "Pending"]
    assert len(waiting) == 1


def test_dra_claims_the_scheduler_cannot_count_pend_as_invalid(world: World) -> None:
    world.apply(FLEET)
    a100 = "apiVersion: gpufleet.io/v1alpha1\nkind: GPUPool\nmetadata: {name: a100}\n"
    world.apply(a100 + "spec: {gpuModel: A100-40GB, gpusPerNode: 8, nodes: 1, dra: true}")
    product = 'device.attributes["gpu.nvidia.com"].productName == '
    world.apply(
        f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: two-models, namespace: ml}}
spec:
  spec:
    devices:
      requests:
        - name: h100
          exactly:
            deviceClassName: gpu.nvidia.com
            selectors: [{{cel: {{expression: '{product}"NVIDIA H100 80GB HBM3"'}}}}]
        - name: a100
          exactly:
            deviceClassName: gpu.nvidia.com
            selectors: [{{cel: {{expression: '{product}"NVIDIA A100-SXM4-40GB"'}}}}]
"""
    )
    world.runtime.run_for(30)  # the slices are published: the models each request can get are known
    world.apply(job("mixed", 1, claim="resourceClaimTemplateName: two-models"))
    world.runtime.run_for(30)
    (workload,) = world.store.list("Workload", namespace="ml").items
    reason = workload.status.pending_reason
    assert reason is not None and reason.type == "InvalidClaims", reason
    assert "no one GPU model" in reason.message and pods(world, "mixed") == []
