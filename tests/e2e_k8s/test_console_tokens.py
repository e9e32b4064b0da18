"""Queue tokens of `gpufleet kube console` against a real API server: `gpufleet kube token create`
keeps the token's digest in a Secret, and the console started after it lets the token see its queue,
its pods' Events and no map; the admin token in the printed URL still sees every queue."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from gpufleet.kube.console_tokens import SECRET_NAME
from gpufleet.kube.transport import ApiError, Transport

from .conftest import RUN, Cluster, wait_for
from .test_console import started

pytestmark = pytest.mark.k8s


def _as(console: Any, token: str, path: str, **params: Any) -> dict[str, Any]:
    answer = httpx.get(
        f"{console.url}{path}", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_queue_token_sees_its_queue_and_its_pods_events_only(
    api: Transport, cluster: Cluster, scheduler: Any
) -> None:
    other = f"e2e-{RUN}-other"
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": other},
        "spec": {"quotas": {"H100-80GB": {"nominal": 0}}},
    }
    api.request("POST", "/apis/gpufleet.io/v1alpha1/queues", body=body)
    secret = f"/api/v1/namespaces/{cluster.namespace}/secrets/{SECRET_NAME}"
    try:
        cluster.node("tok-0", labels={"gpufleet.io/rack": f"r-{RUN}"})
        cluster.pod("tok-a", gpus=2)
        cluster.pod("tok-big", gpus=16)
        wait_for("tok-a bound", lambda: cluster.node_of("tok-a"))
        wait_for("tok-big's reason", lambda: cluster.condition("tok-big", "PodScheduled"))
        made = subprocess.run(
            [sys.executable, "-m", "gpufleet.cli.main", "kube", "token", "create", "--queue", cluster.queue,
             "--namespace", cluster.namespace, "--kubeconfig", os.environ["KUBECONFIG"]],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        token = made.stdout.strip()
        assert token not in str(api.request("GET", secret))  # only its digest is kept
        with started(cluster, "--namespace", cluster.namespace) as console:
            view = _as(console, token, "/v1/console")
            assert view["who"] == {"admin": False, "queue": cluster.queue}
            assert [q["name"] for q in view["queues"]] == [cluster.queue] and view["map"] is None
            admin = console.view()
            assert {cluster.queue, other} <= {q["name"] for q in admin["queues"]}

            def events() -> list[tuple[str, str]]:
                items = _as(console, token, "/v1/changes", kind="Event", limit=500)["items"]
                return [
                    (c["object"]["spec"]["involvedKind"], c["object"]["spec"]["involvedName"]) for c in items
                ]

            # The scheduler's FailedScheduling about its waiting pod; nothing about anyone else's.
            seen = wait_for(
                "an Event about tok-big", lambda: (e := events()) and ("Pod", "tok-big") in e and e
            )
            assert set(seen) <= {("Pod", "tok-a"), ("Pod", "tok-big"), ("Queue", cluster.queue)}, seen
            refused = httpx.get(
                f"{console.url}/v1/console", headers={"Authorization": "Bearer gft_x"}, timeout=30
            )
            assert refused.status_code == 401
    finally:
        for path in (secret, f"/apis/gpufleet.io/v1alpha1/queues/{other}"):
            with contextlib.suppress(ApiError):
                api.request("DELETE", path)
