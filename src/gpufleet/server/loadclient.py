"""A lean HTTP/1.1 client for the API benchmark: one keep-alive connection, asyncio streams, no more.

The benchmark runs hundreds of clients in one process on the machine it measures. With httpx each
request costs about a millisecond of the benchmark's own CPU, and each chunk of a watch stream about
as much, so the load generator saturated before the server did and its latencies measured its own
event loop. This client does only what the benchmark needs of the gpufleet API: requests with a
Content-Length body, answers framed by Content-Length or chunked (a watch), `Connection: close`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

_LIMIT = 16 * 1024 * 1024
"""Largest line or chunk read at once (an answer's whole list may arrive in one chunk)."""


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 as this client reads it, or the connection closed."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes


class Connection:
    """One connection to `url`'s host; reopened by the next request after the server closes it."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"not an http:// URL: {url}")
        self.host = parts.hostname
        self.port = parts.port or 80
        fixed = {"Host": parts.netloc, **headers}
        self._fixed = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> Answer:
        """Sends a request and reads its whole answer."""
        reused = self._open()
        reader = await self._send(method, path, params, body, content_type)
        try:
            try:
                status, headers = await _head(reader)
            except asyncio.IncompleteReadError as exc:
                if not (reused and not exc.partial):
                    raise
                # The server closed the idle connection as the request went out, so it never read
                # the request: send it again, once, on a new connection.
                await self.close()
                reader = await self._send(method, path, params, body, content_type)
                status, headers = await _head(reader)
            if "content-length" in headers:
                content = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                content = b"".join([chunk async for chunk in _chunks(reader)])
            else:
                content = await reader.read()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            await self.close()
            raise ProtocolError(f"{method} {path}: {exc}") from None
        except BaseException:
            await self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Answer(status, content)

    async def lines(self, path: str, *, params: Mapping[str, str] | None = None) -> AsyncIterator[bytes]:
        """GETs a streamed answer (a watch) and yields its lines as they come; raises ProtocolError
        with the status for an answer that is not 200."""
        reader = await self._send("GET", path, params, None, "application/json")
        try:
            status, headers = await _head(reader)
            if status != 200:
                length = int(headers.get("content-length", "0"))
                raise ProtocolError(f"GET {path}: {status} {(await reader.readexactly(length))[:200]!r}")
            pending = b""
            async for chunk in _chunks(reader):
                *complete, pending = (pending + chunk).split(b"\n")
                for line in complete:
                    if line:
                        yield line
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise ProtocolError(f"GET {path}: {exc}") from None
        finally:
            # A stream read only in part cannot carry the next request.
            await self.close()

    def _open(self) -> bool:
        """Whether the connection is open and will be used again (the server may close it anyway)."""
        if self._writer is None or self._reader is None:
            return False
        return not (self._writer.is_closing() or self._reader.at_eof())

    async def _send(
        self, method: str, path: str, params: Mapping[str, str] | None, body: bytes | None, content_type: str
    ) -> asyncio.StreamReader:
        if not self._open():
            await self.close()
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=_LIMIT)
        assert self._reader is not None and self._writer is not None
        target = f"{path}?{urlencode(params)}" if params else path
        head = f"{method} {target} HTTP/1.1\r\n{self._fixed}"
        if body is not None:
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        self._writer.write(head.encode("latin-1") + b"\r\n" + (body or b""))
        try:
            await self._writer.drain()
        except OSError:
            await self.close()
            raise
        return self._reader


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status and headers (names in lower case) of an answer."""
    status_line = await reader.readuntil(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ProtocolError(f"not an HTTP/1.1 answer: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The chunks of a chunked body, until the last (empty) one."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any
                pass
            return
        chunk = await reader.readexactly(size)
        await reader.readexactly(2)
        yield chunk
