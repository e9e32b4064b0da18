"""The in-memory API server over HTTP, so the official client, the CLI and `pytest -m k8s` can use it.

    python -m tests.kube.fake_http KUBECONFIG_PATH [PORT]

serves a fresh `FakeApiServer` on 127.0.0.1 (plain HTTP, no authentication) and writes a kubeconfig
for it; `KUBECONFIG=KUBECONFIG_PATH pytest -m k8s` then runs the e2e suite, subprocesses included,
against the stand-in. Not the e2e proof (that needs a real API server): it checks the suite and the
client path (paths, queries, bodies, content types, chunked watch lines) between runs that have one.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gpufleet.kube.transport import ApiError

from .fakeapi import FakeApiServer


def handler_for(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:  # quiet: the suite prints what matters
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            query: dict[str, Any] = dict(parse_qsl(url.query))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            if self.command == "GET" and query.get("watch") == "true":
                self._watch(url.path, query)
                return
            if self.command == "GET" and url.path.endswith("/log"):  # pods/log: plain text
                try:
                    text = "".join(line + "\n" for line in api.lines(url.path, query=query))
                except ApiError as exc:
                    self._send(exc.status, json.dumps(exc.body).encode())
                    return
                self._send(200, text.encode(), content_type="text/plain")
                return
            try:
                answer = api.request(
                    self.command,
                    url.path,
                    query=query,
                    body=body,
                    content_type=self.headers.get("Content-Type") or "application/json",
                )
                code = 201 if self.command == "POST" else 200
            except ApiError as exc:
                answer, code = exc.body or {"message": exc.message}, exc.status
            self._send(code, json.dumps(answer).encode())

        def _send(self, code: int, data: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _watch(self, path: str, query: dict[str, Any]) -> None:
            timeout = float(query.get("timeoutSeconds") or 300)
            try:
                lines = api.watch(path, query=query, timeout=timeout)
                first = next(lines, None)
            except ApiError as exc:
                self._send(exc.status, json.dumps(exc.body).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if first is not None:
                    self._chunk(first)
                    for line in lines:
                        self._chunk(line)
            except ApiError as exc:  # 410 Expired while watching: an ERROR line, as a real server
                self._chunk({"type": "ERROR", "object": exc.body})
            except OSError:
                return  # the client went away
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, line: Any) -> None:
            data = (json.dumps(line) + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up mid-exchange (a watch or request the test closed) is no error of the
        # server's; anything else is printed with its traceback as before.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(api: FakeApiServer, port: int = 0) -> ThreadingHTTPServer:
    """Serves `api` on 127.0.0.1 in a daemon thread; the server's port is `server_address[1]`."""
    server = _Server(("127.0.0.1", port), handler_for(api))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="fake-apiserver").start()
    return server


def write_kubeconfig(path: Path, port: int) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "anyone", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "anyone"}}],
                "current-context": "fake",
            }
        ),
        encoding="utf-8",
    )


if __name__ == "__main__":
    target = Path(sys.argv[1])
    running = serve(FakeApiServer(), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    write_kubeconfig(target, running.server_address[1])
    print(f"export KUBECONFIG={target}", flush=True)
    threading.Event().wait()
