"""The TrainingJob decisions both worlds share: which phase follows, when a job gives up, what the
status and events say, which checkpoint a restart resumes from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.api import ObjectMeta
from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec
from gpufleet.api.meta import Condition, PendingReason
from gpufleet.api.training import TrainingJobStatus
from gpufleet.controllers import jobstate
from gpufleet.controllers.jobstate import Disruption, Observed, Workers

NOW = datetime(2030, 3, 17, 12, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=5)


def workers(expected: int = 4, *, placed: int | None = None, running: int = 0, succeeded: int = 0,
            admitted: bool = True) -> Workers:  # fmt: skip
    return Workers(
        expected=expected,
        placed=expected if placed is None else placed,
        running=running,
        succeeded=succeeded,
        admitted=admitted,
    )


def observed(w: Workers, **extra: object) -> Observed:
    fields: dict[str, object] = {
        "generation": 2,
        "checkpoint": None,
        "workers": w,
        "disruptions": 0,
        "last_disruption": None,
        "gave_up": False,
    }
    fields.update(extra)
    return Observed(**fields)  # type: ignore[arg-type]


def checkpoint(name: str, step: int, minute: int | None, phase: str = "Complete") -> Checkpoint:
    ckpt = Checkpoint(
        metadata=ObjectMeta(name=name, namespace="team-a"),
        spec=CheckpointSpec(
            job="llm",
            step=step,
            uri=f"s3://ckpt/llm/{step}",
            time=None if minute is None else datetime(2030, 3, 17, 11, minute, tzinfo=UTC),
        ),
    )
    return ckpt.model_copy(update={"status": ckpt.status.model_copy(update={"phase": phase})})


def condition(status: TrainingJobStatus, kind: str) -> tuple[str, str | None] | None:
    found = next((c for c in status.conditions if c.type == kind), None)
    return None if found is None else (found.status, found.reason)


@pytest.mark.parametrize(
    ("w", "phase"),
    [
        (workers(admitted=False, expected=0), "Pending"),
        (workers(running=2), "Admitted"),  # capacity held, not every worker runs yet
        (workers(running=4), "Running"),
        (workers(running=3, succeeded=1), "Running"),  # ranks finish one by one: still running
        (workers(running=2, succeeded=1), "Admitted"),  # one worker neither runs nor finished
        (workers(succeeded=4), "Succeeded"),
        (workers(expected=0, admitted=False, succeeded=1), "Succeeded"),  # capacity already returned
        (workers(expected=0, admitted=True), "Admitted"),  # no workers expected: never Running
    ],
)
def test_the_phase_follows_the_current_attempts_workers(w: Workers, phase: str) -> None:
    assert jobstate.progress(w) == phase


@pytest.mark.parametrize(
    ("restarts", "max_restarts", "allowed"),
    [(0, 3, True), (2, 3, True), (3, 3, False), (0, 0, False), (50, None, True)],
)
def test_a_restart_is_allowed_while_restarts_are_below_the_limit(
    restarts: int, max_restarts: int | None, allowed: bool
) -> None:
    assert jobstate.restart_allowed(restarts=restarts, max_restarts=max_restarts) is allowed


def test_a_restart_resumes_from_the_newest_complete_checkpoint() -> None:
    checkpoints = [
        checkpoint("a", 100, 10),
        checkpoint("b", 200, 20),
        checkpoint("c", 300, 30, phase="Writing"),  # not complete: not resumable
        checkpoint("d", 50, None),  # no time: older than any timed one
    ]
    other = checkpoint("x", 900, 50).model_copy(
        update={"spec": CheckpointSpec(job="other", step=900, uri="s3://x")}
    )
    best = jobstate.latest_checkpoint([*checkpoints, other], "llm")
    assert best is not None and best.spec.uri == "s3://ckpt/llm/200"
    assert jobstate.latest_checkpoint([checkpoint("c", 300, 30, phase="Writing")], "llm") is None


def test_a_running_job_reports_its_workers_checkpoint_and_conditions() -> None:
    status = jobstate.job_status(
        TrainingJobStatus(),
        observed(workers(running=4), checkpoint=checkpoint("b", 200, 20), admitted_time=EARLIER),
        now=NOW,
    )
    assert (status.phase, status.replicas, status.ready_replicas) == ("Running", 4, 4)
    assert status.observed_generation == 2
    assert status.last_checkpoint is not None and status.last_checkpoint.uri == "s3://ckpt/llm/200"
    assert status.admitted_time == EARLIER and status.start_time == NOW
    assert condition(status, "Admitted") == ("True", "Admitted")
    assert condition(status, "Running") == ("True", "AllWorkersRunning")
    assert status.pending_reason is None


def test_a_waiting_job_says_why_or_leaves_the_reason_to_its_writer() -> None:
    reason = PendingReason(type="QuotaExceeded", message="team-a is at its quota")
    waiting = jobstate.job_status(
        TrainingJobStatus(), observed(workers(admitted=False, expected=0), pending=reason), now=NOW
    )
    assert waiting.phase == "Pending" and waiting.pending_reason == reason
    assert condition(waiting, "Running") == ("False", "QuotaExceeded")
    before = TrainingJobStatus(pending_reason=reason)
    left = jobstate.job_status(before, observed(workers(admitted=False, expected=0)), now=NOW)
    assert left.pending_reason == reason and condition(left, "Running") is None


def test_a_disrupted_job_within_its_limit_counts_the_restart_and_waits_again() -> None:
    running = jobstate.job_status(TrainingJobStatus(), observed(workers(running=4)), now=EARLIER)
    backoff = PendingReason(type="Backoff", message="NodeLoss: node gpu-3 lost; requeued after 10s")
    status = jobstate.job_status(
        running,
        observed(
            workers(admitted=False, expected=0),
            disruptions=1,
            last_disruption=Disruption("NodeLoss", "node gpu-3 lost"),
            lost_gpu_seconds=1234.5678,
            pending=backoff,
        ),
        now=NOW,
    )
    assert (status.phase, status.restarts, status.lost_gpu_seconds) == ("Pending", 1, 1234.568)
    assert (status.replicas, status.ready_replicas) == (0, 0)
    assert condition(status, "Running") == ("False", "Backoff")


def test_a_job_out_of_restarts_fails_with_the_limit_and_the_last_disruption_as_reason() -> None:
    running = jobstate.job_status(TrainingJobStatus(), observed(workers(running=4)), now=EARLIER)
    status = jobstate.job_status(
        running,
        observed(
            workers(admitted=False, expected=0),
            disruptions=4,
            last_disruption=Disruption("llm-0-1 Evicted", "node drained"),
            gave_up=True,
        ),
        now=NOW,
    )
    assert status.phase == "Failed" and status.completion_time == NOW and status.restarts == 4
    failed = next(c for c in status.conditions if c.type == "Failed")
    assert failed.reason == "RestartLimitExceeded"
    assert failed.message is not None and "llm-0-1 Evicted: node drained" in failed.message
    assert condition(status, "Running") == ("False", "Failed")  # a failed job does not say it runs


def test_a_finished_job_keeps_its_outcome_but_never_says_it_runs() -> None:
    running = Condition(
        type="Running", status="True", reason="AllWorkersRunning", last_transition_time=EARLIER
    )
    done = TrainingJobStatus(phase="Succeeded", restarts=1, completion_time=EARLIER, conditions=[running])
    status = jobstate.job_status(
        done, observed(workers(admitted=False, expected=0), disruptions=5, gave_up=True), now=NOW
    )
    assert (status.phase, status.restarts, status.completion_time) == ("Succeeded", 1, EARLIER)
    assert condition(status, "Running") == ("False", "Completed")
    again = jobstate.job_status(status, observed(workers()), now=NOW + timedelta(minutes=1))
    assert again == status  # nothing moves any more (the generation is the same)


def test_all_workers_finishing_succeeds_the_job() -> None:
    running = jobstate.job_status(TrainingJobStatus(), observed(workers(running=4)), now=EARLIER)
    status = jobstate.job_status(running, observed(workers(succeeded=4)), now=NOW)
    assert status.phase == "Succeeded" and status.completion_time == NOW and status.ready_replicas == 0
    assert condition(status, "Succeeded") == ("True", "Completed")
    assert condition(status, "Running") == ("False", "Completed")


@pytest.mark.parametrize(
    ("old", "new", "why", "expected"),
    [
        (
            TrainingJobStatus(phase="Running"),
            TrainingJobStatus(phase="Pending", restarts=1, lost_gpu_seconds=12.5),
            Disruption("NodeLoss", "node gpu-3 lost"),
            [
                ("Restarting", "restart 1 from the start after NodeLoss: node gpu-3 lost; "
                 "12.5 GPU-seconds lost so far", "Warning"),
                ("Pending", "Running -> Pending", "Normal"),
            ],
        ),
        (
            TrainingJobStatus(phase="Pending", restarts=1),
            TrainingJobStatus(phase="Failed", restarts=2),
            Disruption("GpuFailure"),
            [("Failed", "Pending -> Failed", "Normal")],  # giving up is no restart
        ),
        (TrainingJobStatus(phase="Admitted"), TrainingJobStatus(phase="Admitted", ready_replicas=2),
         None, []),
        (  # admitted and started at one instant: seen Pending, then Running
            TrainingJobStatus(phase="Pending"),
            TrainingJobStatus(phase="Running"),
            None,
            [("Admitted", "Pending -> Admitted", "Normal"), ("Running", "Admitted -> Running", "Normal")],
        ),
        (
            TrainingJobStatus(phase="Admitted"),
            TrainingJobStatus(phase="Succeeded"),
            None,
            [("Running", "Admitted -> Running", "Normal"), ("Succeeded", "Running -> Succeeded", "Normal")],
        ),
        (  # a suspension is one step, not a walk along the chain
            TrainingJobStatus(phase="Running"),
            TrainingJobStatus(phase="Suspended"),
            None,
            [("Suspended", "Running -> Suspended", "Normal")],
        ),
    ],
)  # fmt: skip
def test_events_announce_restarts_and_new_phases(
    old: TrainingJobStatus,
    new: TrainingJobStatus,
    why: Disruption | None,
    expected: list[tuple[str, str, str]],
) -> None:
    events = jobstate.job_events(old, new, why=why)
    assert [(e.reason, e.message, e.type) for e in events] == expected


def test_a_restart_event_names_the_checkpoint_step_it_resumes_from() -> None:
    ref = jobstate.checkpoint_ref(checkpoint("b", 200, 20))
    new = TrainingJobStatus(phase="Pending", restarts=1, last_checkpoint=ref)
    (event, _) = jobstate.job_events(TrainingJobStatus(phase="Running"), new)
    assert event.message == "restart 1 from step 200"


def test_workers_are_counted_from_their_pods_phases() -> None:
    phases = ["Running", "Running", "Succeeded", "Pending", None, "Failed"]
    counted = Workers.of(phases, expected=6, placed=5, admitted=True)
    assert counted == Workers(expected=6, placed=5, running=2, succeeded=1, admitted=True)


def test_a_job_whose_workers_finish_one_by_one_stays_running_until_all_are_done() -> None:
    running = jobstate.job_status(TrainingJobStatus(), observed(workers(running=4)), now=EARLIER)
    finishing = jobstate.job_status(running, observed(workers(running=1, succeeded=3)), now=NOW)
    assert finishing.phase == "Running" and finishing.ready_replicas == 1
    assert condition(finishing, "Running") == ("True", "AllWorkersRunning")
    assert [e.message for e in jobstate.job_events(running, finishing)] == []  # no step backwards
    done = jobstate.job_status(finishing, observed(workers(succeeded=4)), now=NOW)
    assert [e.message for e in jobstate.job_events(finishing, done)] == ["Running -> Succeeded"]


def test_a_restarted_job_is_no_longer_admitted_until_its_new_attempt_is() -> None:
    running = jobstate.job_status(TrainingJobStatus(), observed(workers(running=4)), now=EARLIER)
    backoff = PendingReason(type="Backoff", message="llm-0-1 Error; requeued after 30s")
    waiting = jobstate.job_status(
        running, observed(workers(admitted=False, expected=0), disruptions=1, pending=backoff), now=NOW
    )
    assert waiting.phase == "Pending" and condition(waiting, "Admitted") == ("False", "Backoff")
    quota = PendingReason(type="QuotaExceeded", message="team-a is at its quota")
    queued = jobstate.job_status(
        waiting, observed(workers(admitted=False, expected=0), disruptions=1, pending=quota), now=NOW
    )
    assert condition(queued, "Admitted") == ("False", "QuotaExceeded")
    later = NOW + timedelta(minutes=1)
    again = jobstate.job_status(queued, observed(workers(running=2), disruptions=1), now=later)
    admitted = next(c for c in again.conditions if c.type == "Admitted")
    assert (admitted.status, admitted.last_transition_time) == ("True", later)


def test_a_job_never_admitted_gets_no_admitted_condition_while_it_waits() -> None:
    reason = PendingReason(type="QuotaExceeded", message="team-a is at its quota")
    waiting = jobstate.job_status(
        TrainingJobStatus(), observed(workers(admitted=False, expected=0), pending=reason), now=NOW
    )
    assert condition(waiting, "Admitted") is None


# ------------------------------------------------------------------------------ restarts
T = 1_900_000_000.0
NODE_LOST = Disruption("NodeLost", "node gpu-3 was lost", at=T)


@pytest.mark.parametrize(
    ("restarts", "last", "max_restarts", "backoff", "now", "expected"),
    [
        # Within the limit: the backoff counts from the disruption's recorded time.
        (1, NODE_LOST, 3, 30.0, T, ("Backoff", T + 30, "NodeLost: node gpu-3 was lost; requeued after 30s")),
        (
            1,
            NODE_LOST,
            3,
            30.0,
            T + 29.5,
            ("Backoff", T + 30, "NodeLost: node gpu-3 was lost; requeued after 30s"),
        ),
        (
            1,
            NODE_LOST,
            3,
            30.0,
            T + 30,
            ("Restart", T + 30, "NodeLost: node gpu-3 was lost; requeued after 30s"),
        ),
        # No backoff, or a disruption whose time the world no longer knows: at once.
        (2, NODE_LOST, 3, 0.0, T, ("Restart", T, "NodeLost: node gpu-3 was lost; requeued after 0s")),
        (1, Disruption("Restarting"), 3, 30.0, T + 5, ("Restart", T + 5, "Restarting; requeued after 30s")),
        # The last restart allowed, then one disruption more than maxRestarts allows.
        (3, NODE_LOST, 3, 30.0, T, ("Backoff", T + 30, "NodeLost: node gpu-3 was lost; requeued after 30s")),
        (
            4,
            NODE_LOST,
            3,
            30.0,
            T,
            (
                "GiveUp",
                None,
                "disrupted 4 times, more than maxRestarts allows; last: NodeLost: node gpu-3 was lost",
            ),
        ),
        (
            1,
            NODE_LOST,
            0,
            30.0,
            T,
            (
                "GiveUp",
                None,
                "disrupted 1 times, more than maxRestarts allows; last: NodeLost: node gpu-3 was lost",
            ),
        ),
        (
            50,
            NODE_LOST,
            None,
            30.0,
            T,
            ("Backoff", T + 30, "NodeLost: node gpu-3 was lost; requeued after 30s"),
        ),
        # Never disrupted: nothing to wait for.
        (0, None, 0, 30.0, T, ("Restart", T, "not disrupted")),
    ],
)
def test_the_restart_decision(
    restarts: int,
    last: Disruption | None,
    max_restarts: int | None,
    backoff: float,
    now: float,
    expected: tuple[str, float | None, str],
) -> None:
    decision = jobstate.restart_decision(
        restarts=restarts, last=last, max_restarts=max_restarts, backoff_seconds=backoff, now=now
    )
    assert (decision.verdict, decision.at, decision.reason) == expected
    assert decision.restarts == restarts


@pytest.mark.parametrize(
    ("phase", "deleted", "broken"),
    [
        ("Running", False, False),
        ("Pending", False, False),
        ("Succeeded", False, False),
        ("Failed", False, True),
        ("Running", True, True),  # evicted, drained, its node lost
        (None, True, True),  # deleted before it was ever started
        ("Failed", True, True),
        ("Succeeded", True, False),  # its work was done
    ],
)
def test_a_worker_ends_its_attempt_when_it_failed_or_was_deleted_unfinished(
    phase: str | None, deleted: bool, broken: bool
) -> None:
    assert jobstate.worker_broken(phase=phase, deleted=deleted) is broken
