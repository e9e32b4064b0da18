"""Every answer carries the control plane's clock, so clients show ages on the same time line.

A plain ASGI middleware rather than Starlette's `BaseHTTPMiddleware`: that one runs each request
through a task group and a memory stream, which costs every request and stands between a streamed
answer (a watch) and the client's disconnect.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class StampTime:
    """Adds `header: clock().isoformat()` to every HTTP answer as it starts."""

    def __init__(self, app: ASGIApp, *, header: str, clock: Callable[[], datetime]) -> None:
        self.app = app
        self.header = header
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[self.header] = self.clock().isoformat()
            await send(message)

        await self.app(scope, receive, stamped)
