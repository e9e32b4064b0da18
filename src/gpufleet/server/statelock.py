"""One server per state directory: an exclusive lock on a file in it, held for the server's life.

Two servers on one directory would run two runtimes over the same SQLite store (each scheduling the
same GPUs) and the one that exits last-but-one would remove the `server.url` the other wrote. The
lock is `flock`ed, so the kernel drops it when the process ends, `kill -9` included: no stale lock
to clean up after a crash.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

from gpufleet.api.errors import GpuFleetError
from gpufleet.server.serve import URL_FILE

LOCK_FILE = "server.lock"


class StateInUseError(GpuFleetError):
    """Another process serves the state directory."""


class StateLock:
    """The lock of a state directory; `acquire` fails at once if another process holds it."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        handle = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise StateInUseError(
                f"state directory {self.directory} is in use by {self._describe(holder)}"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _describe(self, pid: str) -> str:
        url = None
        with contextlib.suppress(OSError):
            url = (self.directory / URL_FILE).read_text(encoding="utf-8").strip() or None
        who = f"pid {pid}" if pid else "another process"
        return f"another gpufleet server ({who}{', ' + url if url else ''})"
