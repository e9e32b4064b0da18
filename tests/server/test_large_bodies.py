"""Large bodies: refused as soon as they pass the limit, and parsed without stalling other clients."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from gpufleet.server import bodies
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.bodies import MAX_BODY_BYTES
from gpufleet.server.serve import ApiServer

from .helpers import API, error_of, job_path, queue

CHUNK = b"#" * 65536
SAFETY = 30.0
"""Seconds after which a wait counts as failed: a net for a broken server, not a figure the test checks."""


class CountingBody:
    """A chunked request body of `total` bytes, made as the client pulls it; counts what was pulled."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        while self.pulled < self.total:
            self.pulled += len(CHUNK)
            yield CHUNK


def _http(server: ApiServer, tokens: TokenRegistry) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {tokens.admin_token}"}, timeout=SAFETY
    )


@pytest.mark.parametrize("path", ["/v1/apply", job_path()])
def test_an_oversized_chunked_body_is_refused_before_it_is_read(
    live_server: ApiServer, tokens: TokenRegistry, path: str
) -> None:
    body = CountingBody(400 * 1024 * 1024)
    with _http(live_server, tokens) as http:
        answer = http.post(path, content=body, headers={"Content-Type": "application/yaml"})
    assert answer.status_code == 413
    error = error_of(answer)
    assert error["type"] == "PayloadTooLargeError" and str(MAX_BODY_BYTES) in error["message"]
    # The server stopped reading at the limit: what the client got to send beyond it is what the
    # connection's buffers took in before it was closed (about 1 MB here), not the 400 MB offered.
    assert MAX_BODY_BYTES < body.pulled < 4 * MAX_BODY_BYTES


def test_a_declared_oversized_body_is_refused_unread(live_server: ApiServer, tokens: TokenRegistry) -> None:
    body = CountingBody(400 * 1024 * 1024)
    headers = {"Content-Type": "application/json", "Content-Length": str(body.total)}
    with _http(live_server, tokens) as http:
        answer = http.post("/v1/apply", content=body, headers=headers)
    assert answer.status_code == 413
    assert error_of(answer)["type"] == "PayloadTooLargeError"
    assert body.pulled < MAX_BODY_BYTES  # refused on its Content-Length, before the limit was read


def test_a_body_at_the_limit_is_read(client: TestClient) -> None:
    document = json.dumps(queue("team-a")).encode()
    padded = document + b" " * (MAX_BODY_BYTES - len(document))  # white space fills it up
    answer = client.post("/v1/apply", content=padded, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text


def test_a_body_being_parsed_does_not_hold_up_other_clients(
    live_server: ApiServer, tokens: TokenRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The YAML parser is held at a barrier while /healthz and a read are asked: they are answered
    meanwhile, which they could not be if the parse ran on the event loop."""
    parsing, release = threading.Event(), threading.Event()
    parse = bodies._yaml_documents

    def held(text: str) -> list[Any]:
        parsing.set()
        assert release.wait(SAFETY), "the test never released the parser"
        return parse(text)

    monkeypatch.setattr(bodies, "_yaml_documents", held)
    answers: list[httpx.Response] = []

    def submit() -> None:
        with _http(live_server, tokens) as http:
            text = yaml.safe_dump(queue("team-a"))
            answers.append(
                http.post(f"{API}/queues", content=text, headers={"Content-Type": "application/yaml"})
            )

    submitter = threading.Thread(target=submit)
    submitter.start()
    try:
        assert parsing.wait(SAFETY), "the body was never parsed"
        with _http(live_server, tokens) as http:
            assert http.get("/healthz").json() == {"status": "ok"}
            assert http.get(f"{API}/queues").json()["items"] == []
    finally:
        release.set()
        submitter.join(SAFETY)
    assert [answer.status_code for answer in answers] == [201]
