"""A hostile variant index: a raw-socket HTTP server on 127.0.0.1 that answers exactly what a test scripts.

``http.server`` cannot send a broken status line, a lying Content-Length,
bad chunking or a body dripped one byte a second; this server writes the
bytes a route gives it. A route is raw response bytes, or a callable that
gets the connected socket (for dripping). Every request path is recorded.
Also here: a well-formed variant wheel to list on such an index.
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Route = bytes | Callable[[socket.socket], None]
REPO = Path(__file__).resolve().parents[2]
PROJECT = "hvd-selector"
VERSION = "0.1.0"
VARIANT = "target=x86_64 tensor_ops=gloo controllers=gloo"


def response(
    body: bytes, status: str = "200 OK", content_type: str = "application/octet-stream", **extra: str
) -> bytes:
    headers = {"Content-Type": content_type, "Content-Length": str(len(body)), "Connection": "close", **extra}
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode() + body


def json_page(files: list[dict[str, Any]]) -> bytes:
    body = json.dumps({"meta": {"api-version": "1.0"}, "name": PROJECT, "files": files}).encode()
    return response(body, content_type="application/vnd.pypi.simple.v1+json")


def drip(data: bytes, interval: float = 1.0) -> Callable[[socket.socket], None]:
    """Send ``data`` one byte every ``interval`` seconds (stops when the client hangs up)."""

    def send(conn: socket.socket) -> None:
        for i in range(len(data)):
            conn.sendall(data[i : i + 1])
            time.sleep(interval)

    return send


class HostileIndex:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    @property
    def index_url(self) -> str:
        return f"{self.url}/simple"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                request = b""
                while b"\r\n\r\n" not in request and len(request) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    request += chunk
                path = request.split(b" ", 2)[1].decode("latin-1").split("?", 1)[0]
                self.requests.append(path)
                route = self.routes.get(path, response(b"not here", "404 Not Found"))
                if callable(route):
                    route(conn)
                else:
                    conn.sendall(route)
            except OSError:
                return  # the client hung up (a deadline did its job)

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()
        self.thread.join(timeout=5)

    # ------------------------------------------------------------ a well-formed index to corrupt
    def publish(self, wheel: bytes, *, files: list[dict[str, Any]] | None = None, variants: Any = None) -> str:
        """Serve ``wheel`` as the one labelled wheel; returns its published file name."""
        label, document = variant_document()
        name = f"hvd_selector-{VERSION}-py3-none-linux_x86_64-{label}.whl"
        vjson = json.dumps(variants if variants is not None else document).encode()
        vname = f"{PROJECT}-{VERSION}-variants.json"
        listing = (
            files
            if files is not None
            else [
                {"filename": name, "url": name, "hashes": {"sha256": sha256(wheel)}},
                {"filename": vname, "url": vname, "hashes": {"sha256": sha256(vjson)}},
            ]
        )
        self.routes[f"/simple/{PROJECT}/"] = json_page(listing)
        self.routes[f"/simple/{PROJECT}/{name}"] = response(wheel)
        self.routes[f"/simple/{PROJECT}/{vname}"] = response(vjson, content_type="application/json")
        return name


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def variant_document() -> tuple[str, dict[str, Any]]:
    from selector_backend.engine import variant_json
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.variant import variant_label

    catalog = load_catalog()
    variant = catalog.parse_variant(VARIANT, fill_defaults=True)
    return variant_label(variant), variant_json.render(variant, catalog)


def make_wheel(extra: dict[str, bytes] | None = None, *, variant_json: bytes | None = None) -> bytes:
    """A minimal installable wheel of the project whose variant.json says VARIANT (plus ``extra`` members)."""
    _, document = variant_document()
    dist = f"hvd_selector-{VERSION}.dist-info"
    members = {
        "hvd_selector_stub/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: {VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n",
        f"{dist}/variant.json": variant_json if variant_json is not None else json.dumps(document).encode(),
        # the import guard's copy of the record (the backend refuses a wheel whose two records disagree)
        "hvd_selector/variant.json": variant_json if variant_json is not None else json.dumps(document).encode(),
        **(extra or {}),
    }
    records = "".join(f"{n},,\n" for n in members) + f"{dist}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
        archive.writestr(f"{dist}/RECORD", records)
    return buffer.getvalue()


HOOK = (
    "import json, sys; from selector_backend.install import backend; "
    "print(json.dumps(backend.get_requires_for_build_wheel(json.loads(sys.argv[1]))))"
)


def run_hook(
    config: dict[str, str], env: dict[str, str], timeout: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``get_requires_for_build_wheel`` (the install's decision and download) in a fresh process from
    the checkout, as pip runs it: (the finished process, seconds it took)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", HOOK, json.dumps(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - start


@contextmanager
def hostile_index() -> Iterator[HostileIndex]:
    server = HostileIndex()
    server.thread.start()
    try:
        yield server
    finally:
        server.stop()
