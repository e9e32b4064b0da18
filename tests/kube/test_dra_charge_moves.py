"""The secondary scheduler against the in-memory API server: when the workload charged for a shared
ResourceClaim goes while other pods still use the claim, its charge moves to the next user."""

from __future__ import annotations

from .fakeapi import FakeApiServer
from .test_dra_scheduler import claim, claim_pod, publish, run, scheduler, stored
from .test_dra_shared_charge import PODS, usage
from .test_scheduler import bound


def test_dra_the_charge_of_a_shared_claim_moves_to_the_next_user_when_its_payer_goes(
    api: FakeApiServer,
) -> None:
    sched = scheduler(api, gpus=8)
    publish(api, "dra-1", "dra-2")
    claim(api, "shared", 2)
    for i, name in enumerate(("s0", "s1", "s2")):
        api.put(PODS, claim_pod(name, shared="shared", created=f"2026-11-29T11:00:0{i}Z"))
        run(sched)
    assert set(bound(api)) == {"s0", "s1", "s2"}
    assert usage(sched, "s0") == {"H100-80GB": 2000}
    assert usage(sched, "s1") == usage(sched, "s2") == {}
    api.request("DELETE", f"{PODS}/s0", body={"gracePeriodSeconds": 0})
    run(sched)
    assert [r["name"] for r in stored(api, "shared")["status"]["reservedFor"]] == ["s1", "s2"]
    assert usage(sched, "s1") == {"H100-80GB": 2000}, "the next to reserve it pays now"
    assert usage(sched, "s2") == {}
    # The queue still counts the claim: 8 of a pod's own claim do not fit the 6 left.
    claim(api, "big-gpu", 8)
    api.put(PODS, claim_pod("big", made="big-gpu", created="2026-11-29T11:00:09Z"))
    result = run(sched)
    assert "big" not in bound(api)
    assert result is not None and result.pending["team-a/big"].reason.type == "QuotaExceeded"
    # Every user gone: the claim is released, and so is its charge.
    for name in ("s1", "s2"):
        api.request("DELETE", f"{PODS}/{name}", body={"gracePeriodSeconds": 0})
    run(sched)
    run(sched)
    assert "big" in bound(api), "the released claim's charge went with it"
