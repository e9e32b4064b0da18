from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.store import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore.open(tmp_path, synchronous="OFF") as opened:
        yield opened


@pytest.fixture
def tokens(tmp_path: Path) -> TokenRegistry:
    return TokenRegistry(tmp_path)


@pytest.fixture
def client(store: SqliteStore, tokens: TokenRegistry) -> Iterator[TestClient]:
    # raise_server_exceptions=False: a bug must show as the 500 a real client would get.
    with TestClient(create_app(store, tokens), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {tokens.admin_token}"
        yield test_client


@pytest.fixture
def team_client(client: TestClient, tokens: TokenRegistry) -> Callable[[str], TestClient]:
    """A client of the same app holding a token of the given queue."""

    def make(queue: str) -> TestClient:
        other = TestClient(client.app, raise_server_exceptions=False)
        other.headers["Authorization"] = f"Bearer {tokens.create(queue)}"
        return other

    return make
