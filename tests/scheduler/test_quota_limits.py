"""Which queue's limit binds a request that does not fit, and whose refunds reach it (decision 39:
the victims that free quota are chosen among the workloads whose release relieves that queue)."""

from __future__ import annotations

from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage

H = "H100-80GB"


def _usage() -> QuotaUsage:
    tree = QuotaTree(
        [
            QuotaNode("root", None, {H: FlavorLimits(15000)}),
            QuotaNode("org1", "root", {H: FlavorLimits(0, borrowing_limit=1000)}),
            QuotaNode("a", "org1", {H: FlavorLimits(3000)}),
            QuotaNode("b", "org1", {H: FlavorLimits(1000)}),
            QuotaNode("org2", "root", {H: FlavorLimits(2000)}),
            QuotaNode("c", "org2", {H: FlavorLimits(0)}),
            QuotaNode("d", "org2", {H: FlavorLimits(2000, lending_limit=0)}),
        ]
    )
    usage = QuotaUsage(tree)
    usage.add("a", {H: 2000})
    usage.add("b", {H: 3000})  # org1 at 5: its subtree 4 plus its borrowing limit 1
    usage.add("c", {H: 12000})
    usage.add("d", {H: 2000})  # within what d keeps: nothing charged above it
    return usage


def test_an_organisation_at_its_borrowing_limit_binds_its_teams() -> None:
    usage = _usage()
    assert usage.limits("a", {H: 2000}) == {H: "org1"}
    assert usage.limits("c", {H: 4000}) == {}  # the root has 4 left (d's 2 are within what it keeps)
    assert usage.limits("c", {H: 5000}) == {H: "root"}


def test_only_refunds_inside_the_binding_queue_reach_it() -> None:
    usage = _usage()
    assert usage.reaches("b", H, "org1") and usage.reaches("a", H, "org1")
    assert not usage.reaches("c", H, "org1")  # frees the root's quota, not org1's
    assert usage.reaches("c", H, "root") and usage.reaches("b", H, "root")


def test_a_refund_inside_a_kept_part_reaches_nothing_above() -> None:
    usage = _usage()
    assert usage.reaches("d", H, "d")
    assert not usage.reaches("d", H, "root")
