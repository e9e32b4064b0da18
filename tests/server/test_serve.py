"""The API on a real socket: answers come without waiting on the client's delayed ACK."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.serve import ApiServer
from gpufleet.store import SqliteStore

REQUESTS = 3


# asyncio's own loop turns Nagle's algorithm off only on sockets that say TCP (uvloop, which uvicorn's
# "auto" picks when it is installed, always does): both must serve with it off.
@pytest.mark.parametrize("loop", ["asyncio", "auto"])
def test_answers_on_a_kept_alive_connection_are_prompt(
    store: SqliteStore, tokens: TokenRegistry, tmp_path: Path, loop: str
) -> None:
    """With Nagle's algorithm on, an answer written in two parts waits ~40 ms for the client's delayed
    ACK. The server's end of each connection must have it off (TCP_NODELAY): checked on the socket
    itself rather than timed, so a slow machine can neither fail nor pass the test by its speed."""
    server = ApiServer(create_app(store, tokens), state_dir=tmp_path, port=0)
    server._server.config.loop = loop
    server.bind()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert server.started.wait(30), "the server did not start"
        request = (
            f"GET /v1/whoami HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {tokens.admin_token}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", server.bound_port), timeout=10) as conn:
            for _ in range(REQUESTS):
                assert b'"admin":true' in _exchange(conn, request)
            # Answered, so the server holds this connection open (kept alive) while we look at it.
            (nodelay,) = _server_nodelay(server)
        assert nodelay, "the server's end of the connection has Nagle's algorithm on"
    finally:
        server.stop()
        thread.join(timeout=10)


def _server_nodelay(server: ApiServer) -> list[bool]:
    """TCP_NODELAY on the server's end of each open connection."""
    connections = server._server.server_state.connections  # uvicorn's own record of them
    sockets = [connection.transport.get_extra_info("socket") for connection in connections]
    return [bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)) for sock in sockets]


def _exchange(conn: socket.socket, request: bytes) -> bytes:
    conn.sendall(request)
    answer = b""
    while not answer.endswith(b"}"):
        chunk = conn.recv(65536)
        assert chunk, "the server closed the connection"
        answer += chunk
    return answer
