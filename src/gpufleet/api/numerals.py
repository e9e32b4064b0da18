"""Whole numbers written as text: a resourceVersion, a GPU index, a count, a header's length.

`str.isdigit` is true for characters that `int` refuses ("²", "①"), and `int` reads the digits of
every script ("٣" is 3). Text that must be a plain non-negative integer is checked with
`plain_digits`, which passes 0-9 alone: every text it passes, `int` reads, and as it reads in ASCII.
"""

from __future__ import annotations

__all__ = ["plain_digits"]


def plain_digits(text: str) -> bool:
    """Whether `text` is one or more of the characters 0-9 and nothing else."""
    return text.isascii() and text.isdigit()
