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


# --------------------------------------------------------------------------- reduced decodes (issue 47)


def _reference(im: Image.Image) -> Image.Image:
    """What a whole-image decode gives: EXIF orientation applied, transparency flattened on white, RGB."""
    from PIL import ImageOps

    up = ImageOps.exif_transpose(im)
    if up.mode in ("RGBA", "LA", "PA") or (up.mode == "P" and "transparency" in up.info):
        rgba = up.convert("RGBA")
        out = Image.new("RGB", rgba.size, (255, 255, 255))
        out.paste(rgba, mask=rgba.getchannel("A"))
        return out
    return up.convert("RGB")


def _picture(mode: str, size: tuple[int, int]) -> Image.Image:
    import numpy as np

    rng = np.random.default_rng(7)
    rgba = rng.integers(0, 256, (size[1], size[0], 4), dtype=np.uint8)
    im = Image.fromarray(rgba, "RGBA")
    if mode == "P":
        im = im.convert("RGB").quantize(64)  # more than 16 colours: 8 bits a pixel in a PNG
        im.info["transparency"] = 3
        return im
    return im.convert(mode)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_reduced_decode_is_the_whole_decode_reduced_strip_by_strip(monkeypatch, mode, orientation):
    """Conversion, flattening, orientation and reduction strip by strip (a few rows at a time here) give what the
    whole-image path gives, for every EXIF orientation; reduced by 3 it is that image's 3x3 block means."""
    from imagent.core import strips

    monkeypatch.setattr(strips, "STRIP_PIXELS", 37 * 5)  # strips of 3 or 6 rows of the 37-px-wide picture
    im = _picture(mode, (37, 22))
    im.getexif()[0x0112] = orientation
    ref = _reference(im)
    assert list(strips.to_rgb(im).getdata()) == list(ref.getdata())
    im = _picture(mode, (36, 21))
    im.getexif()[0x0112] = orientation
    small = strips.to_rgb(im, 3)
    assert small.size == ((12, 7) if orientation < 5 else (7, 12))
    assert list(small.getdata()) == list(_reference(im).reduce(3).getdata())


def test_scaled_opens_keep_what_a_pass_needs_and_say_the_photos_size(images, tmp_path):
    from imagent.core.imageio import image_from_bytes, open_image_scaled

    big = tmp_path / "big.png"
    Image.new("RGB", (3000, 1000), (30, 90, 200)).save(big)
    im = open_image_scaled(big, 224)
    assert im.size == (750, 250) and im.info["source_size"] == (3000, 1000)  # reduced by 4: both sides >= 224
    im = open_image_scaled(big, 1024, long_side=True)
    assert im.size == (1500, 500) and im.getpixel((10, 10)) == (30, 90, 200)
    ex = Image.Exif()
    ex[0x0112] = 6  # stored on its side: shown upright
    jpg = tmp_path / "turned.jpg"
    Image.new("RGB", (4000, 3000), (200, 30, 30)).save(jpg, quality=90, exif=ex)
    im = open_image_scaled(jpg, 256)
    assert im.size == (375, 500) and im.info["source_size"] == (3000, 4000)  # DCT draft 1/8, turned upright
    assert image_from_bytes(jpg.read_bytes()).size == (3000, 4000)
    assert open_image_scaled(images.jpeg(tmp_path / "small.jpg", size=(64, 48)), 224).size == (64, 48)
    with pytest.raises(ImageLoadError):
        open_image_scaled(tmp_path / "nothing.png", 224)


_PEAK = """
import sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
from imagent.core import imageio
path, call = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
base = peak()
if call == "probe":
    imageio.probe_file(path)
elif call == "open":
    imageio.open_image(path)
else:
    side, long_side = call.split(":")
    imageio.open_image_scaled(path, int(side), long_side=long_side == "long")
print(peak() - base)
"""


_LARGE = (6000, 5000)


@pytest.fixture(scope="module")
def large_png(tmp_path_factory) -> Path:
    """A 30-MP PNG under 2 MB on disk (a flat picture with a shape), written once for the module."""
    from PIL import ImageDraw

    path = tmp_path_factory.mktemp("large") / "big.png"
    im = Image.new("RGB", _LARGE, (40, 120, 200))
    ImageDraw.Draw(im).ellipse((1000, 1000, 4000, 3500), fill=(250, 250, 0))
    im.save(path, compress_level=1)
    assert path.stat().st_size < 2_000_000
    return path


@pytest.mark.parametrize("call", ["probe", "open", "224:short", "2048:long", "256:short", "1024:short"])
def test_decoding_a_large_png_takes_about_its_pixels_not_four_times(large_png, call):
    """Issue 47 (hostile finding 10): a large, small-on-disk PNG is decoded with at most 1.5x its pixel bytes
    (width x height x 3) at the peak, in a fresh process: the probe, a whole decode (RGB, upright: kept as decoded)
    and each reduced one an index pass makes (pixel model 224, faces 2048 on the long side, pHash 256, image
    encoders 1024). A whole-image convert and transpose took 4x."""
    import subprocess
    import sys

    w, h = _LARGE
    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run([sys.executable, "-c", _PEAK, str(large_png), call], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": src}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) <= 1.5 * w * h * 3, f"{call}: peak {int(out.stdout) / (w * h * 3):.2f}x the pixel bytes"


def _png(im: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", **kw)
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["L", "LA", "RGB", "RGBA", "P", "P4", "I;16", "interlaced", "exif-after-data"])
def test_a_png_decoded_strip_by_strip_is_the_whole_decode(monkeypatch, kind):
    """Pillow's own PNG row decoder, a few rows at a time (imagent.core.strips), gives the pixels the whole
    decode gives, for each 8-bit layout (with a palette and its transparency); the layouts it does not cover are
    decoded whole; EXIF written after the image data still turns the photo upright."""
    from imagent.core import imageio, strips

    monkeypatch.setattr(strips, "WHOLE_PIXELS", 0)
    monkeypatch.setattr(strips, "STRIP_PIXELS", 42 * 4)  # strips of 4 rows
    mode = {"P4": "RGB", "interlaced": "RGB", "exif-after-data": "RGB"}.get(kind, kind)
    im = _picture(mode if mode != "I;16" else "L", (42, 28))
    if kind == "P4":  # 8 colours: 4 bits a pixel
        im = im.quantize(8)
    if kind == "I;16":
        im = im.convert("I;16")
    data = _png(im)
    if kind == "interlaced":  # Pillow writes no interlaced PNG: the header's flag is enough to be passed over
        import struct
        import zlib

        header = data[12:29][:-1] + b"\x01"
        data = data[:12] + header + struct.pack(">I", zlib.crc32(header)) + data[33:]
        assert strips.png_strips(data, Image.open(io.BytesIO(data)), 4) is None
        return
    if kind == "exif-after-data":  # move an eXIf chunk (orientation 8) behind the IDAT chunks
        ex = Image.Exif()
        ex[0x0112] = 8
        tiff = ex.tobytes()
        import struct
        import zlib

        chunk = struct.pack(">I", len(tiff)) + b"eXIf" + tiff + struct.pack(">I", zlib.crc32(b"eXIf" + tiff))
        data = data[:-12] + chunk + data[-12:]
    opened = Image.open(io.BytesIO(data))
    covered = strips.png_strips(data, opened, 4) is not None
    assert covered == (kind in ("L", "LA", "RGB", "RGBA", "P", "exif-after-data"))
    whole = Image.open(io.BytesIO(data))
    whole.load()
    got = imageio.image_from_bytes(data)
    assert got.size == ((28, 42) if kind == "exif-after-data" else (42, 28))  # orientation 8: turned upright
    assert list(got.getdata()) == list(_reference(whole).getdata())
    assert list(imageio.image_from_bytes(data, min_side=13).getdata()) == list(
        _reference(whole).reduce(2).getdata())
    info, _ = imageio._probe_bytes(data, 10**6)  # the probe walks the same strips, keeping none
    assert (info.width, info.height) == got.size


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_large_png_is_refused_by_the_strip_decode_too(monkeypatch, damage):
    from imagent.core import imageio, strips

    monkeypatch.setattr(strips, "WHOLE_PIXELS", 0)
    monkeypatch.setattr(strips, "STRIP_PIXELS", 41 * 4)
    data = _png(_picture("RGB", (41, 27)))
    layout = strips.PngLayout(data)
    a, b = layout.idat[0]
    if damage == "truncated":  # the image data ends early (the chunk kept well-formed: a shorter stream)
        import struct
        import zlib

        body = zlib.compress(zlib.decompress(data[a:b])[: 10 * (41 * 3 + 1)])
        chunk = struct.pack(">I", len(body)) + b"IDAT" + body + struct.pack(">I", zlib.crc32(b"IDAT" + body))
        data = data[: a - 8] + chunk + data[b + 4:]
    else:  # a filter type byte that does not exist, inside a valid stream
        import struct
        import zlib

        raw = bytearray(zlib.decompress(data[a:b]))
        raw[5 * (41 * 3 + 1)] = 9
        body = zlib.compress(bytes(raw))
        chunk = struct.pack(">I", len(body)) + b"IDAT" + body + struct.pack(">I", zlib.crc32(b"IDAT" + body))
        data = data[: a - 8] + chunk + data[b + 4:]
    with pytest.raises(ImageLoadError):
        imageio.image_from_bytes(data)
    with pytest.raises(ImageLoadError):
        imageio._probe_bytes(data, 10**6)
