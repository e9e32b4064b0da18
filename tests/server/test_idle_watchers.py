"""Watches and long polls wait without a thread each, and end when their clients go away.

Each worker thread of the server once held one idle watch or long poll: about 40 of them froze the
whole API, /healthz included. These tests hold more than that open on a real server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from gpufleet.server.auth import TokenRegistry
from gpufleet.server.serve import ApiServer

from .helpers import API, job, job_path, queue

WATCHES = 60
LONG_POLLS = 60
SAFETY = 30.0
"""Seconds after which a wait counts as failed: a net for a broken server, not a figure the test checks."""


def _client(server: ApiServer, tokens: TokenRegistry) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url,
        headers={"Authorization": f"Bearer {tokens.admin_token}"},
        limits=httpx.Limits(max_connections=None),
        timeout=SAFETY,
    )


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Polls `check` until it holds; fails after SAFETY seconds."""
    deadline = asyncio.get_running_loop().time() + SAFETY
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"still not {what} after {SAFETY}s"
        await asyncio.sleep(0.05)


async def _stats(client: httpx.AsyncClient) -> dict[str, Any]:
    answer = await client.get("/v1/stats")
    assert answer.status_code == 200, answer.text
    stats: dict[str, Any] = answer.json()
    return stats


async def _open(client: httpx.AsyncClient) -> list[asyncio.Task[None]]:
    """WATCHES idle watches of trainingjobs and LONG_POLLS idle long polls of the change log."""

    async def watch() -> None:
        params = {"watch": "true", "timeoutSeconds": 600}
        async with client.stream("GET", job_path(), params=params, timeout=None) as answer:
            async for _ in answer.aiter_lines():
                pass

    async def long_poll() -> None:
        head = (await client.get("/v1/changes", params={"limit": 1})).json()["resourceVersion"]
        params = {"resourceVersion": head, "timeoutSeconds": 600, "kind": "GPUPool"}
        await client.get("/v1/changes", params=params, timeout=None)

    tasks = [asyncio.create_task(watch()) for _ in range(WATCHES)]
    tasks += [asyncio.create_task(long_poll()) for _ in range(LONG_POLLS)]
    return tasks


def test_idle_watches_and_long_polls_leave_the_api_free(
    live_server: ApiServer, tokens: TokenRegistry
) -> None:
    async def scenario() -> None:
        async with _client(live_server, tokens) as admin, _client(live_server, tokens) as watchers:
            tasks = await _open(watchers)

            async def all_open() -> bool:
                stats = await _stats(admin)
                return bool(stats["watches"] == WATCHES and stats["longPolls"] == LONG_POLLS)

            await _until(all_open, "all open")
            # Every watch and long poll is now waiting on the server; the API still answers.
            assert (await admin.get("/healthz")).json() == {"status": "ok"}
            assert (await admin.post(f"{API}/queues", json=queue("team-a"))).status_code == 201
            created = await admin.post(job_path(), json=job("j1"))
            assert created.status_code == 201, created.text
            assert all(not task.done() for task in tasks), "a watch or long poll ended early"

            # The clients go away without reading on: the server stops waiting for them.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await watchers.aclose()

            async def all_gone() -> bool:
                stats = await _stats(admin)
                return bool(stats["watches"] == 0 and stats["longPolls"] == 0)

            await _until(all_gone, "all ended")

    asyncio.run(scenario())


def test_a_long_poll_answers_the_change_it_waited_for(live_server: ApiServer, tokens: TokenRegistry) -> None:
    async def scenario() -> None:
        async with _client(live_server, tokens) as client:
            assert (await client.post(f"{API}/queues", json=queue("team-a"))).status_code == 201
            head = (await client.get("/v1/changes", params={"limit": 1})).json()["resourceVersion"]
            params = {"resourceVersion": head, "timeoutSeconds": 600, "kind": "TrainingJob"}
            waiting = asyncio.create_task(client.get("/v1/changes", params=params))
            await _until(lambda: _open_long_polls(client, 1), "waiting")
            # A change of another kind does not answer it; the job does.
            assert (await client.post(f"{API}/queues", json=queue("team-b"))).status_code == 201
            assert (await client.post(job_path(), json=job("j1"))).status_code == 201
            answer = (await waiting).json()
            assert [item["object"]["metadata"]["name"] for item in answer["items"]] == ["j1"]
            assert int(answer["resourceVersion"]) == int(answer["items"][-1]["resourceVersion"])

    asyncio.run(scenario())


async def _open_long_polls(client: httpx.AsyncClient, count: int) -> bool:
    return bool((await _stats(client))["longPolls"] == count)


def test_every_watch_sees_every_event(live_server: ApiServer, tokens: TokenRegistry) -> None:
    """Watches started before, during and long after a burst of writes from several clients, some
    from further back than the server keeps in memory, each deliver every job, once, in order."""
    namespaces = [f"ns-{index}" for index in range(4)]
    per_writer = 90

    async def scenario() -> None:
        async with _client(live_server, tokens) as client:
            assert (await client.post(f"{API}/queues", json=queue("team-a"))).status_code == 201
            start = (await client.get(job_path())).json()["metadata"]["resourceVersion"]
            seen: dict[str, list[tuple[int, str]]] = {}

            async def watch(label: str, namespace: str | None, since: str) -> None:
                path = f"{API}/trainingjobs" if namespace is None else job_path(namespace=namespace)
                params = {"watch": "true", "resourceVersion": since, "timeoutSeconds": SAFETY}
                lines = seen.setdefault(label, [])
                async with client.stream("GET", path, params=params) as answer:
                    assert answer.status_code == 200
                    async for line in answer.aiter_lines():
                        event = json.loads(line)
                        if event["type"] == "ADDED":
                            meta = event["object"]["metadata"]
                            lines.append(
                                (int(meta["resourceVersion"]), f"{meta['namespace']}/{meta['name']}")
                            )
                        if len(lines) == expected(namespace):
                            return

            def expected(namespace: str | None) -> int:
                return per_writer * (len(namespaces) if namespace is None else 1)

            async def write(namespace: str) -> None:
                for index in range(per_writer):
                    answer = await client.post(
                        job_path(namespace=namespace), json=job(f"j{index}", namespace)
                    )
                    assert answer.status_code == 201, answer.text

            early = [asyncio.create_task(watch(f"early-{ns}", ns, start)) for ns in namespaces]
            early.append(asyncio.create_task(watch("early-all", None, start)))
            await asyncio.gather(*(write(ns) for ns in namespaces[:2]))
            during = asyncio.create_task(watch("during-all", None, start))
            await asyncio.gather(*(write(ns) for ns in namespaces[2:]))
            late = asyncio.create_task(watch("late-all", None, start))
            await asyncio.wait_for(asyncio.gather(*early, during, late), SAFETY)

            listed = (await client.get(f"{API}/trainingjobs")).json()["items"]
            names = {f"{obj['metadata']['namespace']}/{obj['metadata']['name']}" for obj in listed}
            assert len(names) == per_writer * len(namespaces)
            for label, lines in seen.items():
                scope = label.split("-", 1)[1]
                wanted = names if scope == "all" else {n for n in names if n.startswith(scope + "/")}
                assert [name for _, name in lines if name in wanted] == [name for _, name in lines]
                assert {name for _, name in lines} == wanted, label
                assert len(lines) == len(wanted), f"{label} saw an event twice"
                assert [version for version, _ in lines] == sorted(version for version, _ in lines)

    asyncio.run(scenario())


def test_a_watch_ends_with_a_bookmark_to_resume_from(live_server: ApiServer, tokens: TokenRegistry) -> None:
    async def scenario() -> None:
        async with _client(live_server, tokens) as client:
            assert (await client.post(f"{API}/queues", json=queue("team-a"))).status_code == 201
            start = (await client.get(job_path())).json()["metadata"]["resourceVersion"]
            assert (await client.post(job_path(), json=job("j1"))).status_code == 201
            params = {"watch": "true", "resourceVersion": start, "timeoutSeconds": 0.5}
            answer = await client.get(job_path(), params=params)
            events = [json.loads(line) for line in answer.text.splitlines()]
            assert [event["type"] for event in events] == ["ADDED", "BOOKMARK"]
            resume = events[-1]["object"]["metadata"]["resourceVersion"]
            assert resume == events[0]["object"]["metadata"]["resourceVersion"]
            assert (await client.post(f"{API}/queues", json=queue("team-b"))).status_code == 201
            head = (await client.get(f"{API}/queues")).json()["metadata"]["resourceVersion"]
            params = {"watch": "true", "resourceVersion": resume, "timeoutSeconds": 0.5}
            again = [
                json.loads(line) for line in (await client.get(job_path(), params=params)).text.splitlines()
            ]
            # Only the bookmark: the queue is not a job, and the cursor moved past it.
            assert [event["type"] for event in again] == ["BOOKMARK"]
            assert again[0]["object"]["metadata"]["resourceVersion"] == head

    asyncio.run(scenario())
