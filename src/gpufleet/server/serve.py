"""Running the API: uvicorn on a loopback address, in the foreground or on a thread.

The server writes its URL to `server.url` in the state directory once it listens, so that the CLI
pointed at the same state directory finds it on whatever port it got.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from gpufleet.api.errors import GpuFleetError

URL_FILE = "server.url"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class ServerError(GpuFleetError):
    """The server cannot start, e.g. its port is taken."""


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class ApiServer:
    """One uvicorn server for an app; `run()` blocks until `stop()` or a signal (Ctrl-C)."""

    def __init__(
        self, app: FastAPI, *, state_dir: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
    ) -> None:
        self.host = host
        self.port = port
        self._state_dir = Path(state_dir)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            # Long polls and watches end on their own; do not let them hold a shutdown for long.
            timeout_graceful_shutdown=2,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._socket: socket.socket | None = None
        self._announced: str | None = None
        self.started = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.bound_port}"

    @property
    def bound_port(self) -> int:
        """The port it listens on (differs from `port` when that was 0: any free one)."""
        return int(self._socket.getsockname()[1]) if self._socket is not None else self.port

    def bind(self) -> None:
        """Takes the port now, so that a port in use is a clear error before anything else starts."""
        if self._socket is not None:
            return
        # IPPROTO_TCP named, not left 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
        # connections whose socket says TCP, and with it on every answer written in two parts waits
        # about 40 ms for the client's delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise ServerError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror}", field="port"
            ) from None
        sock.set_inheritable(True)
        self._socket = sock

    def run(self) -> None:
        """Serves until stopped; the URL file is written when it listens and removed at the end."""
        self.bind()
        assert self._socket is not None
        watcher = threading.Thread(target=self._announce, name="gpufleet-api-started", daemon=True)
        watcher.start()
        # uvicorn handles SIGINT and SIGTERM itself, shuts down, then raises the signal again once it
        # has put back the handlers it found: these turn it into KeyboardInterrupt, ending here.
        previous = signal.signal(signal.SIGTERM, _interrupt) if _main_thread() else None
        try:
            self._server.run(sockets=[self._socket])
        except KeyboardInterrupt:
            pass
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            self._server.should_exit = True
            with contextlib.suppress(OSError):
                url_file = self._state_dir / URL_FILE
                if self._announced and url_file.read_text(encoding="utf-8").strip() == self._announced:
                    url_file.unlink()  # unless a newer server on the same state wrote its own
            self._socket.close()

    def stop(self) -> None:
        self._server.should_exit = True

    def _announce(self) -> None:
        while not self._server.started and not self._server.should_exit:
            threading.Event().wait(0.02)
        if self._server.started:
            self._announced = self.url
            (self._state_dir / URL_FILE).write_text(self._announced + "\n", encoding="utf-8")
            # Said before anyone waiting is told: a caller that stops at once (a test) has closed its
            # log stream by the time a later line would be written.
            logging.getLogger("gpufleet.server").info("listening on %s", self.url)
            self.started.set()
