"""The stand-in over HTTP answers the official client as it answers in process (so `pytest -m k8s` can
run against it): requests, refusals with the server's Status, and watches line by line."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpufleet.kube.client import KubeTransport
from gpufleet.kube.informer import Informer
from gpufleet.kube.resources import NODE
from gpufleet.kube.transport import ApiError

from .fake_http import serve, write_kubeconfig
from .fakeapi import FakeApiServer


def test_the_client_lists_watches_and_is_refused_over_http(tmp_path: Path) -> None:
    api = FakeApiServer()
    server = serve(api)
    try:
        config = tmp_path / "kubeconfig"
        write_kubeconfig(config, server.server_address[1])
        client = KubeTransport.from_environment(kubeconfig=str(config))
        client.request("POST", "/api/v1/nodes", body={"metadata": {"name": "n1"}})
        with pytest.raises(ApiError) as caught:
            client.request("POST", "/api/v1/nodes", body={"metadata": {"name": "n1"}})
        assert caught.value.status == 409 and caught.value.reason == "AlreadyExists"

        nodes = Informer(client, NODE, watch_seconds=1)
        seen: list[tuple[str, str]] = []
        got_n2 = threading.Event()

        def note(event: str, old: dict | None, new: dict | None) -> None:
            seen.append((event, (new or old or {})["metadata"]["name"]))
            if seen[-1] == ("ADDED", "n2"):
                got_n2.set()

        nodes.add_handler(note)
        stop = threading.Event()
        nodes.start(stop)
        assert nodes.wait_for_sync(10)
        client.request("POST", "/api/v1/nodes", body={"metadata": {"name": "n2"}})
        assert got_n2.wait(10), seen
        stop.set()
        assert seen[0] == ("ADDED", "n1")
    finally:
        server.shutdown()
