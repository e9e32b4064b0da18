"""Smoke size of `gpufleet bench admission`: it runs, admits, preempts and reports its keys."""

from __future__ import annotations

from gpufleet.sim.admission import run


def test_admission_benchmark_smoke() -> None:
    result = run(queues=8, workloads=400, nodes=40, arrivals=20).to_dict()
    assert {"queues", "workloads", "decisions_per_s", "p99_preemption_ms"} <= set(result)
    assert result["queues"] == 8 and result["workloads"] == 400
    assert 0 < result["admitted"] < 400  # arrivals exceed capacity
    assert result["preemption_cycles"] > 0
