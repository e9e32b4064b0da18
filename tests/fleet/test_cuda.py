"""The driver/CUDA rule: NVIDIA's minimum-driver table with minor version compatibility."""

from __future__ import annotations

import pytest

from gpufleet.api.versions import parse_cuda_version, parse_driver_version
from gpufleet.fleet import cuda


def driver(text: str) -> tuple[int, int, int]:
    return parse_driver_version(text)


@pytest.mark.parametrize(
    ("version", "minimum"),
    [
        # Before CUDA 11 each minor release needs its own driver (Table 3 only).
        ((10, 0), "410.48"),
        ((10, 1), "418.39"),
        ((10, 2), "440.33"),
        ((9, 2), "396.26"),
        # 11.0 GA's own driver is older than the 11.x minor-compatibility minimum: the lower wins.
        ((11, 0), "450.51.05"),
        # From 11.1 on, minor version compatibility: the major's minimum (Table 2).
        ((11, 1), "450.80.02"),
        ((11, 8), "450.80.02"),
        ((12, 0), "525.60.13"),
        ((12, 4), "525.60.13"),
        ((12, 8), "525.60.13"),
        ((12, 9), "525.60.13"),
        ((13, 0), "580.0"),
    ],
)
def test_the_minimum_driver_of_a_toolkit(version: tuple[int, int], minimum: str) -> None:
    assert cuda.minimum_driver(version) == driver(minimum)


@pytest.mark.parametrize(
    ("installed", "version", "runs"),
    [
        ("550.54.15", (12, 4), True),
        ("550.54.15", (12, 8), True),  # 12.8 natively needs 570.26; minor version compatibility
        ("525.60.13", (12, 9), True),  # exactly the 12.x minimum
        ("525.60.12", (12, 0), False),  # one revision short
        ("525.53.05", (12, 1), False),
        ("520.61.05", (12, 0), False),  # an 11.8 driver runs no 12.x
        ("520.61.05", (11, 8), True),
        ("470.82.01", (12, 8), False),
        ("450.80.02", (11, 4), True),
        ("450.51.06", (11, 1), False),  # below the 11.x minor-compatibility minimum
        ("450.51.06", (11, 0), True),
        ("418.39", (10, 2), False),  # no minor version compatibility before CUDA 11
        ("575.57.08", (13, 0), False),  # a 12.9 driver runs no 13.x
        ("575.51.03", (12, 9), True),
        ("580.65.06", (13, 0), True),
        ("580.65.06", (12, 2), True),  # a newer driver runs every older toolkit
        ("580.65.06", (10, 0), True),
        ("535.104.05", (12, 2), True),  # a three-digit minor compares as a number, not as text
        ("535.54.03", (12, 2), True),
        ("535.9.1", (12, 2), True),  # 535.9 < 535.54 still passes through minor version compatibility
    ],
)
def test_supports(installed: str, version: tuple[int, int], runs: bool) -> None:
    assert cuda.supports(driver(installed), version) is runs


def test_an_unknown_driver_runs_everything() -> None:
    assert cuda.supports(None, (13, 0))
    assert cuda.supports(None, (99, 0))


def test_versions_the_table_does_not_list() -> None:
    # Never released (12.7) or later minors of a known major: the major's minimum.
    assert cuda.minimum_driver((12, 7)) == driver("525.60.13")
    assert cuda.minimum_driver((13, 4)) == driver("580.0")
    # A 10.x that never existed takes the first release after it (11.0 GA), minor compat not applying.
    assert cuda.minimum_driver((10, 3)) == driver("450.51.05")
    # Older than the table: the oldest listed release's driver runs it.
    assert cuda.minimum_driver((6, 5)) == driver("346.46")
    # A new major: no driver gpufleet knows of runs it.
    assert cuda.minimum_driver((14, 0)) is None
    assert not cuda.supports(driver("999.99.99"), (14, 0))


def test_driver_codes_order_like_versions() -> None:
    texts = ["450.80.02", "450.80.10", "450.102.04", "535.9.1", "535.54.03", "535.104.05", "570.26", "580.0"]
    codes = [cuda.driver_code(driver(t)) for t in texts]
    assert codes == sorted(codes) and len(set(codes)) == len(codes)
    assert all(code > cuda.UNKNOWN for code in codes)
    assert all(code < cuda.NO_DRIVER for code in codes)


def test_texts_name_the_versions_as_nvidia_writes_them() -> None:
    assert cuda.driver_text(driver("450.80.02")) == "450.80.02"
    assert cuda.driver_text(driver("570.26")) == "570.26"
    assert cuda.driver_text((580, 0, 0)) == "580"  # Table 2's whole branch
    assert cuda.requirement_text((12, 8)) == (
        "needs an NVIDIA driver >= 525.60.13 (minor version compatibility; >= 570.26 runs it natively)"
    )
    assert cuda.requirement_text((10, 2)) == "needs an NVIDIA driver >= 440.33"
    assert "newer than every CUDA release" in cuda.requirement_text((14, 0))


@pytest.mark.parametrize("text", ["12", "12.x", "v12.4", "12.04", "12.4.1.2", "", " 12.4", "0.9"])
def test_malformed_cuda_versions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a CUDA version"):
        parse_cuda_version(text)


def test_cuda_versions_parse_to_major_and_minor() -> None:
    assert parse_cuda_version("12.4") == (12, 4)
    assert parse_cuda_version("12.4.1") == (12, 4)  # the patch of an image tag is accepted, ignored
    assert parse_cuda_version("11.0") == (11, 0)


@pytest.mark.parametrize("text", ["550", "550.x", "r550.54", "550.54.15.1", ""])
def test_malformed_driver_versions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not an NVIDIA driver version"):
        parse_driver_version(text)
