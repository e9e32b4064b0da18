"""The secondary scheduler against the in-memory API server: a ResourceClaim several pods name
(`resourceClaimName`) is charged to quota once, to the workload of the first pod that reserved it."""

from __future__ import annotations

from gpufleet.kube.scheduler import KubeScheduler

from .fakeapi import FakeApiServer
from .test_dra_scheduler import claim, claim_pod, publish, run, scheduler, stored
from .test_scheduler import bound

PODS = "/api/v1/namespaces/team-a/pods"


def usage(sched: KubeScheduler, name: str) -> dict[str, int]:
    cache = sched.kcache.cache
    assert cache is not None and f"team-a/{name}" in cache.admitted, f"{name} is not admitted"
    return dict(cache.admitted[f"team-a/{name}"].assignment.usage)


def test_dra_shared_claim_is_charged_once_and_pods_over_quota_pend(api: FakeApiServer) -> None:
    sched = scheduler(api, gpus=8)
    publish(api, "dra-1", "dra-2")
    claim(api, "shared", 2)
    for i, name in enumerate(("s0", "s1")):  # pending together: both carry the charge until one runs
        api.put(PODS, claim_pod(name, shared="shared", created=f"2026-11-29T11:00:0{i}Z"))
    run(sched)
    run(sched)
    assert set(bound(api)) == {"s0", "s1"}
    assert sorted([usage(sched, "s0"), usage(sched, "s1")], key=len) == [{}, {"H100-80GB": 2000}]
    # 8 GPUs of a pod's own claim fit the free devices (14) but not the quota left (8 - 2)
    claim(api, "big-gpu", 8)
    api.put(PODS, claim_pod("big", made="big-gpu", created="2026-11-29T11:00:09Z"))
    result = run(sched)
    assert "big" not in bound(api)
    assert result is not None and result.pending["team-a/big"].reason.type == "QuotaExceeded"


def test_dra_shared_claim_charge_follows_reserved_for_after_a_restart(api: FakeApiServer) -> None:
    first = scheduler(api, gpus=8)
    publish(api, "dra-1", "dra-2")
    claim(api, "shared", 2)
    api.put(PODS, claim_pod("s0", shared="shared"))
    run(first)
    api.put(PODS, claim_pod("s1", shared="shared", created="2026-11-29T11:00:05Z"))
    run(first)
    assert set(bound(api)) == {"s0", "s1"} and usage(first, "s0") == {"H100-80GB": 2000}
    reserved = [r["name"] for r in stored(api, "shared")["status"]["reservedFor"]]
    assert reserved == ["s0", "s1"]
    second = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    claim(api, "big-gpu", 8)
    api.put(PODS, claim_pod("big", made="big-gpu", created="2026-11-29T11:00:09Z"))
    result = run(second)
    assert usage(second, "s0") == {"H100-80GB": 2000} and usage(second, "s1") == {}
    assert result is not None and result.pending["team-a/big"].reason.type == "QuotaExceeded"
    # the first pod goes: its reservation and charge go with it; the claim stays held by s1
    api.request("DELETE", "/api/v1/namespaces/team-a/pods/s0", body={"gracePeriodSeconds": 0})
    run(second)
    assert [r["name"] for r in stored(api, "shared")["status"]["reservedFor"]] == ["s1"]
