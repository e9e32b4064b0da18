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

    Returns one representative row per group (its first row) and, per row, the index of its group among
    the representatives; None when no two rows are equal, or when two different rows hash alike (the
    caller then computes every row, as without grouping).
    """
    if columns.ndim != 2:
        raise ValueError(f"alike_rows: columns must be a rows x columns matrix, got shape {columns.shape}")
    if columns.shape[0] < 2:
        return None
    # Elementwise products summed along rows (wrapping): several times faster than an integer matmul.
    hashed = (columns * _multipliers(columns.shape[1])).sum(axis=1)
    _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
    if first.size == columns.shape[0]:
        return None
    first = first.astype(np.intp)
    inverse = inverse.reshape(-1).astype(np.intp)
    if not np.array_equal(columns[first][inverse], columns):
        return None
    return first, inverse
