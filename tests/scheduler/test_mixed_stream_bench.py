"""benchmarks/mixed_stream.py compares policies on one stream: for a seed, each policy is offered the same
arrivals, whatever it places and however its tie-breaks draw."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "mixed_stream.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mixed_stream_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_policy_is_offered_the_same_arrivals_for_a_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_bench()
    offered: dict[str, list[tuple[object, ...]]] = {}
    place = bench.place_workload

    def spy(state: Any, workload: Any, **kwargs: Any) -> Any:
        pod_set = workload.pod_sets[0]
        offered.setdefault(current, []).append((pod_set.count, pod_set.request, workload.topology.required))
        return place(state, workload, **kwargs)

    monkeypatch.setattr(bench, "place_workload", spy)
    stream = bench.make_stream(0, 600, 64, 1.1, 0.14)
    for current in ("bestfit", "fgd+", "random"):
        outcome = bench.run(current, 0, 64, stream, 100)
        assert outcome.gangs > 0
    assert len(offered["bestfit"]) == 600
    assert offered["fgd+"] == offered["bestfit"] == offered["random"]
    # The stream is a function of the seed alone.
    again = bench.make_stream(0, 600, 64, 1.1, 0.14)
    assert again == stream
    assert bench.make_stream(1, 600, 64, 1.1, 0.14) != stream
