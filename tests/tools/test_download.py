"""The downloader against hostile servers on the loopback: DNS rebinding, trickling servers, odd redirects,
formats outside the allow-list. Every failure is a ToolRejected with a reason, never another exception."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from imagent.tools import download
from imagent.tools.base import ToolRejected
from imagent.tools.download import fetch_image, verify_image_bytes


@contextlib.contextmanager
def _server_at(host: str, port: int, body: bytes) -> Iterator[list[str]]:
    """A server on ``host:port`` that answers every GET with ``body`` as a PNG; yields the Host headers seen."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("host", ""))
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_dns_rebinding_connects_to_the_checked_address(http_server, img, monkeypatch):
    """The name resolves to a "public" address when checked and to an internal one afterwards: the
    download must go to the checked address (the internal server is never reached)."""
    port = int(http_server.base_url.rsplit(":", 1)[1])
    http_server.routes["/a.png"] = img.Reply(200, {"Content-Type": "image/png"}, img.png((10, 200, 10)))
    public, internal = "127.0.0.1", "127.0.0.2"
    # In this test 127.0.0.1 plays a public address; 127.0.0.2 is the victim's internal network.
    monkeypatch.setattr(download, "_address_allowed", lambda addr: addr == ipaddress.ip_address(public))
    real = socket.getaddrinfo
    answers = iter([public])

    def rebinding(host, *args, **kwargs):
        if host == "photos.example":
            ip = next(answers, internal)  # first lookup: public; every later one: internal
            return real(ip, *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with _server_at(internal, port, img.png((250, 0, 0))) as internal_hits, httpx.Client(timeout=5) as client:
        got = fetch_image(client, f"http://photos.example:{port}/a.png")
    assert internal_hits == []  # never reached
    assert http_server.hits("/a.png") == 1
    assert http_server.requests[-1].headers["host"] == f"photos.example:{port}"  # Host kept
    assert got.format == "PNG" and got.url == f"http://photos.example:{port}/a.png"


def test_a_name_with_any_private_address_is_refused(monkeypatch):
    real = socket.getaddrinfo

    def mixed(host, port, *args, **kwargs):
        return real("8.8.8.8", port, *args, **kwargs) + real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", mixed)
    with httpx.Client(timeout=2) as client, pytest.raises(ToolRejected, match="non-public address"):
        fetch_image(client, "http://mixed.example/a.png")


@contextlib.contextmanager
def _trickling_server(head: bytes, body_every_s: float, header_trickle: bool = False) -> Iterator[str]:
    """A raw server that sends ``head`` then one body byte every ``body_every_s`` for 30 s (or the head
    itself one byte at a time)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                end = time.monotonic() + 30
                if header_trickle:
                    for b in head:
                        if stop.is_set() or time.monotonic() > end:
                            break
                        conn.sendall(bytes([b]))
                        time.sleep(body_every_s)
                else:
                    conn.sendall(head)
                while not stop.is_set() and time.monotonic() < end:
                    conn.sendall(b"\x00")
                    time.sleep(body_every_s)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/slow.png"
    finally:
        stop.set()
        thread.join(5)
        srv.close()


@pytest.mark.parametrize("phase", ["body", "headers"])
def test_trickling_server_is_cut_at_the_deadline(phase):
    head = b"HTTP/1.0 200 OK\r\nContent-Type: image/png\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n\r\n"
    with _trickling_server(head, 0.05, header_trickle=phase == "headers") as url, \
            httpx.Client(timeout=2.0) as client:  # each read is well within the 2 s timeout
        t0 = time.monotonic()
        with pytest.raises(ToolRejected, match="deadline"):
            fetch_image(client, url, allow_private_hosts=True, deadline_s=1.0)
        elapsed = time.monotonic() - t0
    assert elapsed < 1.8, elapsed  # cut at the deadline, not after the server's 30 s


@pytest.mark.parametrize("location", [
    "data:image/png;base64,iVBORw0KGgo=",
    "javascript:alert(document.cookie)",
    "file:///etc/passwd",
    "ftp://example.com/a.png",
    "http://example.com:notaport/a.png",
    "http://[::1/a.png",
    "https:///no-host.png",
])
def test_odd_redirect_targets_are_refused_with_a_reason(http_server, img, location):
    http_server.routes["/r"] = img.Reply(302, {"Location": location})
    with httpx.Client(timeout=2) as client, pytest.raises(ToolRejected, match="refused"):
        fetch_image(client, f"{http_server.base_url}/r", allow_private_hosts=True)


def test_formats_outside_the_allow_list_are_refused_before_decoding(monkeypatch):
    from PIL import EpsImagePlugin, Image

    calls: list[str] = []
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: calls.append("gs") or b"")
    eps = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(eps, "EPS")
    tif = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(tif, "TIFF")  # a photo format, but not one the web tools take
    with pytest.raises(ToolRejected, match="not one of the accepted formats"):
        verify_image_bytes(eps.getvalue())
    with pytest.raises(ToolRejected, match="not one of the accepted formats"):
        verify_image_bytes(tif.getvalue())
    assert calls == []
