"""`gpufleet bench api`: the embedded API with many watches open while clients write.

`watchers` clients each hold a watch on ModelVersions from the run's starting resourceVersion (of one
writer's namespace, or with `scope="all"` of every namespace); `writers` clients each create
ModelVersions in a namespace of their own, one after another, for `seconds`; a prober asks /healthz
`PROBES_PER_S` times a second. Afterwards every watch must have delivered every object of its scope:
the final list is the reference, and what a watch still lacks `grace` seconds after the writes ended
counts as missed. The server's resident memory is read from /v1/stats while it runs.

ModelVersions are written because only the inference controller looks at them, and only for the
services that name them: the figures are the API's, not the controllers'. The run labels what it
makes and deletes it at the end unless told to keep it. Latencies are taken by the client, so they
include the time the bench's own event loop took to notice an answer.

Only a server on a loopback address is measured: the load is meant for the machine it runs on.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from gpufleet.api.errors import GpuFleetError, ValidationError
from gpufleet.api.labels import BENCH_RUN_LABEL
from gpufleet.api.resource import API_VERSION
from gpufleet.server.loadclient import Answer, Connection, ProtocolError

Scope = Literal["namespace", "all"]
PREFIX = f"/apis/{API_VERSION}"
PROBES_PER_S = 20
REQUEST_SECONDS = 30.0
"""How long one request may take before it counts as an error."""
OPEN_SECONDS = 60.0
"""How long the watches may take to open before the writes start anyway."""
WATCH_SECONDS = 600
RECONNECTS = 20
"""Times a watch is opened again after it ends early, before it gives up (and counts an error)."""

TARGETS = {
    "p99_create_ms": 1000.0,
    "p99_healthz_ms": 100.0,
    "errors": 0,
    "missed_events": 0,
}
MIN_CREATES_PER_S = 500.0


class BenchError(GpuFleetError):
    """The benchmark cannot run against this server."""


@dataclass(frozen=True, slots=True)
class ApiBenchResult:
    watchers: int
    writers: int
    seconds: float
    scope: str
    creates: int
    creates_per_s: float
    p50_create_ms: float | None
    p99_create_ms: float | None
    p99_healthz_ms: float | None
    healthz_checks: int
    errors: int
    missed_events: int
    events_delivered: int
    server_rss_mib: float | None
    server_peak_rss_mib: float | None
    first_error: str | None

    def targets_met(self) -> dict[str, bool]:
        """Each target of the API's hardening issue, and whether this run met it."""
        met = {
            "p99_create_ms <= 1000": _at_most(self.p99_create_ms, TARGETS["p99_create_ms"]),
            "p99_healthz_ms <= 100": _at_most(self.p99_healthz_ms, TARGETS["p99_healthz_ms"]),
            "errors == 0": self.errors == 0,
            "missed_events == 0": self.missed_events == 0,
            "creates_per_s >= 500": self.creates_per_s >= MIN_CREATES_PER_S,
        }
        return met

    def to_dict(self) -> dict[str, Any]:
        return {
            "watchers": self.watchers,
            "writers": self.writers,
            "seconds": round(self.seconds, 2),
            "scope": self.scope,
            "creates": self.creates,
            "creates_per_s": round(self.creates_per_s, 1),
            "p50_create_ms": _round(self.p50_create_ms),
            "p99_create_ms": _round(self.p99_create_ms),
            "p99_healthz_ms": _round(self.p99_healthz_ms),
            "healthz_checks": self.healthz_checks,
            "errors": self.errors,
            "missed_events": self.missed_events,
            "events_delivered": self.events_delivered,
            "server_rss_mib": _round(self.server_rss_mib),
            "server_peak_rss_mib": _round(self.server_peak_rss_mib),
            "first_error": self.first_error,
            "targets_met": all(self.targets_met().values()),
        }


def _at_most(value: float | None, limit: float) -> bool:
    return value is not None and value <= limit


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def percentile(values: list[float], fraction: float) -> float | None:
    """The value below which `fraction` of `values` lie (nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1))
    return ordered[rank]


def check_loopback(url: str) -> None:
    """Refuses a server that is not on this machine's loopback interface."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValidationError(f"{url} is not a loopback address: this benchmark loads only a local server")


@dataclass
class _Tally:
    """What every client of the run observed."""

    creates: list[float] = field(default_factory=list)
    created: set[str] = field(default_factory=set)
    healthz: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    delivered: int = 0
    rss: list[int] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = what[:300]


Failure = (OSError, ProtocolError, TimeoutError)
"""What a request of the run may fail with: counted as an error, and the client goes on."""


@dataclass
class _Watcher:
    path: str
    namespaces: frozenset[str]
    seen: set[str] = field(default_factory=set)

    async def run(self, connection: Connection, since: str, tally: _Tally) -> None:
        """Follows the watch until cancelled, opening it again from where it ended."""
        cursor = since
        try:
            for _ in range(RECONNECTS):
                try:
                    cursor = await self._follow(connection, cursor, tally)
                except Failure as exc:
                    tally.error(f"watch {self.path}: {type(exc).__name__}: {exc}")
                    await asyncio.sleep(1.0)
            tally.error(f"watch {self.path}: gave up after {RECONNECTS} tries")
        finally:
            await connection.close()

    async def _follow(self, connection: Connection, cursor: str, tally: _Tally) -> str:
        params = {"watch": "true", "resourceVersion": cursor, "timeoutSeconds": str(WATCH_SECONDS)}
        async for line in connection.lines(self.path, params=params):
            cursor = self._note(json.loads(line), cursor, tally)
        return cursor

    def _note(self, event: dict[str, Any], cursor: str, tally: _Tally) -> str:
        if event.get("type") == "ERROR":
            tally.error(f"watch {self.path}: {json.dumps(event)[:200]}")
            return cursor
        meta = event.get("object", {}).get("metadata", {})
        if event.get("type") == "ADDED" and meta.get("namespace") in self.namespaces:
            self.seen.add(f"{meta['namespace']}/{meta['name']}")
            tally.delivered += 1
        return str(meta.get("resourceVersion", cursor))


class ApiBench:
    """One run against the server at `url` with `token` (the admin's: it writes ModelVersions)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        watchers: int = 256,
        writers: int = 32,
        seconds: float = 60.0,
        scope: Scope = "namespace",
        grace: float = 30.0,
        keep: bool = False,
        progress: Callable[[str], None] = lambda line: None,
    ) -> None:
        if watchers < 0 or writers < 1 or seconds <= 0:
            raise ValidationError("needs writers >= 1, watchers >= 0 and seconds > 0")
        check_loopback(url)
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.watchers = watchers
        self.writers = writers
        self.seconds = seconds
        self.scope = scope
        self.grace = grace
        self.keep = keep
        self.progress = progress
        self.run_id = uuid.uuid4().hex[:8]
        self.namespaces = [f"bench-api-{self.run_id}-{index}" for index in range(writers)]

    def measure(self) -> ApiBenchResult:
        return asyncio.run(self._measure())

    def _connection(self) -> Connection:
        return Connection(self.url, self.headers)

    async def _measure(self) -> ApiBenchResult:
        admin = self._connection()
        try:
            await self._check(admin)
            tally = _Tally()
            watchers = [self._watcher(index) for index in range(self.watchers)]
            since = await self._head(admin)
            following = [asyncio.create_task(w.run(self._connection(), since, tally)) for w in watchers]
            sampler = asyncio.create_task(self._sample(tally))
            try:
                await self._until_open(admin, len(watchers))
                self.progress(f"{len(watchers)} watches open; {self.writers} writers for {self.seconds:g} s")
                elapsed = await self._write(tally)
                names = await self._listed(admin, tally)
                self.progress(f"{len(names)} created; waiting for every watch to deliver them")
                missed = await self._settle(watchers, names)
            finally:
                for task in [*following, sampler]:
                    task.cancel()
                await asyncio.gather(*following, sampler, return_exceptions=True)
            rss = await self._rss(admin)
            if not self.keep:
                self.progress(f"deleting the {len(names)} ModelVersions the run made")
                await self._delete(names, tally)
        finally:
            await admin.close()
        return self._result(tally, elapsed, missed, rss)

    # ------------------------------------------------------------------------------- phases

    async def _call(self, connection: Connection, method: str, path: str, **kwargs: Any) -> Answer:
        async with asyncio.timeout(REQUEST_SECONDS):
            return await connection.request(method, path, **kwargs)

    async def _check(self, admin: Connection) -> None:
        try:
            who = await self._call(admin, "GET", "/v1/whoami")
        except Failure as exc:
            raise BenchError(f"cannot reach the gpufleet server at {self.url}: {exc}") from None
        if who.status != 200 or not json.loads(who.body).get("admin"):
            raise BenchError(f"the benchmark needs the admin token (the server answered {who.status})")

    def _watcher(self, index: int) -> _Watcher:
        if self.scope == "all":
            return _Watcher(f"{PREFIX}/modelversions", frozenset(self.namespaces))
        namespace = self.namespaces[index % self.writers]
        return _Watcher(f"{PREFIX}/namespaces/{namespace}/modelversions", frozenset({namespace}))

    async def _head(self, admin: Connection) -> str:
        answer = await self._call(
            admin, "GET", f"{PREFIX}/modelversions", params={"labelSelector": f"{BENCH_RUN_LABEL}=none"}
        )
        if answer.status != 200:
            raise BenchError(f"cannot list ModelVersions: {answer.status} {answer.body[:200]!r}")
        return str(json.loads(answer.body)["metadata"]["resourceVersion"])

    async def _until_open(self, admin: Connection, count: int) -> None:
        """Waits until the server holds every watch (as /v1/stats counts them) before writing."""
        deadline = time.monotonic() + OPEN_SECONDS
        while count and time.monotonic() < deadline:
            stats = await self._stats(admin)
            if stats is None or stats.get("watches", 0) >= count:
                return
            await asyncio.sleep(0.1)

    async def _write(self, tally: _Tally) -> float:
        started = time.monotonic()
        deadline = started + self.seconds
        prober = asyncio.create_task(self._probe(deadline, tally))
        await asyncio.gather(*(self._writer(ns, deadline, tally) for ns in self.namespaces))
        elapsed = time.monotonic() - started
        await prober
        return elapsed

    async def _writer(self, namespace: str, deadline: float, tally: _Tally) -> None:
        path = f"{PREFIX}/namespaces/{namespace}/modelversions"
        connection = self._connection()
        index = 0
        try:
            while time.monotonic() < deadline:
                name, body = (
                    f"{namespace}/m{index}",
                    json.dumps(self._model_version(namespace, index)).encode(),
                )
                index += 1
                sent = time.perf_counter()
                try:
                    answer = await self._call(connection, "POST", path, body=body)
                except Failure as exc:
                    tally.error(f"create: {type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.1)
                    continue
                if answer.status == 201:
                    tally.creates.append(time.perf_counter() - sent)
                    tally.created.add(name)
                else:
                    tally.error(f"create: {answer.status} {answer.body[:200]!r}")
        finally:
            await connection.close()

    def _model_version(self, namespace: str, index: int) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": "ModelVersion",
            "metadata": {
                "name": f"m{index}",
                "namespace": namespace,
                "labels": {BENCH_RUN_LABEL: self.run_id},
            },
            "spec": {"model": "bench", "version": str(index), "uri": f"bench://{self.run_id}/{index}"},
        }

    async def _probe(self, deadline: float, tally: _Tally) -> None:
        connection = self._connection()
        try:
            while time.monotonic() < deadline:
                sent = time.perf_counter()
                try:
                    answer = await self._call(connection, "GET", "/healthz")
                except Failure as exc:
                    tally.error(f"healthz: {type(exc).__name__}: {exc}")
                else:
                    if answer.status == 200:
                        tally.healthz.append(time.perf_counter() - sent)
                    else:
                        tally.error(f"healthz: {answer.status}")
                await asyncio.sleep(1 / PROBES_PER_S)
        finally:
            await connection.close()

    async def _sample(self, tally: _Tally) -> None:
        connection = self._connection()
        try:
            while True:
                rss = await self._rss(connection)
                if rss is not None:
                    tally.rss.append(rss)
                await asyncio.sleep(1.0)
        finally:
            await connection.close()

    async def _listed(self, admin: Connection, tally: _Tally) -> set[str]:
        """Every object the run made, as `namespace/name`, from the server's final list; if the
        server cannot list them, what the writers were told was created (and an error)."""
        params = {"labelSelector": f"{BENCH_RUN_LABEL}={self.run_id}"}
        try:
            answer = await self._call(admin, "GET", f"{PREFIX}/modelversions", params=params)
        except Failure as exc:
            tally.error(f"final list: {type(exc).__name__}: {exc}")
            return set(tally.created)
        if answer.status != 200:
            tally.error(f"final list: {answer.status} {answer.body[:200]!r}")
            return set(tally.created)
        items = json.loads(answer.body)["items"]
        return {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in items}

    async def _settle(self, watchers: list[_Watcher], names: set[str]) -> int:
        """Waits up to `grace` seconds for every watch to deliver its scope; the events still missing."""
        per_namespace = Counter(name.split("/", 1)[0] for name in names)
        wanted = [sum(per_namespace[namespace] for namespace in w.namespaces) for w in watchers]
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            if all(len(w.seen) >= count for w, count in zip(watchers, wanted, strict=True)):
                break
            await asyncio.sleep(0.1)
        # Exactly, once: what each watch delivered of the objects listed in its scope.
        return sum(count - len(w.seen & names) for w, count in zip(watchers, wanted, strict=True))

    async def _delete(self, names: set[str], tally: _Tally) -> None:
        by_namespace: dict[str, list[str]] = {}
        for key in sorted(names):
            namespace, name = key.split("/", 1)
            by_namespace.setdefault(namespace, []).append(name)

        async def delete(namespace: str, batch: list[str]) -> None:
            connection = self._connection()
            try:
                for name in batch:
                    path = f"{PREFIX}/namespaces/{namespace}/modelversions/{name}"
                    try:
                        await self._call(connection, "DELETE", path)
                    except Failure as exc:  # the rest is left behind; the run's label finds it
                        tally.error(f"delete: {type(exc).__name__}: {exc}")
                        return
            finally:
                await connection.close()

        await asyncio.gather(*(delete(namespace, batch) for namespace, batch in by_namespace.items()))

    # ------------------------------------------------------------------------------ results

    async def _stats(self, connection: Connection) -> dict[str, Any] | None:
        try:
            answer = await self._call(connection, "GET", "/v1/stats")
        except Failure:
            return None
        if answer.status != 200:  # an older server: no stats
            return None
        stats: dict[str, Any] = json.loads(answer.body)
        return stats

    async def _rss(self, connection: Connection) -> int | None:
        stats = await self._stats(connection)
        return None if stats is None else int(stats["rssBytes"])

    def _result(self, tally: _Tally, elapsed: float, missed: int, rss: int | None) -> ApiBenchResult:
        mib = 1024 * 1024
        return ApiBenchResult(
            watchers=self.watchers,
            writers=self.writers,
            seconds=elapsed,
            scope=self.scope,
            creates=len(tally.creates),
            creates_per_s=len(tally.creates) / elapsed if elapsed > 0 else 0.0,
            p50_create_ms=_ms(percentile(tally.creates, 0.50)),
            p99_create_ms=_ms(percentile(tally.creates, 0.99)),
            p99_healthz_ms=_ms(percentile(tally.healthz, 0.99)),
            healthz_checks=len(tally.healthz),
            errors=tally.errors,
            missed_events=missed,
            events_delivered=tally.delivered,
            server_rss_mib=None if rss is None else rss / mib,
            server_peak_rss_mib=max(tally.rss) / mib if tally.rss else None,
            first_error=tally.first_error,
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
