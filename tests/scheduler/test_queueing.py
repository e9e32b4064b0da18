"""Decayed usage history and fair-share arithmetic."""

from __future__ import annotations

import pytest

from gpufleet.scheduler.config import FairSharingConfig
from gpufleet.scheduler.queueing import FairShare, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage

F = "H100-80GB"


def test_history_decays_by_half_life_toward_the_current_level() -> None:
    history = UsageHistory(half_life_seconds=100)
    history.seed("q", F, 8000, 0, now=0)
    assert history.average("q", F, 100) == pytest.approx(4000)
    assert history.average("q", F, 200) == pytest.approx(2000)
    history.record("q", F, 1000, now=200)
    assert history.average("q", F, 300) == pytest.approx(1000 + (2000 - 1000) / 2)


def test_history_off_with_zero_half_life() -> None:
    history = UsageHistory(half_life_seconds=0)
    history.seed("q", F, 8000, 0, now=0)
    assert history.average("q", F, 0) == 0


def _shares(weight_b: float, hist_a: float) -> dict[str, float]:
    tree = QuotaTree(
        [
            QuotaNode("root"),
            QuotaNode("a", "root", {F: FlavorLimits(2000)}),
            QuotaNode("b", "root", {F: FlavorLimits(2000)}),
            QuotaNode("c", "root", {F: FlavorLimits(6000)}),
        ]
    )
    usage = QuotaUsage(tree)
    usage.add("a", {F: 4000})
    usage.add("b", {F: 4000})
    history = UsageHistory(3600)
    history.seed("a", F, hist_a, 0, now=0)
    settings = {"a": QueueSettings("a"), "b": QueueSettings("b", fair_share_weight=weight_b)}
    fair = FairShare(
        tree=tree, usage=usage, history=history, settings=settings, fair=FairSharingConfig(), now=0
    )
    return fair.shares


def test_equal_borrowers_equal_shares() -> None:
    shares = _shares(1.0, 0)
    assert shares["a"] == shares["b"] == pytest.approx(2000 / 10000)
    assert shares["c"] == 0


def test_weight_divides_the_share() -> None:
    assert _shares(4.0, 0)["b"] == pytest.approx(2000 / 10000 / 4)


def test_history_adds_to_the_share() -> None:
    shares = _shares(1.0, 5000)
    assert shares["a"] == pytest.approx(2000 / 10000 + 5000 / 10000)
