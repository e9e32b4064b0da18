from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.serve import ApiServer
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


@pytest.fixture
def live_server(store: SqliteStore, tokens: TokenRegistry, tmp_path: Path) -> Iterator[ApiServer]:
    """The app served by uvicorn on a free loopback port, in a thread, for as long as a test runs."""
    server = ApiServer(create_app(store, tokens), state_dir=tmp_path, port=0)
    server.bind()
    thread = threading.Thread(target=server.run, name="test-api-server", daemon=True)
    thread.start()
    try:
        assert server.started.wait(30), "the server did not start"
        yield server
    finally:
        server.stop()
        thread.join(timeout=30)
