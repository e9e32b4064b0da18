"""Rows a score cannot tell apart, grouped so that a batch is scored once per group.

A fleet has a few node types and many nodes of a type sit in the same state (empty, or filled alike), so
the first scoring of a request over the fleet computes the same values again and again. A policy whose
value for a row depends only on a few columns of that row (never on the other rows of the batch) can
compute it on one row per group of equal columns and copy it to the others: the same values to the bit,
whatever the groups.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from gpufleet.scheduler.placement.scoring import IntArray, Rows


@cache
def _multipliers(columns: int) -> IntArray:
    # Fixed odd multipliers: a row's columns hash to one int64 (wrapping), which sorts far faster than
    # rows compared column by column. Which multipliers is irrelevant to the result: groups are checked.
    rng = np.random.default_rng(columns)
    return np.asarray(rng.integers(1, 2**62, size=columns, dtype=np.int64) | 1, dtype=np.int64)


def alike_rows(columns: IntArray) -> tuple[Rows, Rows] | None:
    """Groups the rows of `columns` (rows x columns) that are equal in every column.

    Returns one representative row per group and, per row, the index of its group among the
    representatives; None when no two rows are equal, or when two different rows hash alike (the caller
    then computes every row, as without grouping).
    """
    if columns.ndim != 2:
        raise ValueError(f"alike_rows: columns must be a rows x columns matrix, got shape {columns.shape}")
    if columns.shape[0] < 2:
        return None
    # One int64 per row (products wrap): einsum is several times faster than an integer matmul here.
    hashed = np.einsum("ij,j->i", columns, _multipliers(columns.shape[1]))
    order = np.argsort(hashed)
    ranked = hashed[order]
    starts = np.empty(ranked.size, dtype=np.bool_)  # where a new hash begins in sorted order
    starts[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=starts[1:])
    first = order[starts]
    if first.size == columns.shape[0]:
        return None
    inverse = np.empty(ranked.size, dtype=np.intp)
    inverse[order] = np.cumsum(starts) - 1
    # Any row of a group can represent it, as long as every row really equals its representative.
    if not np.array_equal(columns[first[inverse]], columns):
        return None
    return first.astype(np.intp), inverse
