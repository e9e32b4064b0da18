"""The API on a real socket: answers come without waiting on the client's delayed ACK."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.serve import ApiServer
from gpufleet.store import SqliteStore

REQUESTS = 20


def test_answers_on_a_kept_alive_connection_are_prompt(
    store: SqliteStore, tokens: TokenRegistry, tmp_path: Path
) -> None:
    """With Nagle's algorithm on, an answer written in two parts waits ~40 ms for the client's
    delayed ACK: 20 requests would take 0.8 s or more. They take a few ms each without it."""
    server = ApiServer(create_app(store, tokens), state_dir=tmp_path, port=0)
    server.bind()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert server.started.wait(30), "the server did not start"
        request = (
            f"GET /v1/whoami HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {tokens.admin_token}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", server.bound_port), timeout=10) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _exchange(conn, request)  # the first one warms up the app
            started = time.monotonic()
            for _ in range(REQUESTS):
                assert b'"admin":true' in _exchange(conn, request)
            elapsed = time.monotonic() - started
        assert elapsed < 0.5, f"{REQUESTS} requests took {elapsed:.2f}s"
    finally:
        server.stop()
        thread.join(timeout=10)


def _exchange(conn: socket.socket, request: bytes) -> bytes:
    conn.sendall(request)
    answer = b""
    while not answer.endswith(b"}"):
        chunk = conn.recv(65536)
        assert chunk, "the server closed the connection"
        answer += chunk
    return answer
