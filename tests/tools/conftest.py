"""A real HTTP server on 127.0.0.1 that tests program route by route, and small image helpers."""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def png_bytes(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (16, 12)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def jpeg_bytes(color: tuple[int, int, int] = (30, 30, 200), size: tuple[int, int] = (20, 10)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="JPEG")
    return buf.getvalue()


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    # No Content-Length and the body streamed until the connection closes (a server that lies by omission).
    no_length: bool = False


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class LocalServer:
    """``routes[path] = Reply(...)`` or a function ``(Request) -> Reply``; ``requests`` logs every hit."""

    def __init__(self) -> None:
        self.routes: dict[str, Reply | Callable[[Request], Reply]] = {}
        self.requests: list[Request] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                req = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                server.requests.append(req)
                route = server.routes.get(self.path.split("?", 1)[0])
                reply = Reply(404, {"Content-Type": "text/plain"}, b"not found") if route is None else (
                    route(req) if callable(route) else route)
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if not reply.no_length:
                    self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(reply.body)  # the client may stop reading (a size cap doing its job)

            do_GET = _serve
            do_POST = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def hits(self, path: str) -> int:
        return sum(1 for r in self.requests if r.path.split("?", 1)[0] == path)


@pytest.fixture
def http_server() -> Iterator[LocalServer]:
    srv = LocalServer()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()


@pytest.fixture
def img() -> Any:
    """Image byte helpers: ``img.png()``, ``img.jpeg()``; and ``img.Reply`` for server routes."""
    from types import SimpleNamespace

    return SimpleNamespace(png=png_bytes, jpeg=jpeg_bytes, Reply=Reply)
