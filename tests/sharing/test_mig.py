"""The MIG catalogue and its placement rules (start slots, overlap, counts, compute slices)."""

from __future__ import annotations

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.sharing import mig


def test_catalogue_names_per_model() -> None:
    assert set(mig.catalogue("A100-40GB")) == {
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    }
    assert "7g.141gb" in mig.catalogue("H200-141GB")
    assert mig.catalogue("L4") == {}
    assert mig.profile("H100-SXM5-80GB", "3g.40gb").starts == (0, 4)


@pytest.mark.parametrize(
    "layout",
    [
        ["3g.40gb", "3g.40gb"],
        ["4g.40gb", "2g.20gb", "1g.10gb"],
        ["1g.10gb"] * 7,
        ["7g.80gb"],
        ["2g.20gb"] * 3,
    ],
)
def test_valid_layouts_plan_without_overlap(layout: list[str]) -> None:
    placements = mig.plan_layout("H100-80GB", layout)
    used: set[int] = set()
    for p in placements:
        assert p.start in mig.profile("H100-80GB", p.profile).starts
        assert not used & set(p.slices)
        used |= set(p.slices)


@pytest.mark.parametrize(
    "layout",
    [
        ["4g.40gb", "4g.40gb"],
        ["7g.80gb", "1g.10gb"],
        ["1g.10gb"] * 8,
        ["3g.40gb", "3g.40gb", "1g.10gb"],
        ["2g.20gb"] * 4,
    ],
)
def test_invalid_layouts_are_refused(layout: list[str]) -> None:
    with pytest.raises(ValidationError):
        mig.plan_layout("H100-80GB", layout)


def test_free_start_respects_slots_and_counts() -> None:
    placed = mig.plan_layout("A100-40GB", ["3g.20gb"])
    assert mig.free_start("A100-40GB", placed, "3g.20gb") == 4
    assert mig.free_start("A100-40GB", placed, "4g.20gb") is None
    assert mig.free_start("A100-40GB", placed, "nope") is None
    assert mig.find_profile("A100-40GB", "3g.40gb") is None
