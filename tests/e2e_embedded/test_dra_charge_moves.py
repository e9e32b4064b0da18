"""A shared ResourceClaim's charge moves to the next user when the workload charged for it ends while
pods of other workloads still use it (embedded world), and the move survives a restart."""

from __future__ import annotations

from pathlib import Path

from .conftest import World, make_world
from .test_dra_claims import FLEET, claims, job, pods
from .test_dra_shared_charge import SHARED, usage, workloads


def start(world: World) -> None:
    world.apply(FLEET)  # quota 12 H100 GPUs
    world.apply(SHARED)  # 2 GPUs
    world.apply(job("first", 1, duration=300, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(30)
    world.apply(job("second", 1, duration=3600, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(30)
    world.apply(job("third", 1, duration=3600, claim="resourceClaimName: shared-pair"))
    world.runtime.run_for(30)
    assert usage(world, "first") == {"H100-80GB": 2000}
    assert usage(world, "second") == {} and usage(world, "third") == {}


def test_dra_the_charge_of_a_shared_claim_moves_to_the_next_user_when_its_payer_ends(world: World) -> None:
    start(world)
    world.runtime.run_for(400)  # first finishes; second and third still use the claim
    assert world.get("TrainingJob", "first", "ml").status.phase == "Succeeded"
    assert claims(world)["shared-pair"].status.allocation is not None
    assert usage(world, "second") == {"H100-80GB": 2000}, "the next to reserve it pays now"
    assert usage(world, "third") == {}
    # The queue counts it: 12 - 2 leaves 10, so 3 pods x 4 GPUs wait, 2 x 4 run.
    world.apply(job("big", 3))
    world.runtime.run_for(60)
    assert pods(world, "big") == []
    reason = workloads(world)["big"].status.pending_reason
    assert reason is not None and reason.type == "QuotaExceeded", reason


def test_dra_a_moved_charge_survives_a_restart(tmp_path: Path) -> None:
    world = make_world(tmp_path / "state.db")
    start(world)
    world.runtime.run_for(400)
    assert usage(world, "second") == {"H100-80GB": 2000}
    world.store.close()
    again = make_world(tmp_path / "state.db", clock=world.clock)
    again.apply(job("big", 3))
    again.runtime.run_for(60)
    assert usage(again, "second") == {"H100-80GB": 2000} and usage(again, "third") == {}
    reason = workloads(again)["big"].status.pending_reason
    assert reason is not None and reason.type == "QuotaExceeded", reason
    again.store.close()
