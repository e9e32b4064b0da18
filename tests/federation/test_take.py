"""Taking a gang out of a summary: best fit in the required level and every coarser one, a host per
pod, the worst case for levels the placement does not decide, and a reason when it does not fit."""

from __future__ import annotations

from gpufleet.federation.summary import ModelSummary
from gpufleet.federation.take import GangShape, best_fit, spread, take

LEVELS = ("block", "rack")


def summary() -> ModelSummary:
    """Two blocks: b1 with two full racks (32 free), b2 with one full rack (16 free); hosts of 8 GPUs in
    two NVLink domains of 4."""
    return ModelSummary(
        gpus=48,
        free_gpus=48,
        free_domains={
            "block": {32: 1, 16: 1},
            "rack": {16: 3},
            "host": {8: 6},
            "nvlink": {4: 12},
        },
    )


def test_a_rack_gang_takes_the_smallest_block_that_holds_it() -> None:
    after = take(summary(), GangShape(whole=(8, 8), required="rack"), LEVELS)
    assert isinstance(after, ModelSummary)
    assert after.free_gpus == 32
    assert after.free_domains["rack"] == {16: 2}
    assert after.free_domains["block"] == {32: 1}, "b2 (16 free) was the best fit, b1 is left whole"
    assert after.free_domains["host"] == {8: 4}
    assert sum(k * n for k, n in after.free_domains["nvlink"].items()) == 32


def test_the_summary_given_is_left_unchanged() -> None:
    before = summary()
    take(before, GangShape(whole=(8,)), LEVELS)
    assert before == summary()


def test_an_undecided_level_assumes_the_worst() -> None:
    after = take(summary(), GangShape(whole=(8,)), LEVELS)
    assert isinstance(after, ModelSummary)
    assert after.free_domains["block"] == {24: 1, 16: 1}, "taken from the fullest block"
    assert after.free_domains["host"] == {8: 5}


def test_reasons_name_what_lacks() -> None:
    assert take(summary(), GangShape(whole=(8,), required="nvlink"), LEVELS) == (
        "8 GPUs needed in one nvlink, at most 4 free in one"
    )
    assert take(summary(), GangShape(whole=(8,) * 3, required="rack"), LEVELS) == (
        "24 GPUs needed in one rack, at most 16 free in one"
    )
    assert take(summary(), GangShape(whole=(8,), required="zone"), LEVELS) == (
        "the cluster has no topology level 'zone'"
    )
    assert take(summary(), GangShape(mig=("1g.10gb",)), LEVELS) == "1 free 1g.10gb instances needed, 0 free"
    assert take(summary(), GangShape(whole=(8,) * 7), LEVELS) == "56 free GPUs needed, 48 free"
    hosts_full = summary()
    hosts_full.free_domains["host"] = {4: 12}
    assert take(hosts_full, GangShape(whole=(8,)), LEVELS) == (
        "a pod of 8 GPUs needs a host with 8 free, at most 4"
    )


def test_histogram_steps() -> None:
    histogram = {8: 2, 3: 1}
    assert best_fit(histogram, 3) and histogram == {8: 2}
    assert not best_fit(histogram, 9) and histogram == {8: 2}
    spread(histogram, 10)
    assert histogram == {6: 1}
