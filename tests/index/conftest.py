"""Helpers for the indexing tests: real images (stamps re-encoded), EXIF writing, crafted bad files."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import zlib
from datetime import datetime
from pathlib import Path

import pytest
from PIL import Image

from testkit import TinyEmbedder

# Same resolution as the top-level conftest (not importable under --import-mode=importlib).
REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("IMAGENT_SHARED", REPO.parent / "shared"))
STAMPS = SHARED / "data" / "stamps"


class Images:
    """Factory for the image files the tests write."""

    @staticmethod
    def stamp(n: int = 0) -> Path:
        files = sorted((STAMPS / "images").glob("*.jpg"))
        return files[n % len(files)]

    @staticmethod
    def stamp_image(n: int = 0) -> Image.Image:
        with Image.open(Images.stamp(n)) as im:
            return im.convert("RGB")

    @staticmethod
    def exif(
        taken: datetime | str | None = None,
        gps: tuple[float, float] | None = None,
        orientation: int | None = None,
        raw_gps: dict[int, object] | None = None,
        datetime_ifd0: str | None = None,
    ) -> Image.Exif:
        """EXIF with DateTimeOriginal, a GPS IFD (decimal degrees -> DMS with refs) and orientation."""
        ex = Image.Exif()
        if orientation is not None:
            ex[0x0112] = orientation
        if datetime_ifd0 is not None:
            ex[0x0132] = datetime_ifd0
        if taken is not None:
            ex.get_ifd(0x8769)[0x9003] = taken if isinstance(taken, str) else taken.strftime("%Y:%m:%d %H:%M:%S")
        if gps is not None:
            lat, lon = gps
            g = ex.get_ifd(0x8825)
            g[1] = "N" if lat >= 0 else "S"
            g[2] = _dms(abs(lat))
            g[3] = "E" if lon >= 0 else "W"
            g[4] = _dms(abs(lon))
        if raw_gps is not None:
            g = ex.get_ifd(0x8825)
            g.update(raw_gps)
        return ex

    @staticmethod
    def jpeg(path: Path, n: int = 0, exif: Image.Exif | None = None, size: tuple[int, int] | None = None) -> Path:
        im = Images.stamp_image(n)
        if size is not None:
            im = im.resize(size)
        path.parent.mkdir(parents=True, exist_ok=True)
        im.save(path, "JPEG", quality=90, **({"exif": exif} if exif is not None else {}))
        return path

    @staticmethod
    def save(path: Path, fmt: str, n: int = 0, **kw: object) -> Path:
        im = Images.stamp_image(n)
        if fmt == "GIF":
            im = im.convert("P", palette=Image.Palette.ADAPTIVE)
        path.parent.mkdir(parents=True, exist_ok=True)
        im.save(path, fmt, **kw)
        return path

    @staticmethod
    def png_bytes(n: int = 0) -> bytes:
        buf = io.BytesIO()
        Images.stamp_image(n).save(buf, "PNG")
        return buf.getvalue()

    @staticmethod
    def huge_png(path: Path, width: int, height: int) -> Path:
        """A valid 1-bit PNG of ``width x height`` written row by row (a few dozen KB on disk; decoding
        it would need ``width*height`` bytes of RAM in PIL's mode "1")."""
        row = b"\x00" + bytes((width + 7) // 8)
        comp = zlib.compressobj(9)
        chunks = []
        for _ in range(height):
            chunks.append(comp.compress(row))
        chunks.append(comp.flush())
        idat = b"".join(chunks)
        ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))
        return path

    @staticmethod
    def png_header_only(path: Path, width: int, height: int) -> Path:
        """A PNG signature and IHDR claiming ``width x height``, then an empty IDAT (no pixel data)."""
        ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", b"") + _chunk(b"IEND", b""))
        return path

    @staticmethod
    def huge_bmp_header(path: Path, width: int, height: int) -> Path:
        """Only a BMP header that claims ``width x height`` 24-bit pixels (no pixel data)."""
        info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
        path.write_bytes(b"BM" + struct.pack("<IHHI", 14 + 40, 0, 0, 14 + 40) + info)
        return path

    @staticmethod
    def png_bad_header_crc(path: Path) -> Path:
        data = bytearray(Images.png_bytes())
        data[8 + 8 + 13] ^= 0xFF  # first byte of IHDR's CRC
        path.write_bytes(bytes(data))
        return path

    @staticmethod
    def png_corrupt_idat(path: Path) -> Path:
        data = bytearray(Images.png_bytes())
        i = data.find(b"IDAT")
        for k in range(40, 60):  # scramble compressed bytes; the CRC no longer matches either
            data[i + k] ^= 0x5A
        path.write_bytes(bytes(data))
        return path

    @staticmethod
    def jpeg_garbage_exif_segment(path: Path, n: int = 0) -> Path:
        """A good JPEG whose APP1 EXIF segment is random bytes after a valid TIFF magic."""
        buf = io.BytesIO()
        Images.stamp_image(n).save(buf, "JPEG")
        jpg = buf.getvalue()
        payload = b"Exif\x00\x00" + b"II*\x00" + b"\x08\x00\x00\x00" + b"\xff\x13\x37" * 40
        app1 = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
        path.write_bytes(jpg[:2] + app1 + jpg[2:])
        return path


def _dms(x: float) -> tuple[float, float, float]:
    d = int(x)
    m = int((x - d) * 60)
    s = round(((x - d) * 60 - m) * 60, 4)
    return (float(d), float(m), s)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


@pytest.fixture
def images() -> type[Images]:
    return Images


@pytest.fixture
def stamps_copy(tmp_path: Path) -> Path:
    """A private copy of the stamps data (images + captions.jsonl): tests may modify it."""
    return copy_stamps(tmp_path / "stamps")


def copy_stamps(dest: Path, limit: int | None = None) -> Path:
    """Copy the manifest (first ``limit`` rows) and its images, writable (the originals are read-only)."""
    (dest / "images").mkdir(parents=True)
    lines = (STAMPS / "captions.jsonl").read_text().splitlines()[:limit]
    for line in lines:
        row = json.loads(line)
        shutil.copyfile(STAMPS / row["file"], dest / row["file"])
    (dest / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return dest


@pytest.fixture
def copy_stamps_to():
    return copy_stamps


@pytest.fixture
def tiny() -> TinyEmbedder:
    return TinyEmbedder()
