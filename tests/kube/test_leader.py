"""Leader election over a Lease: one leader, takeover after expiry, release, no double winners."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gpufleet.kube.leader import LeaderElector, LeaseConfig

from .fakeapi import FakeApiServer


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(api: FakeApiServer, clock: Clock, identity: str) -> LeaderElector:
    return LeaderElector(api, LeaseConfig("gpufleet-scheduler", "gpufleet-system", identity), clock=clock)


def test_first_candidate_creates_the_lease_and_the_second_waits(api: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew() and not b.is_leader and b.holder == "a"
    lease = api.get("/apis/coordination.k8s.io/v1/namespaces/gpufleet-system/leases/gpufleet-scheduler")
    assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 10
    assert lease["spec"]["renewTime"].endswith("Z") and "." in lease["spec"]["renewTime"]


def test_a_standby_takes_over_once_the_record_stops_changing_for_a_lease_duration(api: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.t += 5
    assert a.try_acquire_or_renew()  # renewing moves the record: b's observation restarts
    clock.t += 9
    assert not b.try_acquire_or_renew()  # b sees the renewal now: its 10 s start here
    clock.t += 8  # a has died: no renewal since, but b has watched an unchanged record for only 8 s
    assert not b.try_acquire_or_renew()
    clock.t += 3
    assert b.try_acquire_or_renew() and b.is_leader
    assert not a.is_leader  # a missed its renew deadline long ago
    assert not a.try_acquire_or_renew()
    lease = api.get("/apis/coordination.k8s.io/v1/namespaces/gpufleet-system/leases/gpufleet-scheduler")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


def test_release_lets_the_standby_start_at_once(api: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    a.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert b.try_acquire_or_renew()


def test_every_change_of_holder_counts_a_transition_and_renewing_does_not(api: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    path = "/apis/coordination.k8s.io/v1/namespaces/gpufleet-system/leases/gpufleet-scheduler"

    def transitions() -> int:
        return int(api.get(path)["spec"]["leaseTransitions"])

    assert a.try_acquire_or_renew() and transitions() == 0
    clock.t += 2
    assert a.try_acquire_or_renew() and transitions() == 0  # the same holder renewing
    a.release()  # a stops (SIGTERM): b takes over at once
    assert b.try_acquire_or_renew() and transitions() == 1
    clock.t += 2
    assert b.try_acquire_or_renew() and transitions() == 1
    b.release()
    assert a.try_acquire_or_renew() and transitions() == 2  # back to a, through a released Lease


def test_two_candidates_racing_on_one_version_cannot_both_win(api: FakeApiServer) -> None:
    clock = Clock()
    a, b, c = elector(api, clock, "a"), elector(api, clock, "b"), elector(api, clock, "c")
    a.try_acquire_or_renew()
    a.release()
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/gpufleet-system/leases/gpufleet-scheduler"
    stale = api.get(lease_path)
    assert b.try_acquire_or_renew()
    api.requests.clear()
    real_get = api.request

    def stale_get(method, path, **kw):  # c reads the Lease before b's write landed
        return stale if method == "GET" else real_get(method, path, **kw)

    api.request = stale_get  # type: ignore[method-assign]
    assert not c.try_acquire_or_renew()
    api.request = real_get  # type: ignore[method-assign]
    assert api.get(lease_path)["spec"]["holderIdentity"] == "b"


def test_config_must_order_its_periods() -> None:
    with pytest.raises(ValueError):
        LeaseConfig("l", "ns", "me", lease_duration=5, renew_deadline=6, retry_period=1)


class LeaseLooks:
    """One replica's view of the API server, counting how often it read the Lease."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        self.looks = 0

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "GET" and "/leases/" in path:
            self.looks += 1
        return self.api.request(method, path, **kwargs)


def test_run_fails_over_between_two_replicas_in_real_time(api: FakeApiServer) -> None:
    config = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}
    leading: list[str] = []
    views = {"a": LeaseLooks(api), "b": LeaseLooks(api)}

    def replica(name: str, stop: threading.Event) -> threading.Thread:
        el = LeaderElector(views[name], LeaseConfig("l", "ns", name, **config))  # type: ignore[arg-type]

        def work(lost: threading.Event) -> None:
            leading.append(name)
            lost.wait()

        thread = threading.Thread(target=el.run, args=(stop,), kwargs={"on_started": work}, daemon=True)
        thread.start()
        return thread

    stop_a, stop_b = threading.Event(), threading.Event()
    replica("a", stop_a)
    deadline = time.monotonic() + 3
    while not leading and time.monotonic() < deadline:
        time.sleep(0.01)
    replica("b", stop_b)
    deadline = time.monotonic() + 5
    while views["b"].looks < 3 and time.monotonic() < deadline:  # b found a's Lease live, three times
        time.sleep(0.01)
    assert views["b"].looks >= 3 and leading == ["a"]
    stop_a.set()  # a shuts down and releases: b leads within a retry period or two
    deadline = time.monotonic() + 3
    while len(leading) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop_b.set()
    assert leading == ["a", "b"]
