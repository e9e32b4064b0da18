"""Watch streams and long polls as coroutines: they wait on the change feed, not in a thread.

A watch (`GET .../{plural}?watch=true`) is an NDJSON stream of the events after its
resourceVersion, then a BOOKMARK with where to resume; a long poll (`GET /v1/changes` with
`timeoutSeconds`) waits until there is something to answer. Neither holds a thread while it waits
(the store is read in a worker thread only for the moment of a read), and both end as soon as their
client goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gpufleet.api.errors import GoneError
from gpufleet.server.access import EVENT
from gpufleet.server.auth import Principal
from gpufleet.server.changefeed import ChangeFeed, FeedEvent, Interest, Page
from gpufleet.server.errors import error_body, status_of
from gpufleet.server.operations import Operations

WATCHES = "watches"
LONG_POLLS = "longPolls"
BATCH = 256
"""Events read from the store at once by a watch further behind than the feed's memory."""


async def watch_lines(
    feed: ChangeFeed,
    ops: Operations,
    principal: Principal,
    interest: Interest,
    since: int,
    timeout: float,
) -> AsyncIterator[bytes]:
    """The lines of a watch from `since` for `timeout` seconds: events as they come, each burst in
    one chunk, then a BOOKMARK. A client that falls further behind than the store keeps events
    gets an ERROR line (410, list again) and the end."""
    deadline = time.monotonic() + timeout
    cursor = since
    with feed.client(WATCHES):
        while True:
            page, behind = feed.snapshot(cursor, interest), False
            if page is None:
                try:
                    page = await run_in_threadpool(_read_store, ops, interest, cursor)
                except GoneError as exc:
                    yield _error_line(exc)
                    return
                behind = len(page.events) == BATCH  # a full page stops short of the head
            cursor = page.cursor
            if page.events:
                lines = [event.line for event in await visible(ops, principal, page.events)]
                if lines:
                    yield b"".join(lines)
            # A watch behind the feed's memory catches up page by page, whatever its timeout; once
            # caught up, the timeout ends it even while events keep coming.
            if behind:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await feed.wait(cursor, interest, remaining)  # at once if more came meanwhile
        bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(cursor)}}}
        yield json.dumps(bookmark).encode() + b"\n"


def _read_store(ops: Operations, interest: Interest, cursor: int) -> Page:
    """A page of events from the store itself (in a worker thread), with their lines written."""
    events, after = ops.read_events(interest.kinds, interest.namespace, cursor, BATCH)
    return Page([FeedEvent.of(event) for event in events], after)


async def visible(ops: Operations, principal: Principal, events: list[FeedEvent]) -> list[FeedEvent]:
    """The events the principal may read. An Event is readable if its object is, which takes a
    store read: those are decided in a worker thread, the rest on the loop."""
    if principal.admin:
        return events
    if any(event.object.kind == EVENT for event in events):
        return await run_in_threadpool(_readable, ops, principal, events)
    return _readable(ops, principal, events)


def _readable(ops: Operations, principal: Principal, events: list[FeedEvent]) -> list[FeedEvent]:
    readable = ops.reader(principal)
    return [event for event in events if readable(event.object)]


def _error_line(exc: GoneError) -> bytes:
    status = status_of(exc)
    error = error_body(type(exc).__name__, exc.detail, status, obj=exc.obj, field=exc.field)
    return json.dumps({"type": "ERROR", "object": error}).encode() + b"\n"


class EventStream(StreamingResponse):
    """An NDJSON stream that stops as soon as its client goes away.

    Starlette listens for the disconnect only under ASGI < 2.4 and otherwise learns of it when a
    send fails; a watch may send nothing for minutes, so it listens itself, whatever the server.
    """

    def __init__(self, lines: AsyncIterator[bytes]) -> None:
        super().__init__(lines, media_type="application/x-ndjson")
        self._lines = lines

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def stream() -> None:
                with contextlib.suppress(OSError):  # ASGI 2.4: the client left during a send
                    await self.stream_response(send)
                group.cancel_scope.cancel()

            group.start_soon(stream)
            await until_disconnected(receive)
            group.cancel_scope.cancel()
        # A stream cancelled while sending leaves the generator suspended at a `yield`: close it now,
        # so that it stops counting as an open watch at once rather than whenever it is collected.
        with anyio.CancelScope(shield=True):
            await _close(self._lines)


async def _close(lines: AsyncIterator[bytes]) -> None:
    close: Callable[[], Awaitable[Any]] | None = getattr(lines, "aclose", None)
    if close is not None:
        await close()


async def until_disconnected(receive: Receive) -> None:
    """Returns when the client has gone (or the answer is complete, which servers report alike)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Receive, waiting: Awaitable[None]) -> bool:
    """Awaits `waiting` unless the client goes away first; whether the client is still there."""
    work = asyncio.ensure_future(waiting)
    gone = asyncio.ensure_future(until_disconnected(receive))
    try:
        done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        work.cancel()
        gone.cancel()
    return work in done
