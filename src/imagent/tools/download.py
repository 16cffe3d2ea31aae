"""Untrusted images in: HTTP downloads with hard limits, and the image check every tool result passes.

A downloaded file is only ever *decoded* (by PIL, through :mod:`imagent.core.imageio`): never
rendered as HTML, never executed, never written anywhere but the tool cache under a hash name.

:func:`fetch_image` enforces, in order:

- scheme ``http``/``https`` only, on the first URL and on every redirect target (``data:``,
  ``javascript:``, ``file:`` and malformed targets are refused with a reason, never raised as errors);
- the host must not resolve to a private, loopback, link-local or reserved address unless
  ``allow_private_hosts`` (a search result must not make us reach into the user's network);
- the connection goes to the address that was checked: the name is resolved once and the socket is
  opened to that address (the URL's host still goes into ``Host`` and TLS SNI/certificate checks), so a DNS
  answer that changes between check and connect (DNS rebinding) cannot redirect us inward;
- at most ``max_redirects`` redirects, followed by hand so each hop is checked;
- status 200, and a ``Content-Type`` that is an image (``application/octet-stream`` is let
  through to the decoder, which then decides; SVG is refused: it is a document, not pixels);
- a declared ``Content-Length`` over ``max_bytes`` is refused before reading, and the body is
  streamed with a running count, so a server that lies or sends no length is cut off too;
- one overall deadline (``deadline_s``) for all hops, headers and body: a server that trickles bytes
  just fast enough to dodge the per-read timeout is cut at the deadline (its socket is shut down);
- the format is read from the header with PIL restricted to JPEG, PNG, WebP, GIF and BMP *before* any
  decoding, then the bytes must decode completely within ``max_pixels``.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from imagent.tools.base import ToolRejected

ALLOWED_FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif",
                   "BMP": "image/bmp"}
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_PIXELS = 40_000_000
DEFAULT_DEADLINE_S = 30.0
_PASS_TO_DECODER = {"application/octet-stream", "binary/octet-stream"}
# What PIL may parse a downloaded header as. A camera JPEG with a second picture opens through the JPEG
# plugin as format "MPO", which is a JPEG here.
_PIL_FORMATS = tuple(ALLOWED_FORMATS)


@dataclass(frozen=True)
class VerifiedImage:
    data: bytes
    mime: str
    format: str
    width: int
    height: int
    url: str = ""  # the final URL after redirects (downloads only)


def verify_image_bytes(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES,
                       max_pixels: int = DEFAULT_MAX_PIXELS) -> VerifiedImage:
    """Refuse anything that is not a complete image of an allowed format within the limits.

    The format is identified first, by PIL restricted to the allowed formats (no other plugin sees the
    bytes), and only then are the pixels decoded."""
    from PIL import Image

    from imagent.core.imageio import ImageLoadError, image_from_bytes

    if not data:
        raise ToolRejected("empty image")
    if len(data) > max_bytes:
        raise ToolRejected(f"image too large ({len(data)} bytes; limit {max_bytes})")
    try:
        with Image.open(io.BytesIO(data), formats=_PIL_FORMATS) as im:  # header only: the format name
            fmt = "JPEG" if im.format == "MPO" else str(im.format or "")
    except Image.UnidentifiedImageError:
        raise ToolRejected(f"not a usable image: not one of the accepted formats ({', '.join(ALLOWED_FORMATS)})") \
            from None
    except Exception as exc:  # a broken header, a bomb refused by PIL: a refusal either way
        raise ToolRejected(f"not a usable image: {type(exc).__name__}") from None
    if fmt not in ALLOWED_FORMATS:
        raise ToolRejected(f"image format {fmt or 'unknown'} is not accepted ({', '.join(ALLOWED_FORMATS)})")
    try:
        decoded = image_from_bytes(data, max_pixels)  # structural check + full decode + pixel cap
    except ImageLoadError as exc:
        raise ToolRejected(f"not a usable image: {exc}") from None
    return VerifiedImage(data=data, mime=ALLOWED_FORMATS[fmt], format=fmt, width=decoded.width,
                         height=decoded.height)


def _address_allowed(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Public unicast only (tests replace this to call a loopback server "public")."""
    return addr.is_global and not addr.is_multicast


def _split(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL; anything else is refused with a reason."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in {"http", "https"}:
            shown = scheme or "(none)"
            raise ToolRejected(f"refused URL scheme {shown!r}: only http and https are fetched")
        host = parts.hostname
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:  # a bad port ("http://h:abc/"), an unclosed IPv6 bracket, ...
        raise ToolRejected(f"refused malformed URL: {exc}") from None
    if not host:
        raise ToolRejected("refused URL without a host")
    return scheme, host, port


def resolve_checked(url: str, allow_private_hosts: bool = False) -> str:
    """Resolve the URL's host once and return the address to connect to.

    Every address the name resolves to must be public unless ``allow_private_hosts`` (one private answer
    among public ones is refused too: which one a later lookup would pick is not ours to know)."""
    _scheme, host, port = _split(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        raise ToolRejected(f"cannot resolve host {host!r}: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise ToolRejected(f"cannot resolve host {host!r}: no address")
    if not allow_private_hosts:
        for a in addresses:
            addr = ipaddress.ip_address(a.split("%", 1)[0])
            if not _address_allowed(addr):
                raise ToolRejected(f"refused host {host!r}: it resolves to a non-public address ({addr})")
    return addresses[0]


def check_url(url: str, allow_private_hosts: bool = False) -> None:
    """Refuse non-http(s) URLs and, unless allowed, hosts that resolve to non-public addresses."""
    if allow_private_hosts:
        _split(url)
        return
    resolve_checked(url, allow_private_hosts)


class _Deadline:
    """Shuts the download's sockets when the deadline passes, whatever phase the request is in."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise ToolRejected(f"download stopped: it took longer than the {self.seconds:g} s deadline")
        return left

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            if self.fired:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv in the downloading thread

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                self._shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


class _PinnedBackend(httpcore.NetworkBackend):
    """Opens TCP connections to one checked address, whatever host name the request carries."""

    def __init__(self, address: str, deadline: _Deadline) -> None:
        self.address = address
        self.deadline = deadline
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(self.address, port, timeout=timeout, local_address=local_address,
                                         socket_options=socket_options)
        self.deadline.watch(stream.get_extra_info("socket"))
        return stream

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:  # pragma: no cover
        raise httpcore.ConnectError("unix sockets are not used for downloads")

    def sleep(self, seconds: float) -> None:  # pragma: no cover - only for retries, which are off
        self._inner.sleep(seconds)


def _pinned_transport(address: str, deadline: _Deadline) -> httpx.HTTPTransport:
    """A transport that connects to ``address`` only. Used directly, not through a Client: a Client parses
    every redirect's Location itself (even with redirects off) and raises on ``javascript:`` or a bad port
    before we could refuse them with a reason."""
    transport = httpx.HTTPTransport(trust_env=False)  # no proxy from the environment: we connect ourselves
    transport._pool._network_backend = _PinnedBackend(address, deadline)  # httpx exposes no public hook
    return transport


def _timeout(like: httpx.Client, left: float) -> httpx.Timeout:
    t = like.timeout

    def cap(v: float | None) -> float:
        return left if v is None else min(v, left)

    return httpx.Timeout(connect=cap(t.connect), read=cap(t.read), write=cap(t.write), pool=cap(t.pool))


def fetch_image(
    client: httpx.Client,
    url: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_redirects: int = 3,
    allow_private_hosts: bool = False,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> VerifiedImage:
    """Download one image with every check in the module docstring; raise :class:`ToolRejected`.

    ``client`` gives the per-read timeouts; each hop is requested through a client of this function's own
    that connects to the checked address only."""
    deadline = _Deadline(deadline_s)
    current = url
    try:
        for _hop in range(max_redirects + 1):
            address = resolve_checked(current, allow_private_hosts)
            with _pinned_transport(address, deadline) as transport:
                buf, location = _get(transport, current, max_bytes, deadline, client)
            if location is not None:
                try:
                    current = urljoin(current, location)
                except ValueError as exc:
                    raise ToolRejected(f"refused malformed redirect target: {exc}") from None
                continue
            image = verify_image_bytes(buf, max_bytes, max_pixels)
            return VerifiedImage(image.data, image.mime, image.format, image.width, image.height, url=current)
    finally:
        deadline.cancel()
    raise ToolRejected(f"too many redirects (more than {max_redirects}) from {url}")


_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _get(transport: httpx.HTTPTransport, url: str, max_bytes: int, deadline: _Deadline,
         like: httpx.Client) -> tuple[bytes, str | None]:
    """One hop: ``(body, None)`` for an image answer, ``(b"", location)`` for a redirect."""
    try:
        request = httpx.Request("GET", url, headers={
            "Accept": "image/avif,image/webp,image/png,image/jpeg,image/*;q=0.8",
            "User-Agent": like.headers.get("user-agent", "imagent"),
        }, extensions={"timeout": _timeout(like, deadline.remaining()).as_dict()})
        resp = transport.handle_request(request)
        resp.request = request
        with contextlib.closing(resp):
            if resp.status_code in _REDIRECTS:
                location = resp.headers.get("location")
                if not location:
                    raise ToolRejected(f"redirect without a Location from {url}")
                return b"", location
            if resp.status_code != 200:
                raise ToolRejected(f"HTTP {resp.status_code} for {url}")
            ctype = resp.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if not (ctype.startswith("image/") or ctype in _PASS_TO_DECODER):
                raise ToolRejected(f"not an image: Content-Type {ctype or '(none)'} from {url}")
            if ctype.startswith("image/svg"):
                raise ToolRejected("SVG is refused (a document, not pixels)")
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise ToolRejected(f"image too large (Content-Length {declared}; limit {max_bytes})")
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf.extend(chunk)
                if len(buf) > max_bytes:
                    raise ToolRejected(f"image too large (over {max_bytes} bytes; download stopped)")
                deadline.remaining()
            deadline.remaining()  # a body cut short by the deadline's shutdown must not pass as complete
            return bytes(buf), None
    except (httpx.HTTPError, httpx.InvalidURL, httpcore.ConnectError, OSError) as exc:
        if deadline.fired:
            raise ToolRejected(f"download stopped: it took longer than the {deadline.seconds:g} s deadline") \
                from None
        raise ToolRejected(f"download failed for {url}: {type(exc).__name__}: {exc}") from None


__all__ = ["ALLOWED_FORMATS", "VerifiedImage", "check_url", "fetch_image", "resolve_checked", "verify_image_bytes"]
