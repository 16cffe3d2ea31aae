"""Untrusted images in: HTTP downloads with hard limits, and the image check every tool result passes.

A downloaded file is only ever *decoded* (by PIL, through :mod:`imagent.core.imageio`): never
rendered as HTML, never executed, never written anywhere but the tool cache under a hash name.

:func:`fetch_image` enforces, in order:

- scheme ``http``/``https`` only, on the first URL and on every redirect target;
- the host must not resolve to a private, loopback, link-local or reserved address unless
  ``allow_private_hosts`` (a search result must not make us reach into the user's network);
- at most ``max_redirects`` redirects, followed by hand so each hop is checked;
- status 200, and a ``Content-Type`` that is an image (``application/octet-stream`` is let
  through to the decoder, which then decides; SVG is refused: it is a document, not pixels);
- a declared ``Content-Length`` over ``max_bytes`` is refused before reading, and the body is
  streamed with a running count, so a server that lies or sends no length is cut off too;
- the bytes must decode completely as JPEG, PNG, WebP, GIF or BMP within ``max_pixels``.
"""

from __future__ import annotations

import io
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from imagent.tools.base import ToolRejected

ALLOWED_FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif",
                   "BMP": "image/bmp"}
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_PIXELS = 40_000_000
_PASS_TO_DECODER = {"application/octet-stream", "binary/octet-stream"}


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
    """Refuse anything that is not a complete image of an allowed format within the limits."""
    from PIL import Image

    from imagent.core.imageio import ImageLoadError, image_from_bytes

    if not data:
        raise ToolRejected("empty image")
    if len(data) > max_bytes:
        raise ToolRejected(f"image too large ({len(data)} bytes; limit {max_bytes})")
    try:
        decoded = image_from_bytes(data, max_pixels)  # structural check + full decode + pixel cap
    except ImageLoadError as exc:
        raise ToolRejected(f"not a usable image: {exc}") from None
    try:
        with Image.open(io.BytesIO(data)) as im:  # header only: the format name
            fmt = str(im.format or "")
    except Exception as exc:  # already decoded above; a failure here is unexpected but still a refusal
        raise ToolRejected(f"not a usable image: {type(exc).__name__}") from None
    if fmt not in ALLOWED_FORMATS:
        raise ToolRejected(f"image format {fmt or 'unknown'} is not accepted ({', '.join(ALLOWED_FORMATS)})")
    return VerifiedImage(data=data, mime=ALLOWED_FORMATS[fmt], format=fmt, width=decoded.width,
                         height=decoded.height)


def check_url(url: str, allow_private_hosts: bool = False) -> None:
    """Refuse non-http(s) URLs and, unless allowed, hosts that resolve to non-public addresses."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in {"http", "https"}:
        raise ToolRejected(f"refused URL scheme {parts.scheme or '(none)'!r}: only http and https are fetched")
    host = parts.hostname
    if not host:
        raise ToolRejected("refused URL without a host")
    if allow_private_hosts:
        return
    try:
        infos = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ToolRejected(f"cannot resolve host {host!r}: {exc}") from None
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not addr.is_global or addr.is_multicast:
            raise ToolRejected(f"refused host {host!r}: it resolves to a non-public address ({addr})")


def fetch_image(
    client: httpx.Client,
    url: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_redirects: int = 3,
    allow_private_hosts: bool = False,
) -> VerifiedImage:
    """Download one image with every check in the module docstring; raise :class:`ToolRejected`."""
    current = url
    for _hop in range(max_redirects + 1):
        check_url(current, allow_private_hosts)
        try:
            with client.stream("GET", current, follow_redirects=False,
                               headers={"Accept": "image/avif,image/webp,image/png,image/jpeg,image/*;q=0.8"}) as resp:
                if resp.is_redirect:
                    location = resp.headers.get("location")
                    if not location:
                        raise ToolRejected(f"redirect without a Location from {current}")
                    current = urljoin(current, location)
                    continue
                if resp.status_code != 200:
                    raise ToolRejected(f"HTTP {resp.status_code} for {current}")
                ctype = resp.headers.get("content-type", "").split(";", 1)[0].strip().lower()
                if not (ctype.startswith("image/") or ctype in _PASS_TO_DECODER):
                    raise ToolRejected(f"not an image: Content-Type {ctype or '(none)'} from {current}")
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
        except httpx.HTTPError as exc:
            raise ToolRejected(f"download failed for {current}: {type(exc).__name__}: {exc}") from None
        image = verify_image_bytes(bytes(buf), max_bytes, max_pixels)
        return VerifiedImage(image.data, image.mime, image.format, image.width, image.height, url=current)
    raise ToolRejected(f"too many redirects (more than {max_redirects}) from {url}")


__all__ = ["ALLOWED_FORMATS", "VerifiedImage", "check_url", "fetch_image", "verify_image_bytes"]
