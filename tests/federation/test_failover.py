"""A worker cluster lost with 500 running workloads (the issue's failover target, on the federation's
logic): all run again elsewhere within 60 s of the lease expiring, none ever in two clusters, and no
workload loses more than one checkpoint interval of work."""

from __future__ import annotations

from gpufleet.federation.failover import simulate_cluster_loss


def test_a_lost_clusters_500_workloads_run_again_elsewhere_within_60_seconds() -> None:
    result = simulate_cluster_loss(workloads=500, spare_hosts=300, checkpoint_every=600)
    assert result.moved == 500 and result.ran_twice == 0
    assert result.seconds_to_recover is not None and result.seconds_to_recover <= 60
    # detected after lease + grace (5 s), dispatched, started at the spares' next ack and lease check
    assert result.seconds_to_recover >= 5
    assert 0 < result.max_lost_seconds < 600 and result.mean_lost_seconds < result.max_lost_seconds


def test_without_room_elsewhere_the_work_waits_and_still_never_runs_twice() -> None:
    result = simulate_cluster_loss(workloads=200, spare_hosts=50, horizon=1500)
    assert result.all_running_again_at is None and result.seconds_to_recover is None
    assert result.moved == 100, "the two spare clusters hold 100 single-host jobs"
    assert result.ran_twice == 0
