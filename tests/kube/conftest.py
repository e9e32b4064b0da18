from __future__ import annotations

import pytest

from gpufleet.kube.store import KubeStore

from .fakeapi import FakeApiServer


@pytest.fixture
def api() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def kstore(api: FakeApiServer) -> KubeStore:
    return KubeStore(api)
