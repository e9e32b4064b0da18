"""Text read as a whole number: 0-9 only, so that `int` reads every text that passes."""

from __future__ import annotations

import pytest

from gpufleet.api.numerals import plain_digits


@pytest.mark.parametrize("text", ["0", "7", "0042", "123456789012345678"])
def test_ascii_digits_pass_and_read_as_written(text: str) -> None:
    assert plain_digits(text)
    assert int(text) == int(text.lstrip("0") or "0")


@pytest.mark.parametrize("text", ["", "²", "①", "٣", "1²", " 1", "1 ", "-1", "+1", "1.0", "1_000", "0x1"])
def test_anything_else_does_not(text: str) -> None:
    assert not plain_digits(text)
