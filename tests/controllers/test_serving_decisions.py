"""The InferenceService decisions both worlds share: how many replicas, which to add and remove in a
rollout, what status and Events say."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from gpufleet.api.inference import InferenceServiceSpec, InferenceServiceStatus
from gpufleet.api.meta import PendingReason
from gpufleet.api.runtime import ServiceLoadSpec
from gpufleet.controllers import servicestate
from gpufleet.controllers.servicestate import Autoscaler, ServiceObserved
from gpufleet.controllers.serving import AutoscalerConfig, LoadSample

T0 = 1_900_000_000.0
CONFIG = AutoscalerConfig(stabilization_seconds=300)


def spec(low: int = 1, high: int = 10, *, rps: float | None = 100.0, latency: float | None = None,
         version: str | None = None, surge: int = 1, unavailable: int = 0
         ) -> InferenceServiceSpec:  # fmt: skip
    return InferenceServiceSpec.model_validate(
        {
            "replicas": {"min": low, "max": high},
            "replica": {"gpus": 1},
            "modelVersion": version,
            "autoscaling": {"targetRequestsPerReplica": rps, "targetLatencyP99Ms": latency},
            "rollout": {"maxSurge": surge, "maxUnavailable": unavailable},
        }
    )


def sample(t: float, rps: float, p99: float = 10.0) -> LoadSample:
    return LoadSample(t, rps, p99)


@pytest.mark.parametrize(
    ("low", "high", "rps", "expected"),
    [
        (1, 10, 350.0, 4),  # 350 req/s at 100 per replica
        (1, 10, 5000.0, 10),  # capped at max
        (2, 10, 0.0, 2),  # never below min
        (3, 3, 1000.0, 3),
    ],
)
def test_the_autoscaler_follows_load_within_min_and_max(
    low: int, high: int, rps: float, expected: int
) -> None:
    scaler = Autoscaler(CONFIG)
    got = scaler.desired("s", spec(low, high), current=0, ready=0, load=sample(T0, rps), kept=None, now=T0)
    assert got.replicas == expected


def test_without_targets_the_service_runs_its_minimum_and_keeps_nothing() -> None:
    scaler = Autoscaler(CONFIG)
    got = scaler.desired(
        "s", spec(3, 8, rps=None), current=5, ready=5, load=sample(T0, 900.0), kept=None, now=T0
    )
    assert (got.replicas, got.kept) == (3, None)


def test_latency_above_target_adds_one_replica_over_those_ready() -> None:
    scaler = Autoscaler(CONFIG)
    slow = sample(T0, 0.0, p99=450.0)
    got = scaler.desired("s", spec(rps=None, latency=200.0), current=3, ready=3, load=slow, kept=None, now=T0)
    assert got.replicas == 4


def test_scaling_down_waits_out_the_stabilization_window_and_scaling_up_does_not() -> None:
    scaler = Autoscaler(CONFIG)
    s = spec()
    current = scaler.desired("s", s, current=0, ready=0, load=sample(T0, 800.0), kept=None, now=T0).replicas
    assert current == 8
    steps = [(60, 200.0, 8), (200, 200.0, 8), (301, 200.0, 2), (320, 900.0, 9)]
    for dt, rps, expected in steps:
        got = scaler.desired("s", s, current=current, ready=current, load=sample(T0 + dt, rps), kept=None,
                             now=T0 + dt)  # fmt: skip
        assert got.replicas == expected, dt
        current = got.replicas


def test_one_observation_is_used_once() -> None:
    scaler = Autoscaler(CONFIG)
    s = spec()
    first = scaler.desired("s", s, current=0, ready=0, load=sample(T0, 400.0), kept=None, now=T0)
    again = scaler.desired("s", s, current=4, ready=4, load=sample(T0, 400.0), kept=None, now=T0 + 30)
    assert first.kept is not None and first.replicas == 4
    assert again.kept is None and again.replicas == 4  # nothing new: nothing to save, count kept


def test_a_restarted_autoscaler_keeps_the_window_it_saved() -> None:
    s = spec()
    before = Autoscaler(CONFIG)
    saved = before.desired("s", s, current=0, ready=0, load=sample(T0, 800.0), kept=None, now=T0).kept
    assert saved is not None and [r.replicas for r in saved.recent] == [8]
    after = Autoscaler(CONFIG)  # a new controller: only the ServiceLoad's status is left
    got = after.desired("s", s, current=8, ready=8, load=sample(T0 + 60, 100.0), kept=saved, now=T0 + 60)
    assert got.replicas == 8  # the 8 recommended a minute ago still holds the count up
    fresh = Autoscaler(CONFIG).desired("s", s, current=8, ready=8, load=sample(T0 + 60, 100.0), kept=None,
                                       now=T0 + 60)  # fmt: skip
    assert fresh.replicas == 1  # what forgetting the window would do


def test_a_restarted_autoscaler_does_not_use_the_observation_it_already_used_again() -> None:
    s = spec(1, 10, rps=None, latency=200.0)
    slow = sample(T0, 0.0, p99=450.0)  # above the latency target: one replica over those ready
    first = Autoscaler(CONFIG).desired("s", s, current=3, ready=3, load=slow, kept=None, now=T0)
    assert first.replicas == 4 and first.kept is not None
    assert first.kept.last_sample_time == datetime.fromtimestamp(T0, UTC)
    restarted = Autoscaler(CONFIG)  # the 4th replica is ready now; no new observation came
    again = restarted.desired("s", s, current=4, ready=4, load=slow, kept=first.kept, now=T0 + 30)
    assert (again.replicas, again.kept) == (4, None)
    newer = restarted.desired("s", s, current=4, ready=4, load=sample(T0 + 60, 0.0, p99=450.0),
                              kept=first.kept, now=T0 + 60)  # fmt: skip
    assert newer.replicas == 5  # a new observation is used


def test_a_lowered_max_bounds_the_count_at_once_whatever_the_window_holds() -> None:
    scaler = Autoscaler(CONFIG)
    first = scaler.desired("s", spec(1, 10), current=0, ready=0, load=sample(T0, 1000.0), kept=None, now=T0)
    assert first.replicas == 10
    lowered = scaler.desired("s", spec(1, 5), current=10, ready=10, load=sample(T0 + 60, 1000.0),
                             kept=None, now=T0 + 60)  # fmt: skip
    assert lowered.replicas == 5  # the 10 in the window was recommended under the old max


def test_a_service_load_is_read_as_the_observation_it_records() -> None:
    when = datetime(2030, 3, 17, 12, 0, tzinfo=UTC)
    load = ServiceLoadSpec(requests_per_second=120.0, p99_latency_ms=80.0, ready_replicas=2, time=when)
    assert servicestate.load_sample(load) == LoadSample(when.timestamp(), 120.0, 80.0)


@dataclass
class Replica:
    revision: str
    index: int
    placed: bool = True
    ready: bool = True


def names(replicas: list[Replica]) -> list[str]:
    return [f"{r.revision}-{r.index}" for r in replicas]


def r(revision: str, index: int, *, ready: bool = True) -> Replica:
    return Replica(revision, index, ready=ready)


@pytest.mark.parametrize(
    ("case", "version", "replicas", "desired", "exists", "create", "remove", "rolling", "target"),
    [
        ("scale up", "v1", [r("v1", 0)], 3, True, 2, [], False, "v1"),
        ("scale down: unready first, then newest", "v1",
         [r("v1", 0), r("v1", 1), r("v1", 2, ready=False), r("v1", 3)], 2, True, 0, ["v1-2", "v1-3"], False,
         "v1"),
        ("a rollout starts within the surge", "v2", [r("v1", 0), r("v1", 1)], 2, True, 1, [], True, "v2"),
        ("an old one goes once a new one is ready", "v2",
         [r("v1", 0), r("v1", 1), r("v2", 2)], 2, True, 0, ["v1-1"], True, "v2"),
        ("a ready old one stays while the new one is not ready", "v2",
         [r("v1", 0), r("v1", 1), r("v2", 2, ready=False)], 2, True, 0, [], True, "v2"),
        ("unready old ones may always go", "v2",
         [r("v1", 0, ready=False), r("v2", 1, ready=False)], 1, True, 0, ["v1-0"], False, "v2"),
        ("a missing version is not rolled out to", "v2",
         [r("v1", 0), r("v1", 1)], 2, False, 0, [], False, "v1"),
    ],
)  # fmt: skip
def test_a_rollout_step_adds_and_removes_within_surge_and_unavailability(
    case: str,
    version: str,
    replicas: list[Replica],
    desired: int,
    exists: bool,
    create: int,
    remove: list[str],
    rolling: bool,
    target: str,
) -> None:
    step = servicestate.rollout_step(spec(version=version), replicas, desired=desired, exists=exists)
    assert (step.target, step.create, names(step.remove), step.rolling) == (
        target,
        create,
        remove,
        rolling,
    ), case
    assert step.first_index == max(x.index for x in replicas) + 1
    assert step.missing == (None if exists else version)
    assert len(step.kept) == len(replicas) - len(remove)


def test_new_replicas_do_not_reuse_the_index_of_one_still_going_away() -> None:
    step = servicestate.rollout_step(spec(), [Replica("none", 0)], desired=2, exists=True, taken=[0, 5])
    assert (step.target, step.create, step.first_index) == ("none", 1, 6)


def observed(ready: int, desired: int = 3, *, missing: str | None = None, rolling: bool = False,
             pending: PendingReason | None = None) -> ServiceObserved:  # fmt: skip
    return ServiceObserved(
        generation=4, minimum=2, desired=desired, ready=ready, target="v2", missing=missing, rolling=rolling,
        pending=pending,
    )  # fmt: skip


NOW = datetime(2030, 3, 17, 12, 0, tzinfo=UTC)
NOFIT = PendingReason(type="NoFit", message="no node has 1 free GPU")


@pytest.mark.parametrize(
    ("obs", "phase", "ready_condition", "rolled_out", "pending"),
    [
        (observed(0, pending=NOFIT), "Pending", ("False", "ReplicasNotReady"), ("True", "Complete"), NOFIT),
        (observed(1, pending=NOFIT), "Running", ("False", "ReplicasNotReady"), ("True", "Complete"), None),
        (observed(2, rolling=True), "Running", ("True", "MinimumReplicasReady"), ("False", "RollingOut"),
         None),
        (observed(3, missing="v3"), "Running", ("True", "MinimumReplicasReady"),
         ("False", "ModelVersionNotFound"), None),
    ],
)  # fmt: skip
def test_status_says_how_many_are_ready_and_how_far_the_rollout_is(
    obs: ServiceObserved,
    phase: str,
    ready_condition: tuple[str, str],
    rolled_out: tuple[str, str],
    pending: PendingReason | None,
) -> None:
    status = servicestate.service_status(InferenceServiceStatus(), obs, now=NOW)
    conditions = {c.type: (c.status, c.reason) for c in status.conditions}
    assert status.phase == phase and status.pending_reason == pending
    assert conditions == {"Ready": ready_condition, "RolledOut": rolled_out}
    assert (status.desired_replicas, status.ready_replicas, status.observed_generation) == (3, obs.ready, 4)


def test_a_new_desired_count_is_announced_once() -> None:
    old = InferenceServiceStatus(desired_replicas=2)
    new = servicestate.service_status(old, observed(2, desired=5), now=NOW)
    assert [(n.reason, n.message) for n in servicestate.service_events(old, new)] == [
        ("Scaled", "desired replicas 2 -> 5")
    ]
    assert (
        servicestate.service_events(new, servicestate.service_status(new, observed(3, desired=5), now=NOW))
        == []
    )
