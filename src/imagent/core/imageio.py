"""Safe image reading: refuse what is not a real, complete, reasonably sized image, and read EXIF.

Every function here treats the file as untrusted input:

- the path must be an existing regular file (not a directory, FIFO or broken symlink), non-empty
  and at most ``max_bytes`` long;
- PIL must identify it as one of :data:`ALLOWED_FORMATS` (the extension is ignored: a PNG named ``.jpg``
  is a PNG). ``Image.open`` is always called with ``formats=``, so no other parser ever sees the bytes:
  an EPS named ``.jpg`` never reaches Ghostscript, a PSD or an ICO never reaches its plugin;
- ``width * height`` is checked against ``max_pixels`` from the header, before any pixel is
  decoded (decompression bombs); PIL's own bomb error is refused the same way;
- the pixels must decode completely: truncated or corrupt files are refused (we never set
  ``ImageFile.LOAD_TRUNCATED_IMAGES``, which would hide them behind grey padding);
- the header must be one the data can back: a Huffman-coded JPEG spends at least one bit on every 8x8
  block, so a file whose declared size needs more blocks than its bytes can code (a 8 KB JPEG whose size
  field was rewritten to 9000x9000, which libjpeg would "decode" as 81 megapixels of padding) is refused
  before decoding; and an image whose decoded size differs from its header, or exceeds the pixel budget
  once decoded, is refused too;
- :func:`verify_image_bytes` (web uploads) also bounds the decode's memory: a JPEG is verified at a
  reduced scale (every byte of its entropy-coded data is still read), anything else only when its decoded
  pixels fit ``max_decode_bytes``; freed memory is handed back to the system afterwards;
- decoding takes about the decoded pixels' own memory, never a multiple (issue 47): a pass that needs a bounded
  size (:func:`open_image_scaled`) gets a JPEG decoded at a reduced DCT scale and any image reduced by a whole
  factor, with mode conversion, transparency and EXIF orientation done strip by strip; a large PNG is decoded a
  strip of rows at a time, so the probe and the reduced decodes never hold its whole picture
  (:mod:`imagent.core.strips`).

Failures raise :class:`ImageLoadError` (a ``ValueError``) with a short reason a report can show.
:func:`read_exif` never raises: wrong EXIF is common in the wild and only loses the metadata.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import math
import os
import re
import stat
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from PIL import Image

from imagent.core import strips

# HEIC/HEIF (phones' photos) when the optional pillow-heif is installed (the `heif` extra, in `offline`); its
# plugin is imported only when such a file is opened (importing it costs ~0.2 s, a cost every command would pay).
HEIF_INSTALLED = importlib.util.find_spec("pillow_heif") is not None
HEIF_EXTENSIONS = frozenset({".heic", ".heif", ".hif"})
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
                             | (HEIF_EXTENSIONS if HEIF_INSTALLED else frozenset()))


def _allowed_formats() -> tuple[str, ...]:
    """The PIL formats imagent decodes: the photo formats, plus HEIF/AVIF when a plugin registered them.

    (A camera JPEG that carries a second picture opens through the JPEG plugin as format "MPO".)"""
    base = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
    Image.init()  # registers the built-in plugins (and any pillow-heif opener imported before)
    return base + tuple(f for f in ("HEIF", "AVIF") if f in Image.OPEN)


ALLOWED_FORMATS: tuple[str, ...] = _allowed_formats()
_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")


def _looks_heif(head: bytes) -> bool:
    return head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS


def _ensure_heif() -> None:
    """Register pillow-heif's opener (once) and allow the HEIF format."""
    global ALLOWED_FORMATS
    if "HEIF" in ALLOWED_FORMATS or not HEIF_INSTALLED:
        return
    import pillow_heif

    pillow_heif.register_heif_opener()
    ALLOWED_FORMATS = _allowed_formats()

DEFAULT_MAX_PIXELS = 100_000_000
DEFAULT_MAX_BYTES = 200 * 1024 * 1024

# EXIF tag numbers (IFD0, the Exif sub-IFD and the GPS IFD).
_TAG_ORIENTATION = 0x0112
_TAG_DATETIME = 0x0132
_IFD_EXIF = 0x8769
_IFD_GPS = 0x8825
_TAG_DATETIME_ORIGINAL = 0x9003
_TAG_DATETIME_DIGITIZED = 0x9004
_GPS_LAT_REF, _GPS_LAT, _GPS_LON_REF, _GPS_LON, _GPS_STATUS = 1, 2, 3, 4, 9

# Photography starts in the 1820s; a year outside this window is a camera's placeholder, not a date.
_MIN_YEAR, _MAX_YEAR = 1826, 2200


# Process-wide, targeted filters instead of ``warnings.catch_warnings()`` around each call, which is
# not thread-safe (concurrent use can leave every warning silenced, or none):
# - PIL warns above ~89 M pixels; our own ``max_pixels`` decides (PIL's hard error above twice
#   its threshold still fires and is refused as a bomb);
# - corrupt EXIF only costs metadata, which :func:`read_exif` already reports as missing.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
warnings.filterwarnings("ignore", message=r"(?i).*corrupt exif", category=UserWarning)


class ImageLoadError(ValueError):
    """The file is not a usable image; ``str(exc)`` is the reason (shown in index reports)."""


@dataclass(frozen=True)
class ImageInfo:
    """Size after EXIF orientation (what a viewer shows) and PIL's format name."""

    width: int
    height: int
    format: str


@dataclass(frozen=True)
class FileProbe:
    """What indexing needs from one file, read from a single pass over its bytes."""

    info: ImageInfo
    content_hash: str
    size: int
    taken_time: datetime | None
    latitude: float | None
    longitude: float | None


def is_image_name(path: str | Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


# --------------------------------------------------------------------------- file checks


def check_file(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> os.stat_result:
    """stat ``path`` and refuse anything that is not a non-empty regular file within ``max_bytes``."""
    p = Path(path)
    try:
        st = os.stat(p)  # follows symlinks: a broken one raises FileNotFoundError
    except FileNotFoundError:
        if os.path.islink(p):
            raise ImageLoadError("broken symbolic link") from None
        raise ImageLoadError("file not found") from None
    except OSError as exc:
        raise ImageLoadError(f"cannot access file: {exc.strerror or exc}") from None
    except ValueError as exc:  # a name the OS cannot take: a NUL byte, a surrogate that maps to no byte
        raise ImageLoadError(f"unusable file name ({type(exc).__name__})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ImageLoadError("is a directory, not an image file")
    if not stat.S_ISREG(st.st_mode):
        # FIFOs and devices would block or never end when read.
        raise ImageLoadError("not a regular file")
    if st.st_size == 0:
        raise ImageLoadError("empty file (0 bytes)")
    if st.st_size > max_bytes:
        raise ImageLoadError(f"file too large ({st.st_size} bytes; limit {max_bytes})")
    return st


def _read_bytes(path: str | Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ImageLoadError(f"cannot read file: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- decoding


def _open_checked(fp: IO[bytes], max_pixels: int) -> Image.Image:
    """Open the header only and refuse formats outside the allow-list and too many pixels, before decoding."""
    if _looks_heif(fp.read(16)):
        _ensure_heif()
    fp.seek(0)
    try:
        im = Image.open(fp, formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as exc:
        raise _bomb(exc, max_pixels) from None
    except Image.UnidentifiedImageError:
        fp.seek(0)
        head = fp.read(32)
        kind = _sniff(head)
        if kind:
            # PIL swallows the plugin's error; the signature tells us it was meant to be an image.
            raise ImageLoadError(f"corrupt {kind} image (its header does not parse)") from None
        refused = _sniff_refused(head)
        if refused:
            raise ImageLoadError(f"{refused} is not an accepted image format ({', '.join(ALLOWED_FORMATS)})") \
                from None
        raise ImageLoadError("not an image (unrecognised format)") from None
    except Exception as exc:  # PIL raises many types for broken headers (SyntaxError, struct.error, ...)
        raise _broken(exc, "corrupt image header") from None
    w, h = im.size
    if w <= 0 or h <= 0:
        im.close()
        raise ImageLoadError(f"invalid image size {w}x{h}")
    if w * h > max_pixels:
        im.close()
        raise ImageLoadError(f"too many pixels ({w}x{h} = {w * h}; limit {max_pixels})")
    return im


_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


def _sniff(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    return next((kind for magic, kind in _SIGNATURES if head.startswith(magic)), None)


# Formats PIL (or its plugins) could parse but imagent refuses; named so the skip reason says what the file is.
_REFUSED_SIGNATURES = (
    (b"%!PS", "EPS/PostScript"),
    (b"\xc5\xd0\xd3\xc6", "EPS/PostScript"),
    (b"%PDF", "PDF"),
    (b"8BPS", "PSD"),
    (b"\x00\x00\x01\x00", "ICO"),
    (b"icns", "ICNS"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000"),
    (b"DDS ", "DDS"),
    (b"gimp xcf", "XCF"),
    (b"#define", "XBM"),
    (b"/* XPM */", "XPM"),
)


def _sniff_refused(head: bytes) -> str | None:
    stripped = head.lstrip()
    if stripped[:5].lower() in (b"<svg ", b"<?xml"):
        return "SVG/XML"
    return next((kind for magic, kind in _REFUSED_SIGNATURES if head.startswith(magic)), None)


def _bomb(exc: Exception, max_pixels: int | None) -> ImageLoadError:
    """PIL's DecompressionBombError (raised from the header, above twice PIL's own threshold)."""
    m = re.search(r"\((\d+) pixels\)", str(exc))
    count = m.group(1) if m else "too many"
    limit = f"; limit {max_pixels}" if max_pixels is not None else ""
    return ImageLoadError(f"too many pixels ({count}{limit}; refused as a possible decompression bomb)")


def _broken(exc: BaseException, what: str) -> ImageLoadError:
    """A decoder's error as a reason: truncation is told apart from other corruption."""
    if isinstance(exc, EOFError) or "truncated" in str(exc).lower():
        return ImageLoadError(f"truncated image ({_describe(exc)})")
    return ImageLoadError(f"{what} ({_describe(exc)})")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _decode(im: Image.Image, draft: bool = False) -> None:
    """Decode every pixel, refusing truncation and corruption.

    Only the first frame of an animation is decoded: it is what gets embedded and shown, and
    walking every frame of a hostile GIF could take unbounded time."""
    if draft and im.format == "JPEG":
        # DCT scaling decodes at 1/8 size but still reads the whole entropy-coded stream, so a
        # truncated file is still caught, at a fraction of the cost (probing only, no pixels kept).
        im.draft(im.mode, (max(1, im.width // 8), max(1, im.height // 8)))
    try:
        im.load()
    except Image.DecompressionBombError as exc:
        raise _bomb(exc, None) from None
    except MemoryError:
        raise ImageLoadError("image too large to decode in memory") from None
    except Exception as exc:
        raise _broken(exc, "corrupt image data") from None


# SOF markers of Huffman-coded JPEGs (baseline, extended, progressive, lossless; differential too): every 8x8
# block costs at least one bit of entropy-coded data. Arithmetic coding (0xC9-0xCF) can code less: not checked.
_HUFFMAN_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7})
_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD9)})  # TEM, RSTn, SOI, EOI: markers without a length field


def jpeg_blocks(data: bytes) -> int | None:
    """The 8x8 blocks a Huffman-coded JPEG's frame header declares (all components), or None when the
    header is not one (not a JPEG, arithmetic coding, no frame header before the first scan)."""
    if data[:2] != b"\xff\xd8":
        return None
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _NO_LENGTH:
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if marker == 0xDA or length < 2:  # start of scan before any frame header
            return None
        if marker in _HUFFMAN_SOF:
            seg = data[i + 4:i + 2 + length]
            if len(seg) < 6:
                return None
            height, width, count = int.from_bytes(seg[1:3], "big"), int.from_bytes(seg[3:5], "big"), seg[5]
            comps = [(seg[6 + 3 * c + 1] >> 4, seg[6 + 3 * c + 1] & 0x0F) for c in range(count)
                     if 6 + 3 * c + 2 < len(seg)]
            if not comps or width == 0 or height == 0:
                return None
            hmax, vmax = max(h for h, _ in comps) or 1, max(v for _, v in comps) or 1
            return sum(math.ceil(math.ceil(width * h / hmax) / 8) * math.ceil(math.ceil(height * v / vmax) / 8)
                       for h, v in comps)
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # an arithmetic-coded frame
            return None
        i += 2 + length
    return None


def _check_backed(data: bytes, im: Image.Image) -> None:
    """Refuse a JPEG whose header declares more blocks than its bytes can code (a rewritten size field)."""
    if im.format not in ("JPEG", "MPO"):
        return
    blocks = jpeg_blocks(data)
    if blocks is not None and len(data) * 8 < blocks:
        w, h = im.size
        raise ImageLoadError(f"its header says {w}x{h}, but its {len(data):,} bytes cannot hold that many pixels "
                             f"(a JPEG needs at least {math.ceil(blocks / 8):,}); the size field was likely "
                             "rewritten")


def _check_decoded(im: Image.Image, size: tuple[int, int], max_pixels: int) -> None:
    """After a full decode: the pixels are the size the header said, and within the budget."""
    w, h = im.size
    if (w, h) != size:
        raise ImageLoadError(f"decoded size {w}x{h} differs from its header's {size[0]}x{size[1]}")
    if w * h > max_pixels:
        raise ImageLoadError(f"too many pixels once decoded ({w}x{h} = {w * h}; limit {max_pixels})")


def release_memory() -> None:
    """Hand memory freed by a large decode back to the system (glibc keeps freed heap pages otherwise, and
    a server that verified a few big uploads would stay gigabytes larger). A no-op elsewhere."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


def verify_image_bytes(data: bytes, max_pixels: int, max_decode_bytes: int) -> ImageInfo:
    """Check that ``data`` is a complete image within ``max_pixels``, decoding it with at most about
    ``max_decode_bytes`` of pixels in memory; keeps nothing. Raises :class:`ImageLoadError`."""
    if not data:
        raise ImageLoadError("empty file (0 bytes)")
    try:
        _verify(data, max_pixels)
        with _open_checked(io.BytesIO(data), max_pixels) as im:
            _check_backed(data, im)
            size = im.size
            if im.format in ("JPEG", "MPO"):
                # DCT scaling: the whole entropy-coded stream is read, 1/64 of the pixels kept.
                im.draft(im.mode, (max(1, size[0] // 8), max(1, size[1] // 8)))
            bands = len(im.getbands())
            cost = im.size[0] * im.size[1] * max(bands, 1) * (2 if im.mode in ("I;16", "I", "F") else 1)
            if cost > max_decode_bytes:
                raise ImageLoadError(f"decoding it would take {cost / 2**20:.0f} MB, more than the "
                                     f"{max_decode_bytes / 2**20:.0f} MB this server allows an upload")
            draft = im.size != size
            _decode(im)
            if not draft:
                _check_decoded(im, size, max_pixels)
            w, h = _oriented_size(im, size)
            return ImageInfo(w, h, str(im.format or "unknown"))
    finally:
        release_memory()


def _verify(data: bytes, max_pixels: int) -> None:
    """PIL's structural check (chunk CRCs for PNG), which a plain decode does not always do."""
    im = _open_checked(io.BytesIO(data), max_pixels)
    try:
        im.verify()
    except Exception as exc:
        raise _broken(exc, "corrupt image") from None
    finally:
        im.close()


def _oriented_size(im: Image.Image, size: tuple[int, int]) -> tuple[int, int]:
    w, h = size
    return (h, w) if strips.orientation(im) in (5, 6, 7, 8) else (w, h)


def _png_strips(data: bytes, im: Image.Image, factor: int) -> Iterator[Image.Image] | None:
    """``im``'s strips decoded one at a time when it is a PNG large enough for it to matter and of a layout
    :mod:`imagent.core.strips` covers; else None (decode it whole)."""
    if im.format != "PNG" or im.width * im.height <= strips.WHOLE_PIXELS:
        return None
    return strips.png_strips(data, im, strips.strip_rows(im.width, factor))


def open_image(
    path: str | Path, max_pixels: int = DEFAULT_MAX_PIXELS, max_bytes: int = DEFAULT_MAX_BYTES
) -> Image.Image:
    """The image at ``path`` as a fully decoded RGB image, EXIF orientation applied.

    Raises :class:`ImageLoadError` for anything that is not a complete image within the limits."""
    check_file(path, max_bytes)
    data = _read_bytes(path)
    return image_from_bytes(data, max_pixels)


def open_image_scaled(path: str | Path, min_side: int, max_pixels: int = DEFAULT_MAX_PIXELS,
                      max_bytes: int = DEFAULT_MAX_BYTES, long_side: bool = False) -> Image.Image:
    """:func:`open_image` for a pass that needs only ``min_side`` pixels a side (``long_side``: on the long side),
    reduced while decoding: a JPEG at the smallest DCT scale (1/2, 1/4, 1/8) that keeps them (PIL's draft mode:
    the whole stream is still read, so truncation is still caught), then any image by the largest whole factor
    that keeps them, strip by strip before any mode conversion; a large PNG, which cannot be decoded smaller, a
    strip of rows at a time (:mod:`imagent.core.strips`). The decode's memory stays about its result's (issue 47:
    a 100-MP PNG took four times its pixels). ``image.info["source_size"]`` is the photo's own size (EXIF orientation
    applied). The same refusals as :func:`open_image` (corrupt, truncated, too many pixels, too many bytes)."""
    check_file(path, max_bytes)
    return image_from_bytes(_read_bytes(path), max_pixels, min_side, long_side)


def image_from_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS, min_side: int | None = None,
                     long_side: bool = False) -> Image.Image:
    """:func:`open_image` for bytes already in memory (size limits are the caller's); with ``min_side``, reduced
    as :func:`open_image_scaled` does."""
    if not data:
        raise ImageLoadError("empty file (0 bytes)")
    _verify(data, max_pixels)
    with _open_checked(io.BytesIO(data), max_pixels) as im:
        _check_backed(data, im)
        size = im.size
        if min_side is not None and im.format in ("JPEG", "MPO"):
            need = max(1, min_side * min(size) // max(size)) if long_side else min_side
            im.draft("RGB", (min_side, need) if size[0] >= size[1] else (need, min_side))
        factor = 1
        if min_side is not None:
            factor = max(1, (max(im.size) if long_side else min(im.size)) // max(1, min_side))
        rows = _png_strips(data, im, factor)
        if rows is None:
            scaled = im.size != size
            _decode(im)
            if not scaled:
                _check_decoded(im, size, max_pixels)
        try:
            out = strips.to_rgb(im, factor, rows)
        except ValueError as exc:  # a strip's data was truncated or corrupt
            raise ImageLoadError(str(exc)) from None
        w, h = _oriented_size(im, size)
        out.info["source_size"] = (w, h)
        return out


def _probe_bytes(data: bytes, max_pixels: int) -> tuple[ImageInfo, Image.Image]:
    _verify(data, max_pixels)
    im = _open_checked(io.BytesIO(data), max_pixels)
    size = im.size  # before decoding: a JPEG draft decode shrinks ``im.size``
    try:
        _check_backed(data, im)
        rows = _png_strips(data, im, 1)
        if rows is not None:  # every row decoded, a strip at a time, none kept
            try:
                for _ in rows:
                    pass
            except ValueError as exc:
                raise ImageLoadError(str(exc)) from None
        else:
            _decode(im, draft=True)
            if im.format not in ("JPEG", "MPO"):
                _check_decoded(im, size, max_pixels)
    except ImageLoadError:
        im.close()
        raise
    w, h = _oriented_size(im, size)
    return ImageInfo(w, h, str(im.format or "unknown")), im


def probe_image(
    path: str | Path, max_pixels: int = DEFAULT_MAX_PIXELS, max_bytes: int = DEFAULT_MAX_BYTES
) -> ImageInfo:
    """Check that ``path`` is a complete image within the limits, without keeping its pixels."""
    check_file(path, max_bytes)
    info, im = _probe_bytes(_read_bytes(path), max_pixels)
    im.close()
    return info


def probe_file(
    path: str | Path, max_pixels: int = DEFAULT_MAX_PIXELS, max_bytes: int = DEFAULT_MAX_BYTES
) -> FileProbe:
    """One read of the file: verify it (as :func:`probe_image`), hash its bytes, read its EXIF.

    Hash and checks come from the same bytes, so a file rewritten meanwhile cannot pair one
    version's hash with another's validity."""
    st = check_file(path, max_bytes)
    data = _read_bytes(path)
    if len(data) > max_bytes:  # grew between stat and read
        raise ImageLoadError(f"file too large ({len(data)} bytes; limit {max_bytes})")
    info, im = _probe_bytes(data, max_pixels)
    try:
        taken, lat, lon = read_exif(im)
    finally:
        im.close()
    return FileProbe(info, hashlib.sha256(data).hexdigest(), st.st_size, taken, lat, lon)


# --------------------------------------------------------------------------- EXIF


def read_exif(img_or_path: Image.Image | str | Path) -> tuple[datetime | None, float | None, float | None]:
    """``(taken_time, latitude, longitude)`` from EXIF; ``None`` for anything missing or implausible.

    Time: DateTimeOriginal, else DateTimeDigitized, else DateTime (camera local time, naive).
    Position: the GPS IFD's degree/minute/second rationals with their N/S/E/W references.
    Never raises."""
    try:
        if isinstance(img_or_path, Image.Image):
            return _exif_of(img_or_path)
        check_file(img_or_path)
        with _open_checked(io.BytesIO(_read_bytes(img_or_path)), DEFAULT_MAX_PIXELS) as im:
            return _exif_of(im)
    except Exception:
        return None, None, None


def _exif_of(im: Image.Image) -> tuple[datetime | None, float | None, float | None]:
    try:
        exif = im.getexif()
    except Exception:
        return None, None, None
    return (_taken_time(exif), *_gps(exif))


def _sub_ifd(exif: Image.Exif, tag: int) -> dict[int, Any]:
    try:
        return dict(exif.get_ifd(tag))
    except Exception:
        return {}


def _taken_time(exif: Image.Exif) -> datetime | None:
    sub = _sub_ifd(exif, _IFD_EXIF)
    for value in (sub.get(_TAG_DATETIME_ORIGINAL), sub.get(_TAG_DATETIME_DIGITIZED), _safe_get(exif, _TAG_DATETIME)):
        parsed = parse_exif_datetime(value)
        if parsed is not None:
            return parsed
    return None


def _safe_get(exif: Image.Exif, tag: int) -> Any:
    try:
        return exif.get(tag)
    except Exception:
        return None


_EXIF_DT = re.compile(
    r"^\s*(\d{4})[:\-/.](\d{1,2})[:\-/.](\d{1,2})(?:[ T]+(\d{1,2}):(\d{1,2})(?::(\d{1,2}))?)?"
)


def parse_exif_datetime(value: Any) -> datetime | None:
    """``"YYYY:MM:DD HH:MM:SS"`` (and close variants) -> naive datetime; placeholders -> None."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    m = _EXIF_DT.match(value.replace("\x00", " "))
    if not m:
        return None
    year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
    hour, minute, second = (int(m.group(i)) if m.group(i) else 0 for i in (4, 5, 6))
    if not _MIN_YEAR <= year <= _MAX_YEAR:
        return None
    try:
        return datetime(year, month, day, hour, minute, second)
    except ValueError:  # month 13, day 0, hour 25, ...
        return None


def _number(value: Any) -> float | None:
    try:
        if isinstance(value, tuple) and len(value) == 2:  # (numerator, denominator) as some writers store it
            num, den = float(value[0]), float(value[1])
            if den == 0:
                return None
            x = num / den
        else:
            x = float(value)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _dms(value: Any, limit: float) -> float | None:
    """Degrees/minutes/seconds (1 to 3 rationals) -> non-negative decimal degrees, or None."""
    parts = list(value) if isinstance(value, (tuple, list)) else [value]
    if not 1 <= len(parts) <= 3:
        return None
    nums = [_number(p) for p in parts]
    if any(n is None or n < 0 for n in nums):
        return None
    deg = nums[0]
    minutes = nums[1] if len(nums) > 1 else 0.0
    seconds = nums[2] if len(nums) > 2 else 0.0
    assert deg is not None and minutes is not None and seconds is not None
    if minutes >= 60 or seconds >= 60:
        return None
    out = deg + minutes / 60.0 + seconds / 3600.0
    return out if out <= limit else None


def _ref(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return str(value or "").strip("\x00 ").upper()[:1]


def _gps(exif: Image.Exif) -> tuple[float | None, float | None]:
    gps = _sub_ifd(exif, _IFD_GPS)
    if not gps:
        return None, None
    if _ref(gps.get(_GPS_STATUS)) == "V":  # "void": the receiver had no fix
        return None, None
    lat = _dms(gps.get(_GPS_LAT), 90.0)
    lon = _dms(gps.get(_GPS_LON), 180.0)
    lat_ref, lon_ref = _ref(gps.get(_GPS_LAT_REF)), _ref(gps.get(_GPS_LON_REF))
    # Without a valid reference the hemisphere is unknown; a wrong sign is worse than no position.
    if lat is None or lon is None or lat_ref not in ("N", "S") or lon_ref not in ("E", "W"):
        return None, None
    if lat == 0.0 and lon == 0.0:
        # (0, 0) is what many devices write when they have no fix ("null island"), not a place.
        return None, None
    return (-lat if lat_ref == "S" else lat), (-lon if lon_ref == "W" else lon)
