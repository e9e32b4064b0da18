"""Which rows of a fleet changed, in order: a journal for caches of per-row values.

A cache computed from the fleet's rows (the fragmentation model of FGD scoring) must learn which
rows changed between two scheduling cycles: releases and admissions reach the fleet outside any
cycle. Comparing every row with what the cache saw costs a pass over the whole fleet each cycle;
reading the rows written since the cache last looked costs what changed. The journal keeps the
latest `limit` entries; a reader further behind is told so and compares every row instead.
"""

from __future__ import annotations

LIMIT = 1 << 16
"""Entries kept; beyond it the older half goes (a few hundred cycles' worth on a busy fleet)."""


class TouchedRows:
    """Rows whose free capacity, GPU health or pod counts were written, oldest first (repeats kept)."""

    __slots__ = ("_dropped", "_rows", "limit")

    def __init__(self, limit: int = LIMIT) -> None:
        if limit < 2:
            raise ValueError(f"TouchedRows: limit must be at least 2, got {limit}")
        self.limit = limit
        self._rows: list[int] = []
        self._dropped = 0

    def add(self, row: int) -> None:
        rows = self._rows
        rows.append(row)
        if len(rows) > self.limit:
            half = len(rows) // 2
            del rows[:half]
            self._dropped += half

    def mark(self) -> int:
        """The journal's position now, for a later `since`."""
        return self._dropped + len(self._rows)

    def since(self, mark: int) -> list[int] | None:
        """The rows written after `mark` (a row may repeat), or None when some of them were dropped."""
        start = mark - self._dropped
        if start < 0:
            return None
        return self._rows[start:]
