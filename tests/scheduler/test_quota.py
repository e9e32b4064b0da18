"""Quota tree arithmetic: borrowing, lending and limits along paths of any depth (table tests)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage

F = "H100-80GB"


def q(
    name: str,
    parent: str | None = None,
    nominal: float | None = None,
    borrow: float | None = None,
    lend: float | None = None,
) -> QuotaNode:
    quotas = {}
    if nominal is not None:
        quotas[F] = FlavorLimits(
            int(nominal * 1000),
            None if borrow is None else int(borrow * 1000),
            None if lend is None else int(lend * 1000),
        )
    return QuotaNode(name, parent, quotas)


@dataclass
class Case:
    name: str
    queues: list[QuotaNode]
    used: dict[str, float]
    want_available: dict[str, float]


CASES = [
    Case(
        "two siblings lend everything",
        [q("root"), q("a", "root", 6), q("b", "root", 6)],
        {"b": 10},
        {"a": 2, "b": 2},
    ),
    Case(
        "borrowing limit caps the borrower",
        [q("root"), q("a", "root", 6), q("b", "root", 6, borrow=2)],
        {"b": 7},
        {"a": 5, "b": 1},
    ),
    Case(
        "lending limit keeps a guaranteed part",
        [q("root"), q("a", "root", 6, lend=2), q("b", "root", 6)],
        {},
        {"a": 12, "b": 8},
    ),
    Case(
        "lender keeps its unlent part while the borrower is full",
        [q("root"), q("a", "root", 6, lend=2), q("b", "root", 6)],
        {"b": 8},
        {"a": 4, "b": 0},
    ),
    Case(
        "three levels: an org lends only what its lending limit allows",
        [q("root"), q("org1", "root", 0, lend=4), q("t1", "org1", 8), q("org2", "root"), q("t2", "org2", 2)],
        {},
        {"t1": 10, "t2": 6},
    ),
    Case(
        "three levels: an org borrowing limit caps its teams",
        [
            q("root"),
            q("org1", "root", 0, borrow=1),
            q("t1", "org1", 4),
            q("t1b", "org1", 4),
            q("org2", "root"),
            q("t2", "org2", 8),
        ],
        {"t1": 8},
        {"t1": 1, "t1b": 1, "t2": 8},
    ),
    Case(
        "a root's own nominal is shared by all",
        [q("root", None, 4), q("a", "root", 0), q("b", "root", 0)],
        {"a": 3},
        {"a": 1, "b": 1},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_available(case: Case) -> None:
    tree = QuotaTree(case.queues)
    usage = QuotaUsage(tree)
    for queue, gpus in case.used.items():
        usage.add(queue, {F: int(gpus * 1000)})
    got = {queue: usage.available(queue, F) / 1000 for queue in case.want_available}
    assert got == case.want_available


def test_add_then_refund_restores_every_node() -> None:
    tree = QuotaTree([q("root"), q("org", "root", 2, lend=1), q("a", "org", 4, lend=2), q("b", "org", 4)])
    usage = QuotaUsage(tree)
    usage.add("b", {F: 3000})
    before = usage.snapshot()
    usage.add("a", {F: 7000})
    usage.add("a", {F: 7000}, sign=-1)
    assert usage.snapshot() == before


def test_a_change_after_an_undone_what_if_never_reuses_its_version() -> None:
    """Memos are keyed by the usage version (the cycle's quota answers, who borrows): a what-if
    (a preemption search) changes usage and undoes it with `rewind`; the table of a later real
    change must not carry the number the what-if's table had, or the what-if's answer is read as
    its own."""
    tree = QuotaTree([q("root"), q("a", "root", 4), q("b", "root", 4)])
    usage = QuotaUsage(tree)
    usage.add("a", {F: 4000})
    before = usage.version
    usage.add("a", {F: 4000}, -1)  # the what-if: a's workload evicted
    during = usage.version
    what_if_answer = usage.fits("b", {F: 8000})
    usage.add("a", {F: 4000})
    usage.rewind(before)
    assert usage.version == before  # memos made before the what-if hold again
    usage.add("b", {F: 2000})  # a real admission: another table
    assert usage.version not in (before, during)
    assert what_if_answer is None and usage.fits("b", {F: 8000}) is not None


def test_shortfall_names_the_binding_queue_and_numbers() -> None:
    tree = QuotaTree([q("root"), q("org", "root", 0, borrow=2), q("a", "org", 4), q("b", "root", 4)])
    usage = QuotaUsage(tree)
    usage.add("a", {F: 5000})
    short = usage.fits("a", {F: 2000})
    assert short is not None
    assert (short.queue, short.limited_by, short.used, short.nominal, short.available) == (
        "a",
        "org",
        5000,
        4000,
        1000,
    )
    assert "limited by queue org" in short.message()


def test_a_queue_without_the_flavor_cannot_admit_it() -> None:
    tree = QuotaTree([q("root"), q("a", "root", 4), q("b", "root")])
    short = QuotaUsage(tree).fits("b", {F: 1000})
    assert short is not None and short.nominal == 0 and short.available == 0


@pytest.mark.parametrize(
    ("queues", "field"),
    [
        ([q("a", "nope")], "parent"),
        ([QuotaNode("a", "b"), QuotaNode("b", "a")], "parent"),
    ],
)
def test_bad_trees_are_user_errors(queues: list[QuotaNode], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        QuotaTree(queues)
    assert err.value.field == field
