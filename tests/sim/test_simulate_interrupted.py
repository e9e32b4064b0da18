"""Ctrl-C in a long simulation says where the run stood before the command exits."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.sim import heap, jobfleet, jobsim, philly


def test_an_interrupted_run_says_how_far_it_got(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace.csv"
    rows = [f"2017-10-09 07:{minute:02d}:00,600,1,vc{minute % 2}" for minute in range(20)]
    path.write_text("timestamp,duration,num_gpus,cluster\n" + "\n".join(rows) + "\n")
    trace = philly.load(path)
    pools = jobfleet.fleet_of_gpus(16)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    tick = heap.FrozenHeap.tick

    def interrupted(self: heap.FrozenHeap) -> None:
        tick(self)
        if self.ticks == 12:  # Ctrl-C, part-way through the run
            raise KeyboardInterrupt

    monkeypatch.setattr(heap.FrozenHeap, "tick", interrupted)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        jobsim.simulate(trace, pools, queues, progress=said.append)
    assert len(said) == 1 and said[0].startswith("interrupted at day 0.0")
    finished = int(said[0].split(": ")[1].split("/")[0])
    assert 0 <= finished < 20 and said[0].endswith("nothing reported")
