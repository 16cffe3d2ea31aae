"""Thumbnails and face crops: decoded at a reduced scale, made once, kept on disk in the index folder.

A library thumbnail is a JPEG of at most ``size`` pixels a side that keeps the photo's shape (the page letterboxes
it, never crops it). A face crop is a square JPEG around one face box; every face of a photo is cut from **one**
decode of that photo, at the smallest scale that still gives the smallest of its faces ``size`` pixels (a JPEG is
decoded at 1/2, 1/4 or 1/8 of its size by DCT scaling), so a 100-MP group photo with 50 faces is decoded once at a
fraction of its pixels, not 50 times whole (issue 47).

Kept files are written to a temporary name and renamed into place; a face crop is kept only while its face is
(``keep`` is asked after the rename, and a crop whose face was removed or forgotten meanwhile is deleted again), so
no crop outlives its face.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from PIL import Image, ImageOps

from imagent.core.imageio import image_from_bytes
from imagent.core.types import ImageRecord

THUMB_SIZES = (320, 1600)  # grid cells (twice their CSS size), the photo view
THUMB_DIR = "thumbnails"
THUMB_MARGIN = 0.25  # of a face box's size, added on every side of a face crop
# A face crop's JPEG decode holds at most this many pixels (a bigger photo is decoded smaller by DCT scaling; a face
# crop is at most 512 px, so only a photo whose faces are tiny would want more).
CROP_DECODE_PIXELS = 32_000_000  # a 100-MP photo (the default indexing.max_pixels) at 1/2 scale: 25 MP

Box = tuple[float, float, float, float]


def thumbnail_key(record: ImageRecord, fingerprint: str | None) -> str:
    """The cache name of ``record``'s thumbnails: its content hash (else a hash of its id and fingerprint)."""
    if record.content_hash:
        return record.content_hash
    return hashlib.sha256(f"{record.id}\0{fingerprint or ''}\0{record.path}".encode("utf-8", "replace")).hexdigest()


def crop_digest(record: ImageRecord, box: Box) -> str:
    """What a face crop is cut from: the photo's content (hash, else id and path) and the box."""
    photo = record.content_hash or f"{record.id}\0{record.path}"
    return hashlib.sha256(f"{photo}\0{','.join(f'{v:.2f}' for v in box)}".encode("utf-8", "replace")).hexdigest()


DCT_SCALES = (1 / 8, 1 / 4, 1 / 2, 1.0)  # what a JPEG decoder can give without decoding whole


def decode_reduced(data: bytes, scale: float, max_pixels: int, max_scale: float = 1.0) -> Image.Image:
    """``data`` (an image file's bytes) as an upright RGB image of about ``scale`` times its size: a JPEG is decoded
    at the smallest DCT scale at least ``scale`` (or the largest at most ``max_scale``, when that is smaller: the
    memory bound wins), anything else (and a JPEG that fails that way) through
    :func:`imagent.core.imageio.image_from_bytes` (its checks and limits), reduced while it is decoded."""
    scale = min(1.0, max(scale, 1e-6), max_scale)
    dct = next(d for d in DCT_SCALES if d >= scale - 1e-9)
    if dct > max_scale:
        dct = max([d for d in DCT_SCALES if d <= max_scale] or [DCT_SCALES[0]])
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format == "JPEG" and im.width * im.height <= max_pixels:
                im.draft("RGB", (max(1, math.ceil(im.width * dct)), max(1, math.ceil(im.height * dct))))
                im.load()
                return ImageOps.exif_transpose(im).convert("RGB")
    except Exception:  # the careful path below says what is wrong with it
        pass
    size = upright_size(data)
    if size is None or scale >= 1:
        return image_from_bytes(data, max_pixels)  # its checks say what is wrong with a file that cannot be read
    # reduced while decoding, strip by strip for a large PNG (imagent.core.strips): never the whole picture held
    return image_from_bytes(data, max_pixels, max(1, math.ceil(max(size) * scale)), long_side=True)


def upright_size(data: bytes) -> tuple[int, int] | None:
    """An image file's width and height with its EXIF orientation applied, from its header (None when it cannot be
    read: the decode that follows says why)."""
    try:
        with Image.open(io.BytesIO(data)) as probe:
            w, h = probe.size
            turned = probe.getexif().get(0x0112, 1) in (5, 6, 7, 8)
    except Exception:
        return None
    return (h, w) if turned else (w, h)


def render_thumbnail(data: bytes, size: int, max_pixels: int) -> bytes:
    """``data`` as a JPEG of at most ``size`` pixels a side, the photo's shape kept, EXIF orientation applied."""
    w, h = upright_size(data) or (size, size)
    out = decode_reduced(data, size / max(w, h, 1), max_pixels)
    out.thumbnail((size, size), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=85, optimize=True)
    return buf.getvalue()


def _crop_window(box: Box, w: int, h: int) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box[0] * w, box[1] * h, box[2] * w, box[3] * h
    side = max(x1 - x0, y1 - y0) * (1 + 2 * THUMB_MARGIN)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    left, top = max(0, round(cx - side / 2)), max(0, round(cy - side / 2))
    right, bottom = min(w, round(cx + side / 2)), min(h, round(cy + side / 2))
    return left, top, max(right, left + 1), max(bottom, top + 1)


def crop_scale(boxes: Sequence[Box], width: int, height: int, size: int) -> tuple[float, float]:
    """``(scale, max_scale)``: the scale an upright photo of ``width`` x ``height`` is decoded at to cut crops of
    ``size`` px around ``boxes`` (the smallest crop keeps ``size`` pixels a side), and the largest that keeps the
    decode within :data:`CROP_DECODE_PIXELS`."""
    cap = min(1.0, math.sqrt(CROP_DECODE_PIXELS / max(width * height, 1)))
    if not boxes:
        return 1.0, cap
    smallest = min(max((b[2] - b[0]) * width, (b[3] - b[1]) * height) * (1 + 2 * THUMB_MARGIN) for b in boxes)
    return min(1.0, size / max(smallest, 1.0)), cap


def crop_faces(data: bytes, boxes: Sequence[Box], size: int, max_pixels: int) -> list[bytes]:
    """Square JPEGs of at most ``size`` px around each of ``boxes`` (fractions of the upright photo, with a margin),
    all cut from one reduced decode of ``data``."""
    w, h = upright_size(data) or (1, 1)
    scale, cap = crop_scale(boxes, w, h, size)
    im = decode_reduced(data, scale, max_pixels, cap)
    out = []
    for box in boxes:
        crop = im.crop(_crop_window(box, *im.size))
        crop.thumbnail((size, size))
        buf = io.BytesIO()
        crop.save(buf, "JPEG", quality=85)
        out.append(buf.getvalue())
    return out


class ThumbnailCache:
    """Thumbnails in ``<root>/<size>/<key[:2]>/<key>.jpg`` (the library's: ``<index>/thumbnails``; face crops:
    ``<index>/face-thumbnails``), written once (atomically) and read after. ``workers`` decodes run at once (a page
    of a grid asks for sixty)."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self._slots = threading.BoundedSemaphore(max(1, workers))
        self.made = 0  # renders run by this process (tests read it: a hit decodes nothing)

    def path(self, key: str, size: int) -> Path:
        return self.root / str(size) / key[:2] / f"{key}.jpg"

    def get(self, key: str, size: int) -> bytes | None:
        try:
            return self.path(key, size).read_bytes()
        except OSError:
            return None

    def make(self, key: str, size: int, render: Callable[[], bytes]) -> bytes:
        """The thumbnail ``key`` at ``size``: from disk, else ``render()`` (at most ``workers`` at once), kept."""
        with self._slots:
            hit = self.get(key, size)  # another request may have made it while this one waited
            if hit is not None:
                return hit
            data = render()
            self.made += 1
            self.store(key, size, data)
            return data

    def make_many(self, size: int, keys: Sequence[str], render: Callable[[], list[bytes]],
                  keep: Callable[[], set[str]]) -> dict[str, bytes]:
        """``render()`` once (at most ``workers`` at once) for the thumbnails ``keys``, all kept; then ``keep()``
        says which keys may stay (the others, whose subject went meanwhile, are deleted again)."""
        with self._slots:
            made = dict(zip(keys, render(), strict=True))
            self.made += 1
            for key, data in made.items():
                self.store(key, size, data)
            stays = keep()
            for key in set(made) - stays:
                self.drop(key, size)
            return {k: v for k, v in made.items() if k in stays}

    def store(self, key: str, size: int, data: bytes) -> None:
        path = self.path(key, size)
        tmp = ""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".jpg")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:  # a read-only index: served, just not kept
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def drop(self, key: str, size: int) -> None:
        """Delete one kept thumbnail (and its folders when they are left empty)."""
        path = self.path(key, size)
        with contextlib.suppress(OSError):
            path.unlink()
        for folder in (path.parent, path.parent.parent, self.root):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


__all__ = ["THUMB_DIR", "THUMB_SIZES", "ThumbnailCache", "crop_digest", "crop_faces", "crop_scale",
           "decode_reduced", "render_thumbnail", "thumbnail_key"]
