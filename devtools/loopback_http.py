"""A real HTTP server on 127.0.0.1 that serves a directory and misbehaves on request.

Behaviours are queued per path: "ok", "500", "404", "hang" (sleep past the
client's timeout), "cut" (promise more bytes than sent, then close), or
"tamper" (serve the file with one byte flipped). Each request pops the next
behaviour; an empty queue means "ok". Every request is recorded so tests can
assert on retries.
"""

from __future__ import annotations

import collections
import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class FlakyServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.plan: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)
        self.requests: list[str] = []
        self.hang_seconds = 3.0
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                super().__init__(*args, directory=str(server.root), **kwargs)

            def log_message(self, *args):  # type: ignore[no-untyped-def]
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                with server.lock:
                    server.requests.append(path)
                    queue = server.plan.get(path)
                    behaviour = queue.popleft() if queue else "ok"
                if behaviour == "500":
                    self.send_error(500, "injected failure")
                elif behaviour == "404":
                    self.send_error(404, "injected not found")
                elif behaviour == "hang":
                    time.sleep(server.hang_seconds)
                    self.send_error(503, "too late")
                elif behaviour in ("cut", "tamper"):
                    local = server.root / path.lstrip("/")
                    data = local.read_bytes()
                    if behaviour == "tamper":
                        data = data[:-1] + bytes([data[-1] ^ 0xFF])
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                    else:
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(data) + 1000))
                        self.end_headers()
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.close_connection = True
                else:
                    super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def queue(self, path: str, *behaviours: str) -> None:
        with self.lock:
            self.plan[path].extend(behaviours)

    def count(self, path: str) -> int:
        with self.lock:
            return sum(1 for p in self.requests if p == path)


@contextmanager
def serve(root: Path) -> Iterator[FlakyServer]:
    server = FlakyServer(root)
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
