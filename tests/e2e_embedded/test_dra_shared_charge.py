"""A ResourceClaim shared by several pods (`resourceClaimName`) is charged to quota once, in the
embedded world: to the workload of the first pod that reserved it, never to the pods that join it."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api.runtime import Workload

from .conftest import World, make_world
from .test_dra_claims import FLEET, claims, job, pods

SHARED = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-pair, namespace: ml}
spec:
  devices:
    requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""


def workloads(world: World) -> dict[str, Workload]:
    return {w.spec.owner.name: w for w in world.store.list(Workload, namespace="ml")}


def usage(world: World, job_name: str) -> dict[str, int]:
    admission = workloads(world)[job_name].status.admission
    assert admission is not None, f"{job_name} is not admitted"
    return dict(admission.usage)


def test_dra_shared_claim_is_charged_once_to_the_first_workload(world: World) -> None:
    world.apply(FLEET)  # quota 12 H100 GPUs
    world.apply(SHARED)
    world.apply(job("pair", 2, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(60)
    assert len(pods(world, "pair")) == 2
    assert usage(world, "pair") == {"H100-80GB": 2000}, "the claim's 2 GPUs, once, not per pod"
    world.apply(job("late", 1, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(60)
    assert len(pods(world, "late")) == 1
    assert usage(world, "late") == {}, "joining an allocated claim charges nothing more"
    # 3 pods x 4 GPUs fit the free devices (14 of 16) but not the quota left (12 - 2)
    world.apply(job("big", 3))
    world.runtime.run_for(60)
    assert pods(world, "big") == []
    reason = workloads(world)["big"].status.pending_reason
    assert reason is not None and reason.type == "QuotaExceeded", reason


def test_dra_shared_claim_over_quota_pends_and_releasing_it_frees_the_charge(world: World) -> None:
    world.apply(FLEET)
    world.apply(SHARED)
    world.apply(job("big", 3, duration=600))  # 12 of the 12 GPUs of quota
    world.runtime.run_for(60)
    world.apply(job("pair", 2, duration=600, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(60)
    assert pods(world, "pair") == []
    reason = workloads(world)["pair"].status.pending_reason
    assert reason is not None and reason.type == "QuotaExceeded", reason
    world.runtime.run_for(900)  # big finishes: pair runs, then finishes and releases the claim
    assert usage(world, "pair") == {"H100-80GB": 2000}
    world.runtime.run_for(900)
    assert claims(world)["shared-pair"].status.allocation is None
    world.apply(job("again", 3))
    world.runtime.run_for(60)
    assert len(pods(world, "again")) == 3, "the released claim's charge is gone with it"


def test_dra_shared_claim_charge_survives_a_restart(tmp_path: Path) -> None:
    world = make_world(tmp_path / "state.db")
    world.apply(FLEET)
    world.apply(SHARED)
    world.apply(job("pair", 2, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(60)
    assert usage(world, "pair") == {"H100-80GB": 2000}
    world.store.close()
    again = make_world(tmp_path / "state.db", clock=world.clock)
    again.apply(job("late", 1, claim="resourceClaimName: shared-pair"))
    again.apply(job("big", 3))
    again.runtime.run_for(60)
    assert len(pods(again, "late")) == 1 and usage(again, "late") == {}
    assert usage(again, "pair") == {"H100-80GB": 2000}
    reason = workloads(again)["big"].status.pending_reason
    assert reason is not None and reason.type == "QuotaExceeded", reason
    again.store.close()
