"""The report's per-pool and per-queue figures: idle GPU-hours and cost at each pool's own price, and
queue lengths per queue."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_simulate_smoke import check_invariants, synthetic_trace

from gpufleet.sim import jobfleet, jobreport, jobsim, philly

TWO_POOLS = """\
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: cheap}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, pricePerGPUHour: 1.0, topology: {block: b1, racks: 1}}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: dear}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, pricePerGPUHour: 5.0, topology: {block: b2, racks: 1}}
"""


def test_idle_and_cost_are_priced_per_pool_and_queue_lengths_kept_per_queue(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(TWO_POOLS, encoding="utf-8")
    pools = jobfleet.load_pools(fleet)
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", 60))
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    result = jobsim.simulate(trace, pools, queues, days=0.5)
    check_invariants(result)
    summary = jobreport.summarise(result)
    rows = {row[0]: row for row in jobreport.pool_rows(result)}
    assert set(rows) == {"cheap", "dear"}
    for _, gpus, price, held, idle, cost in rows.values():
        assert held > 0  # the placement used both pools
        assert held + idle == pytest.approx(gpus * summary.span_hours)
        assert cost == pytest.approx(idle * price)
    assert summary.idle_cost == pytest.approx(rows["cheap"][5] + rows["dear"][5])
    assert summary.idle_gpu_hours == pytest.approx(rows["cheap"][4] + rows["dear"][4])
    # Each queue's cost is its GPU-hours at the prices of the pools they were in: between the two prices.
    shares = jobreport.queue_shares(result)
    assert sum(jobreport.queue_cost(result, name) for name, *_ in shares) == pytest.approx(
        rows["cheap"][3] * 1.0 + rows["dear"][3] * 5.0
    )
    for name, _, _, _, _, held in shares:
        assert held * 1.0 - 1e-6 <= jobreport.queue_cost(result, name) <= held * 5.0 + 1e-6
    # The queues' lengths add up to the total, bucket by bucket.
    n = jobreport.window_buckets(result)
    lengths = jobreport.queue_lengths(result)
    assert set(lengths) == {r.queue for r in result.jobs.values()}
    total = sum(result.series.means(f"pending:{q}", n) for q in lengths)
    assert np.allclose(total, result.series.means("pending", n))
    assert any(peak > 0 for _, peak in lengths.values())
    text = jobreport.markdown(result, "t", "c")
    assert "| cheap | 16 | $1.00 |" in text and "| dear | 16 | $5.00 |" in text
    assert "jobs waiting mean / peak hour" in text


def test_the_summary_writes_thousands_of_gpu_hours_as_the_tables_do(tmp_path: Path) -> None:
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", 20))
    pools = jobfleet.fleet_of_gpus(2048)
    result = jobsim.simulate(trace, pools, jobfleet.trace_queues(trace.gpu_demand(), pools), days=0.5)
    summary = jobreport.summarise(result)
    assert summary.idle_gpu_hours > 1000
    text = jobreport.markdown(result, "t", "c")
    assert f"| idle GPU-hours / their cost | {summary.idle_gpu_hours:,.1f} / $" in text
    assert f"{summary.idle_gpu_hours:,.1f}".count(",") == 1
