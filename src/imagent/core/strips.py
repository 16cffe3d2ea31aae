"""Decoding strip by strip, so that a large photo's whole picture is held at most once (issue 47).

**RGB by strips** (:func:`to_rgb`): a decoded picture becomes the RGB image a pass uses (reduced by a whole
factor, transparency flattened on white, EXIF orientation applied) one strip of rows at a time, so that no
whole-image convert, transpose or reduce copies it: only the result and one strip are held beside it.

**A PNG by strips** (:func:`png_strips`): Pillow decodes a PNG only whole and cannot decode it smaller (JPEG's DCT
scaling has no PNG counterpart): a 100-megapixel PNG of 291 KB costs 400 MB before anything is reduced. This walks
the same rows with Pillow's own PNG row decoder (its ``zip`` codec: the row filters, palettes and sample layouts
are Pillow's, not reimplemented here), one strip at a time: the image data (the IDAT chunks) is inflated as it
goes, and each strip is handed to the decoder after the row above it, stored unfiltered, so that the strip's
filters have the row they refer to. Only a strip, the row above it and the caller's result are in memory. It
covers the PNGs whose rows hold whole bytes a sample: 8 bits a sample, not interlaced, one frame (grey, grey with
alpha, RGB, RGBA, palette); it returns None for any other (16-bit or 1-4 bit samples, interlaced, animated), which
the caller decodes whole. A truncated or corrupt data stream raises :class:`ValueError` with the reason, as the
whole decode would refuse it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from PIL import Image

# Bytes a pixel of an 8-bit PNG, by colour type (grey, RGB, palette, grey + alpha, RGBA).
_PIXEL_BYTES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
TAG_ORIENTATION = 0x0112
_FEED = 1 << 20  # compressed bytes given to the inflater at once


class PngLayout:
    """What a strip decode needs from a PNG's chunks: the size, the pixel layout, where the image data lies and
    the EXIF bytes (an ``eXIf`` chunk, wherever it is)."""

    def __init__(self, data: bytes) -> None:
        self.ok = False
        self.idat: list[tuple[int, int]] = []
        self.exif: bytes | None = None
        if data[:8] != b"\x89PNG\r\n\x1a\n":
            return
        pos, header = 8, None
        while pos + 8 <= len(data):
            length, kind = struct.unpack(">I4s", data[pos : pos + 8])
            body = (pos + 8, pos + 8 + length)
            if kind == b"IHDR":
                header = data[body[0] : body[1]]
            elif kind == b"IDAT":
                self.idat.append(body)
            elif kind == b"eXIf":
                self.exif = b"Exif\x00\x00" + data[body[0] : body[1]]
            elif kind in (b"acTL", b"fcTL"):  # animated: Pillow picks the frame
                return
            elif kind == b"IEND":
                break
            pos = body[1] + 4
        if header is None or len(header) != 13 or not self.idat:
            return
        self.width, self.height, depth, self.colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
        self.ok = depth == 8 and interlace == 0 and self.colour in _PIXEL_BYTES
        self.row_bytes = self.width * _PIXEL_BYTES.get(self.colour, 0)


def _inflated(data: bytes, parts: list[tuple[int, int]]) -> Iterator[int | bytes]:
    """A coroutine over the concatenated image data: sent a byte count, it yields that many inflated bytes (fewer
    at the end of the stream)."""
    inflater = zlib.decompressobj()
    view = memoryview(data)
    chunks = (view[a:b][k : k + _FEED] for a, b in parts for k in range(0, b - a, _FEED))
    pending: Any = b""
    want = yield 0
    while True:
        out = bytearray()
        while len(out) < want:
            if not pending:
                pending = next(chunks, b"")
                if not pending:
                    break
            try:
                out += inflater.decompress(pending, want - len(out))
            except zlib.error as exc:
                raise ValueError(f"corrupt PNG image data ({exc})") from None
            pending = inflater.unconsumed_tail
        want = yield bytes(out)


def png_strips(data: bytes, im: Image.Image, rows: int) -> Iterator[Image.Image] | None:
    """The picture of the opened (not loaded) PNG ``im`` with bytes ``data``, as strips of ``rows`` rows from the
    top (the last may be shorter), each in ``im``'s mode with its palette and transparency; None when the PNG is
    not one this covers (see the module's doc). Sets ``im.info["exif"]`` from the chunks, so that reading the
    EXIF does not make Pillow decode the whole picture."""
    layout = PngLayout(data)
    if not layout.ok or im.format != "PNG" or len(im.tile) != 1 or im.size != (layout.width, layout.height):
        return None
    rawmode = im.tile[0][3]  # the tile's codec arguments: the raw mode of its rows
    if not isinstance(rawmode, str) or rawmode != im.mode:  # 8-bit samples decode into their own mode
        return None
    im.info.setdefault("exif", layout.exif or b"")
    return _strips(data, im, layout, rawmode, max(1, rows))


def _strips(data: bytes, im: Image.Image, layout: PngLayout, rawmode: str, rows: int) -> Iterator[Image.Image]:
    stream = _inflated(data, layout.idat)
    next(stream)
    above = b""  # the row above the strip, unfiltered (filter type 0), for the strip's filters to refer to
    for y in range(0, layout.height, rows):
        count = min(rows, layout.height - y)
        raw = stream.send(count * (layout.row_bytes + 1))
        if len(raw) < count * (layout.row_bytes + 1):
            raise ValueError(f"truncated PNG image data (rows {y}-{y + count} of {layout.height} missing)")
        payload = (b"\x00" + above if above else b"") + raw
        lead = 1 if above else 0
        try:
            strip = Image.frombytes(im.mode, (layout.width, count + lead), zlib.compress(payload, 0), "zip", rawmode)
        except (ValueError, OSError) as exc:
            raise ValueError(f"corrupt PNG image data ({exc})") from None
        above = strip.crop((0, count + lead - 1, layout.width, count + lead)).tobytes("raw", rawmode)
        if lead:
            strip = strip.crop((0, 1, layout.width, count + 1))
        if im.palette is not None and im.mode == "P":
            strip.putpalette(im.palette)
        if "transparency" in im.info:
            strip.info["transparency"] = im.info["transparency"]
        yield strip


# --------------------------------------------------------------------------- RGB, reduced and upright, by strips

# EXIF orientation -> the transpose that shows the photo upright (as ImageOps.exif_transpose does).
UPRIGHT = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
            5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
            8: Image.Transpose.ROTATE_90}
STRIP_PIXELS = 1 << 18  # pixels converted at once (1 MB as RGB): the bound on what a conversion adds
WHOLE_PIXELS = 1 << 22  # a PNG up to this many pixels (16 MB as RGB) is decoded whole: strips pay off above it


def orientation(im: Image.Image) -> int:
    try:
        return int(im.getexif().get(TAG_ORIENTATION, 1))
    except Exception:  # a broken orientation tag must not cost us the image: show it as stored
        return 1


def _strip_rgb(strip: Image.Image, alpha: bool) -> Image.Image:
    """One strip as RGB; transparency flattened on white (black behind transparent pixels, convert's default,
    misleads encoders)."""
    if not alpha:
        return strip if strip.mode == "RGB" else strip.convert("RGB")
    rgba = strip.convert("RGBA")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba, mask=rgba.getchannel("A"))
    return background


def _upright_at(method: Image.Transpose | None, y: int, rows: int, size: tuple[int, int]) -> tuple[int, int]:
    """Where rows ``y .. y + rows`` of an image of ``size`` go once ``method`` turns it upright."""
    h = size[1]
    if method in (None, Image.Transpose.FLIP_LEFT_RIGHT):
        return 0, y
    if method in (Image.Transpose.ROTATE_180, Image.Transpose.FLIP_TOP_BOTTOM):
        return 0, h - y - rows
    if method in (Image.Transpose.TRANSPOSE, Image.Transpose.ROTATE_90):
        return y, 0
    return h - y - rows, 0  # ROTATE_270, TRANSVERSE


def to_rgb(im: Image.Image, factor: int = 1, strips: Iterable[Image.Image] | None = None) -> Image.Image:
    """The decoded ``im`` as RGB, reduced ``factor`` times (the mean of each ``factor`` x ``factor`` block), its
    transparency flattened on white and its EXIF orientation applied, built strip by strip: besides ``im`` only the
    result and one strip are ever held (a whole-image convert, transpose and reduce would each copy all of it).
    ``strips``: ``im``'s rows from the top, decoded one strip at a time (:func:`png_strips`), each a
    multiple of ``factor`` rows high but the last, when ``im`` itself was never decoded. An RGB image that needs
    none of it is returned as it is."""
    method = UPRIGHT.get(orientation(im))
    if strips is None and im.mode == "RGB" and factor == 1 and method is None:
        return im
    alpha = im.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (im.mode == "P" and "transparency" in im.info)
    w, h = im.size
    size = (-(-w // factor), -(-h // factor))
    turned = method in (Image.Transpose.TRANSPOSE, Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_270,
                        Image.Transpose.TRANSVERSE)
    out = Image.new("RGB", size[::-1] if turned else size)
    if strips is None:
        rows = strip_rows(w, factor)
        strips = (im.crop((0, y, w, min(h, y + rows))) for y in range(0, h, rows))
    y = 0
    for part in strips:
        height = part.height
        strip = _strip_rgb(part, alpha)
        if factor > 1:
            strip = strip.reduce(factor)
        out.paste(strip.transpose(method) if method is not None else strip,
                  _upright_at(method, y // factor, strip.height, size))
        y += height
    return out


def strip_rows(width: int, factor: int) -> int:
    """Rows a strip holds: about :data:`STRIP_PIXELS` pixels, a multiple of ``factor``."""
    return max(factor, STRIP_PIXELS // width // factor * factor)
