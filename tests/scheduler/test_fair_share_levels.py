"""Fair share level by level (decision 28): a queue's borrowing is divided by what its parent can lend it."""

from __future__ import annotations

import pytest

from gpufleet.scheduler.config import FairSharingConfig
from gpufleet.scheduler.queueing import FairShare, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage

H = "H100-80GB"


def _tree() -> QuotaTree:
    return QuotaTree(
        [
            QuotaNode("root"),
            QuotaNode("lender", "root", {H: FlavorLimits(16000, lending_limit=12000)}),
            QuotaNode("org", "root"),  # no quota of its own
            QuotaNode("t1", "org", {H: FlavorLimits(0)}),
            QuotaNode("t2", "org", {H: FlavorLimits(2000, borrowing_limit=2000)}),
            QuotaNode("capped", "root", {H: FlavorLimits(0, borrowing_limit=4000)}),
            QuotaNode("c1", "capped", {H: FlavorLimits(0)}),
        ]
    )


def test_potential_is_what_the_parent_can_lend_through_the_tree() -> None:
    tree = _tree()
    assert tree.potential["root"][H] == 14000  # lender lends 12 of its 16, t2 lends its 2
    assert tree.potential["org"][H] == 14000  # no quota, but the root can lend it everything
    assert tree.potential["t2"][H] == 4000  # its 2 plus at most 2 borrowed
    assert tree.potential["lender"][H] == 18000  # its 16 and t2's 2
    assert tree.potential["capped"][H] == 4000
    assert tree.potential["c1"][H] == 4000


def test_teams_under_a_parent_without_quota_get_shares_by_what_they_borrow() -> None:
    tree = _tree()
    usage = QuotaUsage(tree)
    usage.add("t1", {H: 7000})
    settings = {name: QueueSettings(name) for name in tree.nodes}
    shares = FairShare(
        tree=tree,
        usage=usage,
        history=UsageHistory(3600.0),
        settings=settings,
        fair=FairSharingConfig(history_weight=0.0),
        now=0.0,
    )
    assert shares.share("t1") == pytest.approx(7000 / 14000)
    assert shares.share("t2") == 0.0
    assert shares.share("org") == pytest.approx(5000 / 14000)  # its subtree holds t2's 2
    assert shares.path("t1") == pytest.approx((5000 / 14000, 0.5))
