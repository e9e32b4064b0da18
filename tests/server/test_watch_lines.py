"""A watch's lines, read straight from the generator the stream sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gpufleet.api.validation import parse_object
from gpufleet.server.auth import Principal
from gpufleet.server.changefeed import ChangeFeed, Interest
from gpufleet.server.operations import Operations
from gpufleet.server.watches import watch_lines
from gpufleet.store import SqliteStore

from .helpers import job

ADMIN = Principal(queue=None, token_id="test")
JOBS = Interest(frozenset({"TrainingJob"}), None)


def _lines(feed: ChangeFeed, ops: Operations, since: int, timeout: float) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        chunks = [chunk async for chunk in watch_lines(feed, ops, ADMIN, JOBS, since, timeout)]
        return [json.loads(line) for line in b"".join(chunks).splitlines()]

    return asyncio.run(collect())


def test_a_watch_behind_what_the_store_keeps_ends_with_an_error_to_list_again(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path, synchronous="OFF", event_retention=5) as store:
        feed, ops = ChangeFeed(store), Operations(store)
        start = int(store.resource_version)
        for index in range(300):  # the log is compacted every 256 writes, down to the last 5
            store.create(parse_object(job(f"j{index}")))
        lines = _lines(feed, ops, start, 5.0)
    assert [line["type"] for line in lines] == ["ERROR"]
    error = lines[0]["object"]["error"]
    assert error["status"] == 410 and error["type"] == "GoneError" and error["field"] == "resourceVersion"


def test_a_watch_reads_the_store_page_by_page_then_ends_with_a_bookmark(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path, synchronous="OFF") as store:
        feed, ops = ChangeFeed(store), Operations(store)
        start = int(store.resource_version)
        for index in range(600):  # more than two pages of the store
            store.create(parse_object(job(f"j{index}")))
        lines = _lines(feed, ops, start, 0.0)
        head = store.resource_version
    assert [line["object"]["metadata"]["name"] for line in lines[:-1]] == [f"j{i}" for i in range(600)]
    assert lines[-1] == {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": head}}}
