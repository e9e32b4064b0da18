"""`gpufleet bench federation --failover` at a smoke size: a worker cluster cut off with its running
TrainingJobs, on the twin with the real manager, dispatcher and worker agents. The work runs again in
the other clusters well within 60 s of the lost cluster's lease expiring, never in two clusters at
once, and loses at most one checkpoint interval when checkpoints go to a shared bucket."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpufleet.cli import fedbench_failover
from gpufleet.cli.main import app
from gpufleet.federation.worker import LeaseState


def test_a_lost_clusters_jobs_run_again_elsewhere_once_and_lose_under_an_interval() -> None:
    result = CliRunner().invoke(
        app, ["bench", "federation", "--failover", "--workloads", "12", "--run-seconds", "100", "--json"]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["started_in_lost_cluster"] == 12 and figures["running_again_elsewhere"] == 12
    # the manager waits out lease + grace (10 s) before it moves anything, then the spares start it
    assert 10 <= figures["seconds_to_all_running_again"] <= 60
    assert figures["ran_in_two_clusters"] == 0 and figures["max_clusters_running_one_job"] == 1
    assert figures["lost_over_one_interval"] == 0 and 0 < figures["lost_work_max_s"] <= 300
    assert figures["target_recovery_met"] and figures["target_never_twice_met"]
    assert figures["target_lost_work_met"]


def test_checkpoints_kept_in_the_lost_cluster_lose_more_than_an_interval() -> None:
    """Without a shared bucket a job resumes from the last checkpoint the manager saw: one written
    while its cluster was cut off (before the lease lapsed) is lost with the cluster."""
    figures = fedbench_failover.run(workloads=12, run_seconds=100, bucket=False)
    assert figures["lost_over_one_interval"] > 0 and not figures["target_lost_work_met"]
    assert figures["ran_in_two_clusters"] == 0


def test_a_worker_that_never_fences_is_caught_running_jobs_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker that believes its lease always holds: it starts its work and never stops it.
    monkeypatch.setattr(LeaseState, "valid", lambda self, now: self.acknowledged_at is not None)
    figures = fedbench_failover.run(workloads=6, run_seconds=20, horizon_seconds=60)
    assert figures["ran_in_two_clusters"] > 0 and not figures["target_never_twice_met"]
