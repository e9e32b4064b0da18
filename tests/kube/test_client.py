"""KubeTransport through the official client against a local HTTP server answering like an API server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client as k8s

from gpufleet.kube.client import KubeTransport
from gpufleet.kube.transport import JSON_PATCH, ApiError

SEEN: list[tuple[str, str, str, bytes]] = []


class Handler(BaseHTTPRequestHandler):
    def _answer(self, code: int, body: object, *, lines: list[object] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if lines is None:
            data = json.dumps(body).encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in lines:
                chunk = (json.dumps(line) + "\n").encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        SEEN.append((self.command, self.path, self.headers.get("Content-Type") or "", body))
        if self.path.startswith("/api/v1/secured") and self.headers.get("Authorization") != "Bearer t2":
            self._answer(401, {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "expired"})
            return
        if self.path.startswith("/api/v1/nodes?") and "watch=true" in self.path:
            node = {"metadata": {"name": "a", "resourceVersion": "7"}}
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
            self._answer(
                200, None, lines=[{"type": "ADDED", "object": node}, {"type": "ERROR", "object": gone}]
            )
        elif self.path.startswith("/api/v1/nodes"):
            self._answer(200, {"kind": "NodeList", "metadata": {"resourceVersion": "5"}, "items": []})
        elif self.path.endswith("/binding"):
            self._answer(201, {"kind": "Status", "status": "Success", "code": 201})
        elif self.path.startswith("/api/v1/namespaces/a/pods/missing"):
            self._answer(
                404,
                {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'pods "missing" not found'},
            )
        else:
            self._answer(200, {"kind": "Pod", "metadata": {"name": "p"}})

    do_GET = do_POST = do_PATCH = do_DELETE = _handle

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def transport() -> Iterator[KubeTransport]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield KubeTransport(k8s.ApiClient(configuration))
    server.shutdown()


def test_requests_carry_json_bodies_queries_and_content_types(transport: KubeTransport) -> None:
    SEEN.clear()
    listed = transport.request("GET", "/api/v1/nodes", query={"labelSelector": "a=b", "limit": 1})
    assert listed["metadata"]["resourceVersion"] == "5"
    assert SEEN[-1][1] == "/api/v1/nodes?labelSelector=a%3Db&limit=1"
    ops = [{"op": "add", "path": "/spec", "value": {"x": 1}}]
    transport.request("PATCH", "/api/v1/namespaces/a/pods/p", body=ops, content_type=JSON_PATCH)
    method, _, content_type, body = SEEN[-1]
    assert method == "PATCH" and content_type == JSON_PATCH and json.loads(body) == ops


def test_a_binding_answered_with_a_status_is_a_success(transport: KubeTransport) -> None:
    answer = transport.request("POST", "/api/v1/namespaces/a/pods/p/binding", body={"kind": "Binding"})
    assert answer["status"] == "Success"


def test_refusals_are_api_errors_with_the_servers_reason(transport: KubeTransport) -> None:
    with pytest.raises(ApiError) as caught:
        transport.request("GET", "/api/v1/namespaces/a/pods/missing")
    assert caught.value.status == 404 and caught.value.reason == "NotFound"


def test_watch_streams_lines_and_raises_an_error_line(transport: KubeTransport) -> None:
    seen = []
    with pytest.raises(ApiError) as caught:
        for event in transport.watch("/api/v1/nodes", query={"resourceVersion": "5"}, timeout=5):
            seen.append(event["object"]["metadata"]["name"])
    assert seen == ["a"] and caught.value.status == 410


def test_an_unreachable_server_is_status_zero() -> None:
    configuration = k8s.Configuration()
    configuration.host = "http://127.0.0.1:9"
    configuration.retries = 0
    with pytest.raises(ApiError) as caught:
        KubeTransport(k8s.ApiClient(configuration)).request("GET", "/api/v1/nodes", timeout=1)
    assert caught.value.status == 0 and caught.value.retryable


def test_credentials_are_kept_and_read_again_when_the_server_says_they_expired(
    transport: KubeTransport,
) -> None:
    configuration = k8s.Configuration()
    configuration.host = transport._host
    reads: list[str] = []

    def refresh(conf: k8s.Configuration) -> None:  # what a kubeconfig's exec or OIDC loader does
        reads.append(f"t{len(reads) + 1}")
        conf.api_key["BearerToken"] = reads[-1]

    configuration.api_key_prefix["BearerToken"] = "Bearer"
    configuration.api_key["BearerToken"] = "t0"
    configuration.refresh_api_key_hook = refresh
    fresh = KubeTransport(k8s.ApiClient(configuration))
    assert fresh.request("GET", "/api/v1/secured/a")["metadata"]["name"] == "p"  # t1 refused, t2 taken
    assert fresh.request("GET", "/api/v1/secured/b")["metadata"]["name"] == "p"
    assert reads == ["t1", "t2"]  # read twice for two requests: once at first, once after the 401


def test_json_the_fast_decoder_refuses_is_still_read() -> None:
    from gpufleet.kube.client import _dumps, _loads

    assert _loads('{"name": "\\ud800"}') == {"name": "\ud800"}  # an escaped lone surrogate
    assert _loads(b'{"items": [1, 2]}') == {"items": [1, 2]}
    assert _dumps({"n": 2**70}) == b'{"n": 1180591620717411303424}'  # wider than orjson writes
