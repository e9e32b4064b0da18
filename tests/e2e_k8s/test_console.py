"""`gpufleet kube console` against a real API server: the page and its JSON show what gpufleet's
scheduler did in the cluster (GPUs bound, a GPU failed, why a pod waits) and the cluster's Events."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import server.test_console_browser as page_test
from gpufleet.api.reasons import pending_lines
from gpufleet.kube.transport import MERGE_PATCH, Transport

from .conftest import RUN, Cluster, wait_for

pytestmark = pytest.mark.k8s

# The embedded console's browser test drives Debian's Chromium; the same page is driven here with its
# fixtures: `browser` (Selenium on that Chromium) and `shots` (the screenshots' folder).
browser = page_test.browser
shots = page_test.shots
NO_BROWSER = page_test.CHROMIUM is None or page_test.CHROMEDRIVER is None


class Console:
    """The command, run as a user runs it; its URL and token as it prints them."""

    def __init__(self, process: subprocess.Popen[str], url: str, token: str) -> None:
        self.process, self.url, self.token = process, url, token
        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def view(self) -> dict[str, Any]:
        answer = self.client.get("/v1/console")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


@pytest.fixture
def console(cluster: Cluster) -> Iterator[Console]:
    with started(cluster) as made:
        yield made


@contextlib.contextmanager
def started(cluster: Cluster, *options: str) -> Iterator[Console]:
    """`gpufleet kube console` with these options, once it answers; stopped on the way out."""
    command = [
        *(sys.executable, "-m", "gpufleet.cli.main", "kube", "console", "--port", "0", *options),
        *("--kubeconfig", os.environ["KUBECONFIG"], "--scheduler-name", cluster.scheduler_name),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        # Lines before the URL are the informers' retries while a fresh API server warms up.
        said: list[str] = []
        found = None
        while found is None and len(said) < 50:
            line = process.stdout.readline()
            if not line:
                break
            said.append(line)
            found = re.search(r"(http://\S+)/#token=(\S+)", line)
        assert found, f"no URL in {''.join(said)!r}"
        made = Console(process, found.group(1), found.group(2))
        wait_for("the console to answer", lambda: _answers(made), timeout=30)
        yield made
    finally:
        process.terminate()
        process.wait(10)


def _answers(console: Console) -> bool:
    try:
        return console.client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def _gpus(view: dict[str, Any], node: str) -> list[dict[str, Any]]:
    for pool in view["map"] or []:
        for rack in pool["racks"]:
            for shown in rack["nodes"]:
                if shown["name"] == node:
                    return list(shown["gpus"])
    return []


def test_the_console_shows_the_cluster_as_the_scheduler_left_it(
    api: Transport, cluster: Cluster, scheduler: Any, console: Console
) -> None:
    busy = cluster.node("con-0", labels={"gpufleet.io/rack": f"r-{RUN}"})
    spare = cluster.node("con-1", labels={"gpufleet.io/rack": f"r-{RUN}"})
    cluster.pod("con-a", gpus=8)
    cluster.pod("con-big", gpus=16)
    wait_for("con-a bound", lambda: cluster.node_of("con-a"))
    waiting = wait_for("con-big's reason", lambda: cluster.condition("con-big", "PodScheduled"))

    # The map: the bound pod's GPUs, by the scheduler's note, the other node idle.
    view = wait_for("both nodes on the map", lambda: (v := console.view()) and _gpus(v, spare) and v)
    held = _gpus(view, cluster.node_of("con-a") or "")
    assert [g["state"] for g in held] == ["allocated"] * 8 and held[0]["holders"] == ["con-a"]
    idle = spare if cluster.node_of("con-a") == busy else busy
    assert {g["state"] for g in _gpus(view, idle)} == {"idle"}

    # The waiting pod, with the scheduler's reason in describe's words; the run's queue.
    row = next(w for w in view["work"] if (w["namespace"], w["name"]) == (cluster.namespace, "con-big"))
    kind, _, message = waiting["message"].partition(": ")
    assert row["pending"] == {"type": kind, "lines": pending_lines({"type": kind, "message": message})[1]}
    assert row["queue"] == cluster.queue
    assert any(q["name"] == cluster.queue for q in view["queues"])
    assert any(q["name"] == cluster.queue and q["gpus"] == 8 for q in view["cost"]["queues"])

    # A GPU the agent reports failed turns red within 5 s.
    note = {"metadata": {"annotations": {"gpufleet.io/unhealthy-gpus": "3"}}}
    api.request("PATCH", f"/api/v1/nodes/{idle}", body=note, content_type=MERGE_PATCH)
    wait_for("GPU 3 failed", lambda: _gpus(console.view(), idle)[3]["state"] == "failed", timeout=5)

    # The Events: the scheduler's FailedScheduling about the waiting pod, then new ones live.
    first = console.client.get("/v1/changes", params={"kind": "Event", "limit": 500}).json()
    about = [c["object"]["spec"] for c in first["items"] if c["object"]["spec"]["involvedName"] == "con-big"]
    assert any(e["reason"] == "FailedScheduling" and e["type"] == "Warning" for e in about)
    cluster.pod("con-later", gpus=16)
    cursor = {"kind": "Event", "resourceVersion": first["resourceVersion"], "timeoutSeconds": 2}

    def later_event() -> bool:
        page = console.client.get("/v1/changes", params=cursor).json()
        cursor["resourceVersion"] = page["resourceVersion"]
        return any(c["object"]["spec"]["involvedName"] == "con-later" for c in page["items"])

    wait_for("the later pod's event, live", later_event, timeout=30)


@pytest.mark.skipif(NO_BROWSER, reason="chromium and chromedriver are not installed")
def test_the_page_in_a_browser_shows_the_cluster_with_no_error(
    cluster: Cluster, scheduler: Any, console: Console, browser: Any, shots: Path
) -> None:
    node = cluster.node("web-0", labels={"gpufleet.io/rack": f"r-{RUN}"})
    cluster.pod("web-a", gpus=4)
    cluster.pod("web-big", gpus=16)
    wait_for("web-a bound", lambda: cluster.node_of("web-a"))
    wait_for("web-big's reason", lambda: cluster.condition("web-big", "PodScheduled"))
    browser.get(f"{console.url}/#token={console.token}")  # the URL the command prints signs in
    held = f'[data-node="{node}"] [data-state="allocated"]'
    page_test._until(
        "the node's GPUs on the map", lambda: len(browser.find_elements("css selector", held)) == 4, 15
    )
    page_test._visit_all(browser, shots, "kube")
    page_test._open(browser, "work")
    row = f'tr[data-work="{cluster.namespace}/web-big"] pre.reason'
    shown = page_test._until("the waiting pod's reason", lambda: page_test._text(browser, row), 5)
    assert shown.startswith("Pending: NoFit")
    page_test._open(browser, "events")
    page_test._until(
        "the scheduler's event", lambda: "FailedScheduling" in page_test._text(browser, "#event-rows"), 10
    )
    assert page_test._errors(browser) == []
