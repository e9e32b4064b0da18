"""Informers: list then watch, bookmarks, relist on 410, backoff while the server is away."""

from __future__ import annotations

import random
import threading
import time

from gpufleet.kube.informer import Backoff, Informer, Informers
from gpufleet.kube.resources import NODE, POD

from .fakeapi import FakeApiServer


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def recorder(informer: Informer) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda event, old, new: seen.append((event, (new or old)["metadata"]["name"])))
    return seen


def test_list_then_watch_keeps_the_cache_and_tells_handlers_in_order(api: FakeApiServer) -> None:
    api.put("/api/v1/nodes", node("a"))
    informer = Informer(api, NODE, watch_seconds=1)
    seen = recorder(informer)
    informer.relist()
    assert informer.synced and [n["metadata"]["name"] for n in informer.items()] == ["a"]
    assert informer.items()[0]["kind"] == "Node"  # list items get their kind back
    api.put("/api/v1/nodes", node("b"))
    api.request("PATCH", "/api/v1/nodes/a", body={"metadata": {"labels": {"rack": "r1"}}},
                content_type="application/merge-patch+json")  # fmt: skip
    api.request("DELETE", "/api/v1/nodes/b")
    informer.step()
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert informer.get("a")["metadata"]["labels"] == {"rack": "r1"}
    assert informer.get("b") is None


def test_bookmarks_move_the_resource_version_without_events(api: FakeApiServer) -> None:
    informer = Informer(api, NODE, watch_seconds=1)
    seen = recorder(informer)
    informer.relist()
    api.put("/api/v1/pods".replace("pods", "namespaces"), {"metadata": {"name": "elsewhere"}})
    informer.step()  # nothing about nodes happened; the watch ends with a bookmark
    assert seen == [] and informer.resource_version == str(api.head)


def test_a_410_relists_and_reports_the_difference(api: FakeApiServer) -> None:
    api.put("/api/v1/nodes", node("a"))
    api.put("/api/v1/nodes", node("b"))
    informer = Informer(api, NODE, watch_seconds=1, backoff=Backoff(initial=0.01, rng=random.Random(0)))
    seen = recorder(informer)
    informer.relist()
    api.request("DELETE", "/api/v1/nodes/a")
    api.put("/api/v1/nodes", node("c"))
    api.compact()  # the informer's resourceVersion is now too old
    stop = threading.Event()
    thread = informer.start(stop)
    deadline = time.monotonic() + 5
    while informer.relists < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert informer.relists == 2
    assert seen[2:] == [("DELETED", "a"), ("ADDED", "c")]
    assert sorted(informer.get(k)["metadata"]["name"] for k in ("b", "c")) == ["b", "c"]


def test_unavailable_server_is_retried_with_growing_delays(api: FakeApiServer) -> None:
    api.put("/api/v1/nodes", node("a"))
    delays: list[float] = []

    class Recording(Backoff):
        def delay(self) -> float:
            delays.append(Backoff.delay(self))
            return 0.001

    informer = Informer(
        api, NODE, watch_seconds=1, backoff=Recording(initial=1, maximum=4, rng=random.Random(1))
    )
    api.fail_next(4)
    stop = threading.Event()
    thread = informer.start(stop)
    assert informer.wait_for_sync(5)
    stop.set()
    thread.join(5)
    assert len(delays) == 4
    assert delays[0] <= 1 and 1 <= delays[2] <= 4 and delays[3] <= 4  # doubling, with jitter, capped
    assert informer.get("a") is not None


def test_backoff_doubles_caps_and_resets() -> None:
    backoff = Backoff(initial=1, maximum=8, rng=random.Random(3))
    upper = [1, 2, 4, 8, 8]
    for bound in upper:
        assert bound / 2 <= backoff.delay() <= bound
    backoff.reset()
    assert backoff.delay() <= 1


def test_shared_informers_are_one_per_resource(api: FakeApiServer) -> None:
    informers = Informers(api, watch_seconds=1)
    assert informers.informer(POD) is informers.informer(POD)
    assert informers.informer(POD, namespace="a") is not informers.informer(POD)
    api.put("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    stop = threading.Event()
    informers.start(stop)
    assert informers.wait_for_sync(5)
    assert informers.informer(POD).get("a/p") is not None
    stop.set()


def test_a_handler_that_raised_is_told_again_and_counted(api: FakeApiServer) -> None:
    from gpufleet.kube.informer import HANDLER_ERRORS

    api.put("/api/v1/nodes", node("a"))
    informer = Informer(api, NODE, watch_seconds=1)
    fails = {"a": 1}
    seen: list[tuple[str, str, str]] = []

    def flaky(event: str, old: dict | None, new: dict | None) -> None:
        name = (new or old or {})["metadata"]["name"]
        if fails.get(name):
            fails[name] -= 1
            raise RuntimeError("a handler bug")
        seen.append((event, name, ((new or {}).get("metadata", {}).get("labels") or {}).get("rack", "")))

    others = recorder(informer)
    informer.add_handler(flaky)
    before = HANDLER_ERRORS.labels("nodes")._value.get()
    informer.relist()
    assert seen == [] and others == [("ADDED", "a")]  # the other handler was not held up
    assert HANDLER_ERRORS.labels("nodes")._value.get() == before + 1
    api.request("PATCH", "/api/v1/nodes/a", body={"metadata": {"labels": {"rack": "r1"}}},
                content_type="application/merge-patch+json")  # fmt: skip
    fails["a"] = 1  # fails on the change too
    api.put("/api/v1/nodes", node("b"))
    informer.step()
    # b came after: at that line, a is handed over again as it is now, with the change it missed.
    assert ("MODIFIED", "a", "r1") in seen and ("ADDED", "b", "") in seen


def test_the_first_list_is_served_from_the_watch_cache_and_a_relist_reads_through(api: FakeApiServer) -> None:
    asked: list[dict] = []

    class Recording:
        def request(self, method: str, path: str, **kwargs: object) -> dict:
            if method == "GET":
                asked.append(dict(kwargs.get("query") or {}))  # type: ignore[call-overload]
            return api.request(method, path, **kwargs)  # type: ignore[arg-type]

        def watch(self, path: str, **kwargs: object) -> object:
            return api.watch(path, **kwargs)  # type: ignore[arg-type]

    informer = Informer(Recording(), NODE, watch_seconds=1)  # type: ignore[arg-type]
    informer.relist()
    informer.relist()  # what a 410 Gone leads to
    assert asked == [{"resourceVersion": "0"}, {}]


def pending_pod(name: str, node: str | None = None) -> dict:
    spec = {"containers": [{"name": "c"}], **({"nodeName": node} if node else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def test_a_paged_first_list_hands_over_the_known_first_objects_then_each_page(api: FakeApiServer) -> None:
    for name in ("a", "b", "c", "d", "e"):
        api.put("/api/v1/namespaces/ns/pods", pending_pod(name))
    api.put("/api/v1/namespaces/ns/pods", pending_pod("z-bound", node="gpu-1"))
    api.put("/api/v1/namespaces/ns/pods", pending_pod("y-gone", node="gpu-1"))
    informer = Informer(api, POD, watch_seconds=1, page_size=2, known_first="spec.nodeName!=")
    seen: list[tuple[str, str, bool, bool]] = []

    def note(event: str, old: dict | None, new: dict | None) -> None:
        name = (new or old or {})["metadata"]["name"]
        seen.append((event, name, informer.ready, informer.synced))
        if name == "a":  # deleted after the bound pods were listed, before its page
            api.request("DELETE", "/api/v1/namespaces/ns/pods/y-gone", body={"gracePeriodSeconds": 0})

    informer.add_handler(note)
    informer.relist()
    # The bound pods and the first page before anyone may use the cache; then the other pages, while
    # ready and not synced.
    assert seen[:2] == [("ADDED", "y-gone", False, False), ("ADDED", "z-bound", False, False)]
    assert [s[1] for s in seen[2:7]] == ["a", "b", "c", "d", "e"]
    assert not any(s[2] for s in seen[2:4])
    assert all(s[2] and not s[3] for s in seen[4:])
    assert seen[-1][:2] == ("DELETED", "y-gone")  # missing from the pages: gone
    assert informer.synced and sorted(informer.keys()) == [f"ns/{n}" for n in "abcde"] + ["ns/z-bound"]
    api.put("/api/v1/namespaces/ns/pods", pending_pod("f"))
    informer.step()  # the watch starts where the pages' snapshot was
    assert seen[-1][:2] == ("ADDED", "f")


def test_held_pages_wait_for_the_consumer_after_the_first(api: FakeApiServer) -> None:
    for name in ("a", "b", "c", "d", "e"):
        api.put("/api/v1/namespaces/ns/pods", pending_pod(name))
    informer = Informer(api, POD, watch_seconds=1, page_size=2, hold_pages=True)
    lister = threading.Thread(target=informer.relist, daemon=True)
    lister.start()
    assert informer.wait_until_ready(5)
    lister.join(0.3)
    # The consumer has the first page; the rest waits for it rather than competing with its first pass.
    assert lister.is_alive() and not informer.synced
    assert sorted(informer.keys()) == ["ns/a", "ns/b"]
    informer.release_pages()
    lister.join(5)
    assert informer.synced and len(informer.keys()) == 5


def test_without_paging_ready_and_synced_come_together(api: FakeApiServer) -> None:
    api.put("/api/v1/nodes", node("a"))
    informer = Informer(api, NODE, watch_seconds=1)
    assert not informer.ready
    informer.relist()
    assert informer.ready and informer.synced


def test_the_collector_waits_for_the_first_lists_then_leaves_their_objects_out(api: FakeApiServer) -> None:
    import gc

    from gpufleet.kube.informer import collect_after_sync

    api.put("/api/v1/nodes", node("a"))
    informers = Informers(api, watch_seconds=1)
    nodes = informers.informer(NODE)
    stop = threading.Event()
    try:
        thread = collect_after_sync(informers, stop)
        assert not gc.isenabled()  # while the lists come in
        nodes.relist()
        thread.join(5)
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        stop.set()
        gc.unfreeze()
        gc.enable()


def test_the_collector_comes_back_on_a_stop_before_any_list(api: FakeApiServer) -> None:
    import gc

    from gpufleet.kube.informer import collect_after_sync

    informers = Informers(api, watch_seconds=1)
    informers.informer(NODE)
    stop = threading.Event()
    try:
        thread = collect_after_sync(informers, stop)
        stop.set()
        thread.join(5)
        assert gc.isenabled()
    finally:
        gc.enable()
