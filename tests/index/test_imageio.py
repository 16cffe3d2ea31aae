"""Safe image reading and EXIF parsing (no models)."""

from __future__ import annotations

import io
import os
from datetime import datetime
from pathlib import Path

import pytest
from PIL import Image
from PIL.TiffImagePlugin import IFDRational

from imagent.core.imageio import (
    IMAGE_EXTENSIONS,
    ImageInfo,
    ImageLoadError,
    open_image,
    parse_exif_datetime,
    probe_file,
    probe_image,
    read_exif,
)


def test_extensions():
    from imagent.core.imageio import HEIF_EXTENSIONS, HEIF_INSTALLED

    # HEIC/HEIF too when the optional pillow-heif is installed (issue 23)
    heif = HEIF_EXTENSIONS if HEIF_INSTALLED else frozenset()
    assert {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"} | heif == IMAGE_EXTENSIONS


def test_open_image_rgb_and_probe(images, tmp_path):
    p = images.jpeg(tmp_path / "a.jpg", size=(64, 48))
    im = open_image(p)
    assert im.mode == "RGB" and im.size == (64, 48)
    im.load()  # fully decoded and detached from the file
    assert probe_image(p) == ImageInfo(64, 48, "JPEG")
    # probe decodes JPEG at reduced scale; the reported size is still the real one
    assert probe_file(p).info == ImageInfo(64, 48, "JPEG")


@pytest.mark.parametrize("fmt,suffix", [("PNG", "png"), ("GIF", "gif"), ("WEBP", "webp"), ("BMP", "bmp"),
                                        ("TIFF", "tif")])
def test_formats(images, tmp_path, fmt, suffix):
    p = images.save(tmp_path / f"a.{suffix}", fmt)
    assert open_image(p).mode == "RGB"
    assert probe_image(p).format == fmt


def test_exif_orientation_applied(images, tmp_path):
    p = images.jpeg(tmp_path / "rot.jpg", size=(40, 20), exif=images.exif(orientation=6))
    assert open_image(p).size == (20, 40)
    assert probe_image(p) == ImageInfo(20, 40, "JPEG")


def test_transparent_palette_flattened_on_white(tmp_path):
    im = Image.new("P", (4, 4), 0)
    im.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    im.info["transparency"] = 0
    p = tmp_path / "t.png"
    im.save(p, transparency=0)
    assert open_image(p).getpixel((0, 0)) == (255, 255, 255)


def test_wrong_extension_real_image(images, tmp_path):
    p = tmp_path / "really_png.jpg"
    p.write_bytes(images.png_bytes())
    assert probe_image(p).format == "PNG"


def _bad_file(kind: str, d: Path, images) -> Path:
    p = d / kind
    if kind == "missing.jpg":
        pass
    elif kind == "dir.jpg":
        p.mkdir()
    elif kind == "zero.jpg":
        p.write_bytes(b"")
    elif kind == "text.jpg":
        p.write_text("hello")
    elif kind == "html.png":
        p.write_text("<html><body>nope</body></html>")
    elif kind == "truncated.jpg":
        p.write_bytes(images.stamp(0).read_bytes()[:3000])
    elif kind == "crc.png":
        images.png_bad_header_crc(p)
    elif kind == "idat.png":
        images.png_corrupt_idat(p)
    elif kind == "big.bmp":
        images.huge_bmp_header(p, 100_000, 100_000)
    return p


@pytest.mark.parametrize(
    "kind,reason",
    [
        ("missing.jpg", "not found"),
        ("dir.jpg", "directory"),
        ("zero.jpg", "empty"),
        ("text.jpg", "not an image"),
        ("html.png", "not an image"),
        ("truncated.jpg", "truncated"),
        ("crc.png", "corrupt PNG"),
        ("idat.png", "corrupt"),
        ("big.bmp", "pixels"),
    ],
)
def test_refused(images, tmp_path, kind, reason):
    p = _bad_file(kind, tmp_path, images)
    with pytest.raises(ImageLoadError, match=reason):
        open_image(p)
    with pytest.raises(ImageLoadError, match=reason):
        probe_image(p)


def test_broken_symlink_and_fifo(tmp_path):
    link = tmp_path / "l.jpg"
    link.symlink_to(tmp_path / "nowhere.jpg")
    with pytest.raises(ImageLoadError, match="broken symbolic link"):
        probe_image(link)
    fifo = tmp_path / "f.jpg"
    os.mkfifo(fifo)
    with pytest.raises(ImageLoadError, match="not a regular file"):
        probe_image(fifo)  # must not block reading a pipe


def test_max_bytes(images, tmp_path):
    p = images.jpeg(tmp_path / "a.jpg")
    with pytest.raises(ImageLoadError, match="too large"):
        open_image(p, max_bytes=100)


def test_pixel_cap_before_decoding(images, tmp_path):
    """A 20000x20000 PNG (tiny on disk, 400 MB once decoded) is refused from its header."""
    p = images.huge_png(tmp_path / "bomb.png", 20_000, 20_000)
    assert p.stat().st_size < 200_000
    for fn in (open_image, probe_image, probe_file):
        with pytest.raises(ImageLoadError, match="pixels"):
            fn(p)
    # Also above PIL's own limit: PIL's DecompressionBombError is refused the same way.
    with pytest.raises(ImageLoadError, match="pixels"):
        probe_image(p, max_pixels=10**10)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_pixel_cap_is_ours(images, tmp_path):
    p = images.jpeg(tmp_path / "a.jpg", size=(100, 50))
    with pytest.raises(ImageLoadError, match=r"100x50 = 5000; limit 4999"):
        probe_image(p, max_pixels=4999)
    assert probe_image(p, max_pixels=5000).width == 100
    # Between PIL's warning threshold and ours: our cap decides, PIL's warning is not an error.
    q = images.huge_png(tmp_path / "mid.png", 10_000, 9_500)  # 95 M pixels (PIL warns above ~89 M)
    with pytest.raises(ImageLoadError, match="limit 90000000"):
        probe_image(q, max_pixels=90_000_000)


# --------------------------------------------------------------------------- EXIF


def test_read_exif_time_and_gps(images, tmp_path):
    p = images.jpeg(tmp_path / "a.jpg", exif=images.exif(datetime(2021, 6, 1, 12, 34, 56), (48.858222, 2.2945)))
    taken, lat, lon = read_exif(p)
    assert taken == datetime(2021, 6, 1, 12, 34, 56)
    assert lat == pytest.approx(48.858222, abs=1e-5) and lon == pytest.approx(2.2945, abs=1e-5)
    with Image.open(p) as im:  # an image works as well as a path
        assert read_exif(im) == (taken, lat, lon)


def test_read_exif_south_west(images, tmp_path):
    p = images.jpeg(tmp_path / "a.jpg", exif=images.exif(gps=(-33.8568, -70.6483)))
    taken, lat, lon = read_exif(p)
    assert taken is None
    assert lat == pytest.approx(-33.8568, abs=1e-5) and lon == pytest.approx(-70.6483, abs=1e-5)


def test_read_exif_falls_back_to_ifd0_datetime(images, tmp_path):
    ex = images.exif(taken="0000:00:00 00:00:00", datetime_ifd0="2019:12:31 23:59:59")
    p = images.jpeg(tmp_path / "a.jpg", exif=ex)
    assert read_exif(p)[0] == datetime(2019, 12, 31, 23, 59, 59)


@pytest.mark.parametrize(
    "gps",
    [
        {1: "X", 2: (48.0, 1.0, 2.0), 3: "E", 4: (2.0, 0.0, 0.0)},  # bad reference
        {1: "N", 2: (IFDRational(1, 0), 0.0, 0.0), 3: "E", 4: (2.0, 0.0, 0.0)},  # zero denominator
        {1: "N", 2: (200.0, 0.0, 0.0), 3: "E", 4: (2.0, 0.0, 0.0)},  # out of range
        {1: "N", 2: (48.0, 75.0, 0.0), 3: "E", 4: (2.0, 0.0, 0.0)},  # 75 minutes
        {1: "N", 2: (48.0, 1.0, 2.0), 4: (2.0, 0.0, 0.0)},  # no longitude reference
        {1: "N", 2: (0.0, 0.0, 0.0), 3: "E", 4: (0.0, 0.0, 0.0)},  # (0, 0): no fix
        {1: "N", 2: (48.0, 1.0, 2.0), 3: "E", 4: (2.0, 0.0, 0.0), 9: "V"},  # status void
        {1: "N", 2: (48.0, 1.0, 2.0, 3.0), 3: "E", 4: (2.0, 0.0, 0.0)},  # four numbers
    ],
)
def test_read_exif_garbage_gps(images, tmp_path, gps):
    p = images.jpeg(tmp_path / "a.jpg", exif=images.exif(taken="2020:02:30 10:00:00", raw_gps=gps))
    assert read_exif(p) == (None, None, None)  # Feb 30 is no date either


@pytest.mark.filterwarnings("ignore:Corrupt EXIF:UserWarning")  # pytest shows what imageio filters
def test_read_exif_never_raises(images, tmp_path):
    p = images.jpeg_garbage_exif_segment(tmp_path / "g.jpg")
    assert open_image(p).mode == "RGB"  # the image itself is fine
    assert read_exif(p) == (None, None, None)
    (tmp_path / "t.jpg").write_text("not an image")
    assert read_exif(tmp_path / "t.jpg") == (None, None, None)
    assert read_exif(tmp_path / "missing.jpg") == (None, None, None)
    assert read_exif(Image.new("RGB", (2, 2))) == (None, None, None)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2021:06:01 12:34:56", datetime(2021, 6, 1, 12, 34, 56)),
        ("2021:06:01 12:34:56\x00", datetime(2021, 6, 1, 12, 34, 56)),
        (b"2021:06:01 12:34:56", datetime(2021, 6, 1, 12, 34, 56)),
        ("2021-06-01T12:34", datetime(2021, 6, 1, 12, 34)),
        ("2021:06:01", datetime(2021, 6, 1)),
        ("0000:00:00 00:00:00", None),
        ("    :  :     :  :  ", None),
        ("2021:13:01 00:00:00", None),
        ("2021:06:01 25:00:00", None),
        ("1700:01:01 00:00:00", None),
        ("", None),
        (None, None),
        (12345, None),
    ],
)
def test_parse_exif_datetime(text, expected):
    assert parse_exif_datetime(text) == expected


def test_probe_file_hash_matches_bytes(images, tmp_path):
    import hashlib

    p = images.jpeg(tmp_path / "a.jpg", exif=images.exif(datetime(2020, 1, 2, 3, 4, 5)))
    fp = probe_file(p)
    assert fp.content_hash == hashlib.sha256(Path(p).read_bytes()).hexdigest()
    assert fp.size == p.stat().st_size and fp.taken_time == datetime(2020, 1, 2, 3, 4, 5)


def test_truncated_png_and_gif(images, tmp_path):
    data = images.png_bytes()
    (tmp_path / "t.png").write_bytes(data[: len(data) // 2])
    buf = io.BytesIO()
    images.stamp_image(1).convert("P").save(buf, "GIF")
    (tmp_path / "t.gif").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    for name in ("t.png", "t.gif"):
        with pytest.raises(ImageLoadError, match=r"truncated|corrupt"):
            probe_image(tmp_path / name)
