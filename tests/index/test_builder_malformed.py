"""More than 20 malformed inputs beside good images: each bad one is skipped with a reason, the good
ones are indexed, and the build ends normally."""

from __future__ import annotations

import builtins
import io
import json
import os
import re
import shutil
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from PIL import Image

from imagent.core import imageio
from imagent.core.config import IndexOptions
from imagent.index.builder import build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts

pytestmark = [pytest.mark.real_model, pytest.mark.filterwarnings("ignore:Corrupt EXIF:UserWarning")]

MAX_FILE_BYTES = 150_000


def _make_unreadable(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chmod 000; as root (the usual CI case) that does not stop reads, so opening it raises instead."""
    path.chmod(0)
    if os.geteuid() != 0:
        return
    real_open = builtins.open

    def fake_open(file, *args, **kwargs):
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(imageio, "open", fake_open, raising=False)


@pytest.fixture
def messy(tmp_path, images, monkeypatch) -> tuple[Path, dict[str, str], set[str]]:
    """A folder of good and bad files: (folder, {bad name: expected reason regex}, {good names})."""
    d = tmp_path / "messy"
    d.mkdir()
    good: set[str] = set()
    bad: dict[str, str] = {}

    # --- good ones
    images.jpeg(d / "good1.jpg", 1)
    images.save(d / "good2.png", "PNG", 2)
    images.save(d / "anim.gif", "GIF", 3)
    images.save(d / "good.webp", "WEBP", 4)
    images.save(d / "good.tiff", "TIFF", 5, compression="tiff_lzw")
    (d / "png_inside.jpg").write_bytes(images.png_bytes(6))  # wrong extension, real image
    images.jpeg(d / "garbage_exif.jpg", 7, images.exif(
        taken="0000:00:00 00:00:00", raw_gps={1: "Q", 2: (91.0, 0.0, 0.0), 3: "E", 4: (500.0, 0.0, 0.0)}))
    images.jpeg_garbage_exif_segment(d / "corrupt_exif_segment.jpg", 8)
    images.jpeg(d / "rotated.jpg", 9, images.exif(orientation=8), size=(30, 10))
    good |= {"good1.jpg", "good2.png", "anim.gif", "good.webp", "good.tiff", "png_inside.jpg", "garbage_exif.jpg",
             "corrupt_exif_segment.jpg", "rotated.jpg"}

    # --- bad ones: (name, expected reason pattern, how to write it)
    full = images.stamp(10).read_bytes()
    png = images.png_bytes(11)
    gif = (d / "anim.gif").read_bytes()
    makers: list[tuple[str, str, Callable[[Path], object]]] = [
        ("truncated.jpg", "truncated", lambda p: p.write_bytes(full[: len(full) // 2])),
        ("header_only.jpg", "truncated|corrupt", lambda p: p.write_bytes(full[:200])),
        ("empty.jpg", "empty file", lambda p: p.write_bytes(b"")),
        ("text.jpg", "not an image", lambda p: p.write_text("just some text\n")),
        ("page.png", "not an image", lambda p: p.write_text("<!doctype html><html><body>404</body></html>")),
        ("drawing.png", "SVG/XML is not an accepted image format",
         lambda p: p.write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')),
        ("noise.tiff", "not an image", lambda p: p.write_bytes(b"\x00junk" + os.urandom(4096))),
        ("bomb.png", "pixels", lambda p: images.huge_png(p, 20_000, 20_000)),
        ("bomb.bmp", "pixels", lambda p: images.huge_bmp_header(p, 50_000, 50_000)),
        ("bad_crc.png", "corrupt", images.png_bad_header_crc),
        ("bad_idat.png", "corrupt", images.png_corrupt_idat),
        ("truncated.png", "truncated|corrupt", lambda p: p.write_bytes(png[: len(png) - 40])),
        ("truncated.gif", "truncated|corrupt", lambda p: p.write_bytes(gif[: len(gif) // 2])),
        ("folder.jpg", "is a directory", lambda p: p.mkdir()),
        ("broken_link.jpg", "broken symbolic link", lambda p: p.symlink_to(d / "does-not-exist.jpg")),
        ("pipe.jpg", "not a regular file", os.mkfifo),
        ("huge.png", "file too large", lambda p: p.write_bytes(os.urandom(MAX_FILE_BYTES + 1))),
        ("locked.jpg", "Permission denied", lambda p: images.jpeg(p, 12)),
        ("good1_copy.jpg", "same image as .*good1.jpg", lambda p: shutil.copyfile(d / "good1.jpg", p)),
        ("stub.gif", "truncated|corrupt", lambda p: p.write_bytes(b"GIF89a\x10\x00")),
        ("fake.webp", "corrupt", lambda p: p.write_bytes(b"RIFF\x10\x00\x00\x00WEBPVP8 junk")),
        ("zero_width.png", "corrupt|invalid", lambda p: images.png_header_only(p, 0, 10)),
        ("no_pixels.png", "truncated|corrupt", lambda p: images.png_header_only(p, 64, 64)),
        ("link_to_dir.jpg", "is a directory", lambda p: p.symlink_to(d / "folder.jpg")),
    ]
    for name, pattern, make in makers:
        make(d / name)
        bad[name] = pattern
    _make_unreadable(d / "locked.jpg", monkeypatch)

    # --- ignored: not image names, hidden
    (d / "readme.txt").write_text("ignored")
    (d / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (d / "._good1.jpg").write_bytes(b"\x00\x05\x16\x07AppleDouble")
    return d, bad, good


def test_malformed_folder(messy, tmp_path, caption_dual, minilm):
    d, bad, good = messy
    assert len(bad) >= 20
    idx = tmp_path / "idx"
    opts = IndexOptions(max_file_bytes=MAX_FILE_BYTES, batch_size=4)
    report = build_index(d, idx, IndexParts.of(caption_dual, minilm), opts)

    reasons = {Path(p).name: r for p, r in report.skipped}
    assert set(reasons) == set(bad), {k: v for k, v in reasons.items() if k not in bad}
    for name, pattern in bad.items():
        assert re.search(pattern, reasons[name]), (name, reasons[name])
    assert report.added == len(good) and report.total == len(good) + len(bad)
    print("\n".join(f"{k:26} {v}" for k, v in sorted(reasons.items())))

    g = Gallery(idx)
    names = {Path(r.path).name for r in g.records()}
    assert names == good
    by_name = {Path(r.path).name: r for r in g.records()}
    assert (by_name["garbage_exif.jpg"].taken_time, by_name["garbage_exif.jpg"].latitude) == (None, None)
    assert (by_name["rotated.jpg"].width, by_name["rotated.jpg"].height) == (10, 30)
    assert {Path(p).name for p, _ in g.skipped()} == set(bad)  # stored too

    # A second run: same verdicts, nothing new.
    again = build_index(d, idx, IndexParts.of(caption_dual, minilm), opts)
    assert (again.added, again.updated, again.unchanged) == (0, 0, len(good))
    assert {Path(p).name for p, _ in again.skipped} == set(bad)

    # Repair one bad file and delete another: the first is indexed, the second forgotten.
    (d / "truncated.jpg").write_bytes(_fresh_jpeg())
    (d / "empty.jpg").unlink()
    fixed = build_index(d, idx, IndexParts.of(caption_dual, minilm), opts)
    assert fixed.added == 1
    skipped_now = {Path(p).name for p, _ in Gallery(idx).skipped()}
    assert "empty.jpg" not in skipped_now and "truncated.jpg" not in skipped_now and "bomb.png" in skipped_now
    assert "truncated.jpg" in {Path(r.path).name for r in Gallery(idx).records()}
    with sqlite3.connect(idx / "records.sqlite") as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _fresh_jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 30)).save(buf, "JPEG")
    return buf.getvalue()


def test_malformed_manifest(messy, tmp_path, caption_dual, minilm, images):
    d, _bad, _good = messy
    shutil.copyfile(images.stamp(13), d / "real_image.dat")  # any extension is fine when a row names it
    rows = [
        {"id": "a", "file": "good1.jpg", "caption": "A good stamp."},
        {"id": "b", "file": "good2.png", "latitude": "48.85", "longitude": "2.35", "taken_time": "2020:01:02 03:04:05"},
        {"id": "c", "path": str(d / "real_image.dat"), "tags": "x, y"},
        {"id": "d", "file": "missing.jpg"},
        {"id": "e", "file": "anim.gif", "latitude": "north-ish", "longitude": "2.0"},
        {"id": "f", "file": "good.webp", "latitude": 123.0, "longitude": 2.0},
        {"id": "a", "file": "good.tiff", "caption": "duplicate id"},
        {"id": "g", "caption": "no file at all"},
        {"id": "h", "file": "good.tiff", "taken_time": "yesterday"},
        {"id": "i", "file": "truncated.jpg"},
        {"id": "j", "file": "rotated.jpg", "latitude": 10.0},
        {"id": "k", "file": "folder.jpg"},
        {"id": "l", "file": "bomb.png"},
        {"id": "m", "file": "png_inside.jpg", "longitude": float("nan"), "latitude": 1.0},
    ]
    lines = [json.dumps(r) for r in rows]
    lines.insert(5, "{this is not json")
    lines.insert(6, "[1, 2, 3]")
    lines.insert(7, "")
    manifest = d / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")

    report = build_index(manifest, tmp_path / "idx", IndexParts.of(caption_dual, minilm), IndexOptions(batch_size=2))
    g = Gallery(tmp_path / "idx")
    assert g.ids == ["a", "b", "c"]
    assert g.record("a").captions == ["A good stamp."]
    b = g.record("b")
    assert (b.latitude, b.longitude, b.taken_time) == (48.85, 2.35, datetime(2020, 1, 2, 3, 4, 5))
    assert g.record("c").tags == ["x", "y"] and g.record("c").path.endswith("real_image.dat")
    expected = [
        r"^file not found$",
        r"^line 5: bad latitude 'north-ish' \(not a number\)$",
        r"^line 6: invalid JSON",
        r"^line 7: not a JSON object$",
        r"^line 9: bad latitude 123.0 \(out of range",
        r"^line 10: duplicate id 'a' \(first on line 1\)$",
        r"^line 11: no 'file' or 'path' column$",
        r"^line 12: bad taken_time 'yesterday'",
        r"^truncated",
        r"^line 14: latitude and longitude must be given together$",
        r"^is a directory",
        r"pixels",
        r"^line 17: bad longitude nan",
    ]
    got = [r for _p, r in report.skipped]
    assert len(got) == len(expected), got
    for pattern, reason in zip(expected, got, strict=True):
        assert re.search(pattern, reason), (pattern, reason)
    assert (report.added, report.total) == (3, len(rows) + 2)
