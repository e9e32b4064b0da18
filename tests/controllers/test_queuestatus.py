"""The one rule for what a Queue's status says, as both worlds write it (`controllers.queuestatus`)."""

from __future__ import annotations

from gpufleet.controllers.queuestatus import (
    QueueReport,
    Validity,
    queue_reason,
    reports,
    validity,
    warns,
)
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"
MIG = "1g.10gb"
ORPHAN = {"orphan": "unknown parent queue 'nonexistent'"}


def _cache() -> ClusterCache:
    """org <- team-a, team-b (8 H100 each); `orphan` is left out of the tree (see ORPHAN)."""
    tree = QuotaTree(
        [
            QuotaNode("org", None, {}),
            QuotaNode("team-a", "org", {H100: FlavorLimits(8000), MIG: FlavorLimits(7000)}),
            QuotaNode("team-b", "org", {H100: FlavorLimits(8000)}),
        ]
    )
    settings = {name: QueueSettings(name) for name in tree.nodes}
    return ClusterCache(fleet=FleetState(), tree=tree, settings=settings, history=UsageHistory(3600))


def _workload(name: str, queue: str) -> Workload:
    return Workload(name, (PodSet("main", 1, PodRequest(gpus=1)),), queue=queue)


def _admit(cache: ClusterCache, name: str, queue: str, usage: dict[str, int]) -> None:
    cache.admit(_workload(name, queue), Assignment(None, (1,), usage), [], now=0.0)


def test_valid_says_in_the_tree_a_refused_spec_or_a_parent_that_cannot_be_placed() -> None:
    malformed = {"greedy": "field spec.quotas.H100-80GB: lendingLimit exceeds nominal"}
    assert validity("team-a", ORPHAN, malformed) == Validity("True", "InQuotaTree", "")
    assert validity("orphan", ORPHAN, malformed) == Validity(
        "False", "InvalidParent", "left out of the quota tree: unknown parent queue 'nonexistent'"
    )
    # A refused object is why its queue is left out: the spec is named, not the tree.
    both = {**ORPHAN, "greedy": "left out"}
    assert validity("greedy", both, malformed) == Validity("False", "InvalidSpec", malformed["greedy"])


def test_a_warning_only_when_a_queue_becomes_invalid_or_its_problem_changes() -> None:
    ok = Validity("True", "InQuotaTree", "")
    bad = Validity("False", "InvalidParent", "left out of the quota tree: a")
    worse = Validity("False", "InvalidParent", "left out of the quota tree: b")
    assert warns(None, bad) and warns(ok, bad) and warns(bad, worse)
    assert not warns(bad, bad)
    assert not warns(None, ok) and not warns(bad, ok)


def test_counts_and_usage_include_the_subtree() -> None:
    cache = _cache()
    _admit(cache, "a1", "team-a", {H100: 4000})
    _admit(cache, "a2", "team-a", {H100: 2500, MIG: 1000})
    _admit(cache, "b1", "team-b", {H100: 8000})
    cache.submit(_workload("a3", "team-a"))
    cache.submit(_workload("b2", "team-b"))
    cache.submit(_workload("b3", "team-b"))
    got = reports(cache, ["org", "team-a", "team-b"], invalid={})
    ok = Validity("True", "InQuotaTree", "")
    assert got["team-a"] == QueueReport(ok, 1, 2, {MIG: 1.0, H100: 6.5})
    assert got["team-b"] == QueueReport(ok, 2, 1, {H100: 8.0})
    assert got["org"] == QueueReport(ok, 3, 3, {MIG: 1.0, H100: 14.5})
    assert list(got["org"].usage) == sorted(got["org"].usage)  # flavors in name order


def test_a_queue_left_out_of_the_tree_counts_the_work_submitted_to_it() -> None:
    cache = _cache()
    cache.submit(_workload("stuck", "orphan"))
    cache.submit(_workload("lost", "nowhere"))  # no such queue: counted nowhere
    got = reports(cache, ["org", "orphan"], invalid=ORPHAN)
    assert (got["orphan"].pending_workloads, got["orphan"].valid.reason) == (1, "InvalidParent")
    assert got["org"].pending_workloads == 0


def test_the_world_may_name_waiting_work_the_core_does_not_hold() -> None:
    cache = _cache()
    cache.submit(_workload("queued", "team-a"))
    # e.g. a workload in backoff after an eviction, which the core gets back only later
    got = reports(cache, ["team-a"], invalid={}, pending=["team-a", "team-a"])
    assert got["team-a"].pending_workloads == 2


def test_usage_that_went_back_to_zero_is_no_longer_shown() -> None:
    cache = _cache()
    _admit(cache, "a1", "team-a", {H100: 1000})
    cache.finish("a1", now=1.0)
    got = reports(cache, ["team-a", "org"], invalid={})
    assert (got["team-a"].admitted_workloads, got["team-a"].usage) == (0, {})


def test_queue_reason_names_a_missing_an_invalid_or_a_parent_queue() -> None:
    tree = _cache().tree
    assert queue_reason(tree, ORPHAN, "team-a") is None
    missing = queue_reason(tree, ORPHAN, "team-z")
    assert missing is not None and missing.type == "QueueNotFound"
    invalid = queue_reason(tree, ORPHAN, "orphan")
    assert invalid is not None and invalid.type == "QueueInvalid"
    assert (
        invalid.message == "queue 'orphan' is left out of the quota tree: unknown parent queue 'nonexistent'"
    )
    parent = queue_reason(tree, ORPHAN, "org")
    assert parent is not None and parent.type == "QueueNotLeaf"
