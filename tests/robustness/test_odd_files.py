"""Robustness suite: a generated folder of >= 200 odd files, indexed with 0 crashes.

Every file must end either indexed (a record whose path opens the file) or skipped with a printable reason;
the build, a second incremental build and the CLI's plain-text report must not raise. Truncated and corrupt
images, mislabelled and refused formats, zero-byte files, decompression bombs and absurd headers, odd pixel
encodings, garbage EXIF, Latin-1 / control-character / markup / very long names, symlink loops, FIFOs, device
links, folders named like images, and a manifest of odd rows (lone surrogates, Latin-1 bytes, wrong types).

The encoder is a deterministic stand-in (the test is about file handling, not semantics); the figures are
printed (``odd files: tried=... crashed=...``) for the issue's closing note. Run with ``-s`` to see them.
"""

from __future__ import annotations

import io
import json
import os
import random
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from imagent.core.config import IndexOptions
from imagent.core.text import display_path
from imagent.index.builder import build_index
from imagent.index.gallery import SPACE_CAPTION_TEXT, Gallery
from imagent.index.parts import IndexParts
from imagent.models.encoders import CaptionDualEncoder
from testkit import TinyEmbedder

# PIL warns about the broken TIFF tags and EXIF it meets; the verdicts are what is tested.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MAX_BYTES = 2_000_000
MAX_PIXELS = 4_000_000


def _img(size=(24, 16), mode="RGB", color=(200, 40, 40)) -> Image.Image:
    im = Image.new(mode, size, color if mode in ("RGB", "RGBA") else 128)
    if mode == "RGB":  # some structure, so encoders have something to compress
        im.paste((20, 160, 60), (0, 0, size[0] // 2, size[1] // 2))
    return im


def _bytes(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png_header(w: int, h: int, bit_depth: int = 8, color: int = 2, idat: bytes = b"") -> bytes:
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _bomb_png(w: int, h: int) -> bytes:
    """A valid 1-bit PNG of w x h: a few KB on disk, w*h pixels to decode."""
    comp = zlib.compressobj(9)
    row = b"\x00" + bytes((w + 7) // 8)
    idat = b"".join(comp.compress(row) for _ in range(h)) + comp.flush()
    return _png_header(w, h, 1, 0, b"")[:33] + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _bmp_header(w: int, h: int) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54, 0, 0, 54) + info


def _gif_screen(w: int, h: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", w, h) + b"\x00\x00\x00" + b"\x2c" + struct.pack("<HHHH", 0, 0, w, h) + \
        b"\x00\x02\x02\x44\x01\x00\x3b"


def _exif_jpeg(rng: random.Random, kind: int) -> bytes:
    ex = Image.Exif()
    if kind == 0:
        ex[0x0112] = 99  # orientation out of range
    elif kind == 1:
        ex.get_ifd(0x8769)[0x9003] = "9999:99:99 99:99:99"
    elif kind == 2:
        ex.get_ifd(0x8769)[0x9003] = "\x00" * 19
    elif kind == 3:
        g = ex.get_ifd(0x8825)
        g.update({1: "X", 2: (1e308, -5.0, float("nan")), 3: "Q", 4: (0.0, 0.0, 0.0)})
    elif kind == 4:
        g = ex.get_ifd(0x8825)
        g.update({1: "N", 2: (0, 0), 3: "E", 4: ((1, 0), (2, 0), (3, 0))})  # zero denominators
    elif kind == 5:
        ex[0x0132] = "2021:02:30 25:61:61"
    else:
        ex[0x010F] = "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(200))  # Make: odd text
    jpg = _bytes(_img(), "JPEG")
    try:
        return _bytes(_img(), "JPEG", exif=ex)
    except Exception:  # PIL refuses to write some of these; splice a raw garbage APP1 instead
        payload = b"Exif\x00\x00II*\x00\x08\x00\x00\x00" + bytes(rng.randrange(256) for _ in range(120))
        return jpg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpg[2:]


def make_odd_folder(root: Path, seed: int = 11) -> tuple[int, list[str]]:
    """Write the odd files under ``root``; returns (inputs the builder should see, notes on what was made)."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    made: list[str] = []
    jpg, png = _bytes(_img((64, 48)), "JPEG", quality=85), _bytes(_img((64, 48)), "PNG")
    gif = _bytes(_img((32, 32)).convert("P"), "GIF")
    webp, bmp = _bytes(_img(), "WEBP"), _bytes(_img(), "BMP")
    tif = _bytes(_img(), "TIFF", compression="tiff_lzw")

    def put(name: str | bytes, make: bytes | Callable[[Path], object]) -> None:
        p = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(name))))
        if isinstance(make, bytes):
            p.write_bytes(make)
        else:
            make(p)
        made.append(name if isinstance(name, str) else os.fsdecode(name))

    # truncations of every format at several points (56)
    for fmt, data, ext in (("jpg", jpg, "jpg"), ("png", png, "png"), ("gif", gif, "gif"), ("webp", webp, "webp"),
                           ("bmp", bmp, "bmp"), ("tif", tif, "tif"), ("jpg2", _bytes(_img((64, 48)), "JPEG",
                                                                                        progressive=True), "jpg")):
        for frac in (0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.97, 0.995):
            put(f"trunc_{fmt}_{int(frac * 100)}.{ext}", data[: max(1, int(len(data) * frac))])
    # bit flips in the middle of valid files (24)
    for n in range(24):
        data = bytearray((jpg, png, gif, webp, bmp, tif)[n % 6])
        for _ in range(1 + n % 4):
            i = rng.randrange(len(data) // 4, len(data))
            data[i] ^= 1 << rng.randrange(8)
        put(f"flipped_{n}.{('jpg', 'png', 'gif', 'webp', 'bmp', 'tif')[n % 6]}", bytes(data))
    # mislabelled but real images (12)
    for n, (data, ext) in enumerate([(png, "jpg"), (jpg, "png"), (gif, "webp"), (bmp, "tif"), (webp, "gif"),
                                     (tif, "bmp"), (png, "tiff"), (jpg, "JPEG"), (png, "PNG"), (gif, "jpeg"),
                                     (webp, "jpg"), (bmp, "png")]):
        put(f"mislabelled_{n}.{ext}", data)
    # refused formats named like photos (12)
    for fmt in ("EPS", "PDF", "ICO", "PPM", "TGA", "PCX", "SGI", "IM", "DDS", "XBM", "JPEG2000", "SPIDER"):
        im = _img((16, 16), "L" if fmt in ("XBM", "SPIDER") else "RGB")
        if fmt == "XBM":
            im = im.convert("1")
        if fmt == "SPIDER":
            im = im.convert("F")
        try:
            put(f"format_{fmt.lower()}.jpg", _bytes(im, fmt))
        except (OSError, KeyError, ValueError):
            put(f"format_{fmt.lower()}.jpg", b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 1 1\n")
    # zero bytes, tiny and noise (28)
    for ext in ("jpg", "jpeg", "png", "gif", "webp", "bmp", "tif", "tiff"):
        put(f"empty.{ext}", b"")
        put(f"one_byte.{ext}", b"\xff")
        put(f"noise.{ext}", bytes(rng.randrange(256) for _ in range(rng.randrange(16, 4096))))
    for n, text in enumerate(("hello", "<html><body>404</body></html>", '<svg xmlns="http://www.w3.org/2000/svg"/>',
                              "\x00" * 100)):
        put(f"text_{n}.png", text.encode())
    # bombs and absurd headers (14)
    put("bomb_png_20k.png", _bomb_png(20_000, 20_000))
    put("bomb_png_wide.png", _bomb_png(100_000, 100))
    for n, (w, h) in enumerate(((0, 10), (10, 0), (2**31 - 1, 2**31 - 1), (65535, 65535), (1, 2**31 - 1))):
        put(f"header_png_{n}.png", _png_header(w, h))
    for n, (w, h) in enumerate(((50_000, 50_000), (-10, 10), (2**31 - 1, 1))):
        put(f"header_bmp_{n}.bmp", _bmp_header(w, h))
    for n, (w, h) in enumerate(((65535, 65535), (0, 0))):
        put(f"header_gif_{n}.gif", _gif_screen(w, h))
    put("huge_file.jpg", jpg + os.urandom(MAX_BYTES))
    # odd pixel encodings that are fine images (16)
    encs: list[tuple[str, bytes]] = [
        ("cmyk.jpg", _bytes(_img().convert("CMYK"), "JPEG")),
        ("gray.jpg", _bytes(_img().convert("L"), "JPEG")),
        ("png16.png", _bytes(Image.new("I;16", (20, 20), 40000), "PNG")),
        ("la.png", _bytes(_img().convert("LA"), "PNG")),
        ("rgba.png", _bytes(_img((20, 20), "RGBA", (10, 20, 30, 0)), "PNG")),
        ("palette_transparent.png", _bytes(_img().convert("P"), "PNG", transparency=0)),
        ("bilevel.bmp", _bytes(_img().convert("1"), "BMP")),
        ("tiff_jpeg.tif", _bytes(_img(), "TIFF", compression="jpeg")),
        ("tiff_float.tif", _bytes(Image.new("F", (8, 8), 1.5), "TIFF")),
        ("anim.gif", _bytes(_img().convert("P"), "GIF", save_all=True,
                            append_images=[_img((24, 16), "RGB", (i, i, i)).convert("P") for i in range(0, 250, 5)])),
        ("lossless.webp", _bytes(_img(), "WEBP", lossless=True)),
        ("anim.webp", _bytes(_img(), "WEBP", save_all=True, append_images=[_img(color=(1, 2, 3))])),
        ("one_pixel.png", _bytes(Image.new("RGB", (1, 1)), "PNG")),
        ("needle.png", _bytes(Image.new("L", (1, 20_000)), "PNG")),
        ("icc.jpg", _bytes(_img(), "JPEG", icc_profile=b"\x00" * 128)),
        ("progressive.jpg", _bytes(_img((64, 48)), "JPEG", progressive=True)),
    ]
    for name, data in encs:
        put(name, data)
    # garbage EXIF (14)
    for n in range(14):
        put(f"exif_{n}.jpg", _exif_jpeg(rng, n % 7))
    # odd names on good images (24)
    names: list[str | bytes] = [
        b"caf\xe9.jpg", b"\xff\xfe\xfd.png", b"half\xc3.jpg", b"tab\there.jpg", b"new\nline.jpg", b"cr\rhere.png",
        "emoji_\U0001f427_penguin.jpg", "rtl_\u202egpj.exe.jpg", "[bold]markup[not closed.jpg", "[red]x.png",
        "back\\slash.jpg", "-leading-dash.jpg", " space .jpg", "dot..jpg", "a" * 240 + ".jpg", "ünïcødé_名前.png",
        "zero\u200bwidth.jpg", "percent%s%n.jpg", "quote'\"`.jpg", "sémicolon;&|.png", "UPPER.JPG", "mixed.JpEg",
        "dots.in.name.v2.jpg", "nul_like_\u2400.jpg",
    ]
    for n, name in enumerate(names):
        put(name, _bytes(_img(color=(n * 9 % 256, 80, 120)), "PNG" if os.fsencode(name).endswith(b".png") else "JPEG"))
    # file system oddities (12)
    put("folder.jpg", lambda p: p.mkdir())
    put("folder2.png", lambda p: (p.mkdir(), (p / "inside.jpg").write_bytes(jpg)))
    made.append("folder2.png/inside.jpg")
    put("loop_a.jpg", lambda p: p.symlink_to(root / "loop_b.jpg"))
    put("loop_b.jpg", lambda p: p.symlink_to(root / "loop_a.jpg"))
    put("self.jpg", lambda p: p.symlink_to(p))
    put("dangling.jpg", lambda p: p.symlink_to(root / "nowhere.jpg"))
    put("to_devzero.jpg", lambda p: p.symlink_to("/dev/zero"))
    put("to_folder.jpg", lambda p: p.symlink_to(root / "folder.jpg"))
    put("good_link.jpg", lambda p: p.symlink_to(root / "progressive.jpg"))
    put("fifo.jpg", os.mkfifo)
    put("fifo2.png", os.mkfifo)
    (root / "dirloop").mkdir()
    (root / "dirloop" / "up").symlink_to(root, target_is_directory=True)  # never followed
    (root / "dirloop" / "x.jpg").write_bytes(jpg)
    made.append("dirloop/x.jpg")
    # ignored: hidden and non-image names (not counted)
    (root / ".hidden.jpg").write_bytes(b"x")
    (root / "notes.txt").write_text("ignored")
    return len(made), made


def _manifest_rows(root: Path) -> bytes:
    """A JSONL manifest with odd rows, as bytes (one line in Latin-1)."""
    lines = [
        json.dumps({"file": "progressive.jpg", "caption": "a lone \ud800 surrogate", "id": "m1"}),
        json.dumps({"file": "cmyk.jpg", "captions": ["x\udfff", None, 3], "tags": ["a\udc80", 5], "id": "m2"}),
        json.dumps({"file": "gray.jpg", "caption": {"nested": ["x"]}, "id": "m3"}),
        json.dumps({"file": "la.png", "taken_time": "not a date"}),
        json.dumps({"file": "rgba.png", "latitude": "NaN", "longitude": 1}),
        json.dumps({"file": "one_pixel.png", "latitude": 1e400, "longitude": 0}),
        json.dumps({"file": "icc.jpg", "id": ["list"]}),
        json.dumps({"file": "\ud800.jpg", "caption": "no file system holds this name"}),
        json.dumps({"file": "a\u0000b.jpg"}),
        json.dumps({"file": 42}),
        json.dumps({"path": "../../../../etc/passwd"}),
        json.dumps({"file": "m1_again.jpg", "id": "m1"}),
        json.dumps([1, 2, 3]),
        "{not json",
        json.dumps({"file": "lossless.webp", "id": "m4", "caption": "x" * 100_000}),
    ]
    body = "\n".join(lines).encode("utf-8") + b"\n" + b'{"file": "caf\xe9.jpg", "caption": "cr\xe8me"}\n'
    return body


def _check_accounted(report, g: Gallery, tried: int) -> tuple[int, int]:
    """Every input indexed or skipped with a printable reason; returns (indexed, skipped)."""
    for shown, reason in report.skipped:
        assert reason.strip(), shown
        shown.encode("utf-8") and reason.encode("utf-8")  # printable: no lone surrogates
        assert "\n" not in shown
    for rec in g.records():
        assert os.path.isfile(rec.path), display_path(rec.path)
    assert report.total == tried
    assert report.added + report.updated + report.unchanged + len(report.skipped) == tried
    return report.added + report.updated + report.unchanged, len(report.skipped)


def test_odd_folder_and_manifest_index_with_zero_crashes(tmp_path, capsys):
    root = tmp_path / "odd"
    tried, _made = make_odd_folder(root)
    assert tried >= 200
    tiny = TinyEmbedder()
    dual = CaptionDualEncoder(tiny)
    opts = IndexOptions(max_file_bytes=MAX_BYTES, max_pixels=MAX_PIXELS, batch_size=16)
    idx = tmp_path / "idx"
    crashed = 0  # the build raising is the only way to crash; pytest would show it here
    report = build_index(root, idx, IndexParts.of(dual, tiny), opts)
    g = Gallery(idx)
    indexed, skipped = _check_accounted(report, g, tried)
    assert indexed == len(g) and g.vectors(SPACE_CAPTION_TEXT).shape == (len(g), tiny.dim)
    assert indexed >= 60 and skipped >= 100  # the mix above: roughly a third usable
    again = build_index(root, idx, IndexParts.of(dual, tiny), opts)  # incremental: same verdicts, nothing re-read
    assert (again.added, again.updated) == (0, 0) and again.unchanged == indexed
    assert sorted(r for _, r in again.skipped) == sorted(r for _, r in report.skipped)

    manifest = root / "odd.jsonl"
    manifest.write_bytes(_manifest_rows(root))
    rows = 16
    m = build_index(manifest, tmp_path / "idx_m", IndexParts.of(dual, tiny), opts)
    gm = Gallery(tmp_path / "idx_m")
    m_indexed, m_skipped = _check_accounted(m, gm, rows)
    assert any("not valid UTF-8" in w for w in m.warnings)
    assert gm.record("m1").captions == ["a lone \ufffd surrogate"]

    with capsys.disabled():
        print(f"\nodd files: tried={tried} indexed={indexed} skipped={skipped} crashed={crashed}; "
              f"manifest rows: tried={rows} indexed={m_indexed} skipped={m_skipped} crashed=0")


@pytest.mark.real_model
def test_cli_report_of_the_odd_folder_prints(tmp_path):
    """The plain-text report (Rich tables with every odd name and reason) and --json render without error."""
    from typer.testing import CliRunner

    from imagent.cli.main import app

    root = tmp_path / "odd"
    tried, _ = make_odd_folder(root)
    runner = CliRunner()
    args = ["index", str(root), "--index", str(tmp_path / "idx"), "--set", f"indexing.max_file_bytes={MAX_BYTES}",
            "--set", f"indexing.max_pixels={MAX_PIXELS}"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "skipped" in out.stdout and "have no caption" in out.stdout
    js = runner.invoke(app, [*args, "--json"])
    assert js.exit_code == 0, js.output
    report = json.loads(js.stdout)
    assert report["unchanged"] + len(report["skipped"]) == tried
