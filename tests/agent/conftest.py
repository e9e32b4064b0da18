from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.agent.nvml import RecordedNvml

from .fakes import FakeKubelet


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short temporary directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(short_dir / "device-plugins")
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def h100() -> RecordedNvml:
    return RecordedNvml.from_profile("hgx-h100")


@pytest.fixture
def a100_mig() -> RecordedNvml:
    return RecordedNvml.from_profile("a100-80gb-mig")


@pytest.fixture
def l4() -> RecordedNvml:
    return RecordedNvml.from_profile("pcie-l4")
