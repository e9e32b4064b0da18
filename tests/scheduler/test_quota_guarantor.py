"""Which queue's nominal quota holds an admission (decision 27): the leaf's, an inner queue's that sets a
quota of its own, or none (borrowed from the root)."""

from __future__ import annotations

from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage

H = "H100-80GB"
A = "A100-80GB"


def _usage() -> QuotaUsage:
    tree = QuotaTree(
        [
            QuotaNode("root"),
            QuotaNode("org-a", "root", {H: FlavorLimits(8000), A: FlavorLimits(0)}),
            QuotaNode("a1", "org-a", {H: FlavorLimits(2000), A: FlavorLimits(4000)}),
            QuotaNode("a2", "org-a", {H: FlavorLimits(0)}),
            QuotaNode("org-b", "root"),  # no quota of its own: passes on what b1 and b2 lend
            QuotaNode("b1", "org-b", {H: FlavorLimits(4000)}),
            QuotaNode("b2", "org-b", {H: FlavorLimits(0)}),
        ]
    )
    return QuotaUsage(tree)


def test_the_leaf_holds_what_fits_its_own_nominal() -> None:
    usage = _usage()
    assert usage.guarantor("a1", {H: 2000}) == "a1"
    assert usage.guarantor("a1", {}) == "a1"


def test_an_organisation_with_a_quota_holds_what_its_team_borrows_inside_it() -> None:
    usage = _usage()
    assert usage.guarantor("a1", {H: 3000}) == "org-a"
    assert usage.guarantor("a2", {H: 8000}) == "org-a"
    usage.add("a1", {H: 2000})
    assert usage.guarantor("a2", {H: 8000}) == "org-a"  # org-a's subtree: its 8 plus a1's 2 lent
    assert usage.guarantor("a2", {H: 8001}) is None


def test_what_others_use_of_the_organisation_counts_against_it() -> None:
    usage = _usage()
    usage.add("a2", {H: 6000})
    assert usage.guarantor("a1", {H: 4000}) == "org-a"
    assert usage.guarantor("a1", {H: 4001}) is None


def test_an_inner_queue_without_a_quota_is_no_guarantee() -> None:
    usage = _usage()
    assert usage.guarantor("b1", {H: 4000}) == "b1"
    assert usage.guarantor("b2", {H: 1000}) is None  # borrowing b1's idle quota is borrowing


def test_over_several_flavors_the_highest_guarantor_and_none_if_any_borrows() -> None:
    usage = _usage()
    assert usage.guarantor("a1", {H: 3000, A: 1000}) == "org-a"
    assert usage.guarantor("a1", {H: 1000, A: 1000}) == "a1"
    assert usage.guarantor("a1", {H: 1000, A: 5000}) is None  # org-a sets no A100 quota above a1's


def test_the_answer_for_the_same_amounts_follows_every_change_of_usage() -> None:
    """Remembered between changes (a backlog asks again at every step of its cycle), never across one,
    an undone what-if included."""
    usage = _usage()
    assert usage.guarantor("a1", {H: 2000}) == "a1"
    before = usage.version
    usage.add("a1", {H: 2000})
    assert usage.guarantor("a1", {H: 2000}) == "org-a"  # a1's own 2 are used: org-a holds the next 2
    usage.add("a1", {H: 2000}, -1)
    usage.rewind(before)
    assert usage.guarantor("a1", {H: 2000}) == "a1"
    usage.add("a1", {H: 10000})
    assert usage.guarantor("a1", {H: 2000}) is None  # org-a's subtree (its 8, a1's 2) is used: the root's
