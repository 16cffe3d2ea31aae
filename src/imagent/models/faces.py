"""Faces in a photo, offline: dlib's detectors, its 5-point landmarks and its ResNet face descriptor.

The models come from PyPI (the ``offline`` extra): ``dlib-bin`` (prebuilt dlib, Boost Software License 1.0)
and ``face-recognition-models`` 0.3.0 (Davis King's model files from github.com/davisking/dlib-models,
released by him into the public domain; the package's LICENSE file is CC0 1.0). Used here:

- detection: dlib's HOG frontal face detector (inside dlib; the default), or the CNN detector
  ``mmod_human_face_detector.dat`` (``faces.detector = "cnn"``: finds more turned and small faces, several
  times slower on a CPU);
- alignment: ``shape_predictor_5_face_landmarks.dat`` (eye corners and nose; trained on dlib's own 5-point
  dataset, CC0). The package's 68-point model is never loaded: its training data (iBUG 300-W) excludes
  commercial use;
- description: ``dlib_face_recognition_resnet_model_v1.dat``, a 128-d descriptor trained so that two faces of
  one person lie within 0.6 of each other (Euclidean distance; 99.38% on LFW).

That package's ``__init__`` imports ``pkg_resources``, which recent setuptools no longer ships, so the files
are located with :func:`importlib.util.find_spec` (which does not run the ``__init__``) and checked by size and
sha256 before dlib reads them.

:func:`scan_file` is what the index runs per photo: decode within the pixel budget
(:func:`imagent.core.imageio.open_image`, EXIF orientation applied), scale it so that its long side is ``side``
pixels (down; a smaller photo up, at most twice, as one dlib upsampling step would: faces are looked for at one
scale, so the smallest face found is the same share of every photo, HOG's 80-pixel window is 4% of 2048 px),
detect, drop faces narrower than ``min_size`` pixels, keep the ``max_per_photo`` largest, describe each. Boxes are
fractions of the upright photo (0..1), so a crop can be cut from the photo at any size. A photo that cannot be
read, or is too small to hold a face, gives a result with a note instead of raising.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.config import FaceOptions
from imagent.core.imageio import ImageLoadError, open_image_scaled

DESCRIPTOR_DIM = 128
MAX_UPSCALE = 2.0  # a small photo is enlarged at most this much before detection
# The distance under which dlib's ResNet descriptor puts two faces of one person (dlib's own threshold).
DLIB_MATCH_THRESHOLD = 0.6

# (file, size in bytes, sha256) of the model files read from face-recognition-models 0.3.0.
MODEL_FILES: dict[str, tuple[str, int, str]] = {
    "landmarks": ("shape_predictor_5_face_landmarks.dat", 9_150_489,
                  "c4b1e9804792707d3a405c2c16a80a20269e6675021f64a41d30fffafbc41888"),
    "descriptor": ("dlib_face_recognition_resnet_model_v1.dat", 22_466_066,
                   "55533b28a95800a551ba546ba62fe69625c7e95a7061c338adffead08719da30"),
    "cnn": ("mmod_human_face_detector.dat", 729_940,
            "4cb19393e2fbaf2b1609a9319ad5386618c886a6234ec1b971f3e87c85d87fe6"),
}
INSTALL_HINT = 'pip install "imagent[offline]" (or: pip install dlib-bin face-recognition-models==0.3.0)'


class FaceModelError(ValueError):
    """The face models cannot be used (a package missing, a model file missing or damaged). A ValueError, so every
    interface reports it as a user error with its message."""


def face_model_id(options: FaceOptions) -> str:
    """What the faces of a photo were found with (stored with each scan; a change scans the photos again)."""
    check = (f"/nose{options.nose_drop_min:g}-{options.nose_drop_max:g}" if options.landmark_check else "")
    return (f"dlib:{options.detector}/up{options.upsample}/side{options.side}/min{options.min_size}"
            f"/score{options.min_score:g}{check}+shape_predictor_5+resnet_v1")


@dataclass
class FoundFace:
    box: tuple[float, float, float, float]  # left, top, right, bottom as fractions of the upright photo
    score: float  # the detector's confidence (HOG: SVM margin; CNN: its detection score)
    descriptor: np.ndarray  # float32 (128,)
    size: int  # the box's shorter side in pixels of the scaled photo


@dataclass
class FileFaces:
    """The faces of one photo file, or why there are none (``note``; ``error``: it could not be read)."""

    faces: list[FoundFace] = field(default_factory=list)
    width: int = 0  # of the upright photo
    height: int = 0
    found: int = 0  # faces the detector found, before the size filter and the cap
    note: str = ""
    error: bool = False


def model_dir() -> Path:
    """The folder holding face-recognition-models' files (its ``__init__`` is not imported)."""
    try:
        spec = importlib.util.find_spec("face_recognition_models")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise FaceModelError(f"the face models are not installed (package face-recognition-models); {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "models"


_CHECKED: dict[str, Path] = {}
_CHECK_LOCK = threading.Lock()


def model_file(kind: str) -> Path:
    """The checked path of a model file (``landmarks``, ``descriptor`` or ``cnn``): present, of the expected
    size and sha256 (hashed once per process)."""
    name, size, sha = MODEL_FILES[kind]
    with _CHECK_LOCK:
        if kind in _CHECKED:
            return _CHECKED[kind]
        path = model_dir() / name
        if not path.is_file():
            raise FaceModelError(f"face model file missing: {path}; reinstall face-recognition-models==0.3.0")
        if path.stat().st_size != size:
            raise FaceModelError(f"face model file {path} has {path.stat().st_size} bytes, expected {size}; "
                                 "reinstall face-recognition-models==0.3.0")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != sha:
            raise FaceModelError(f"face model file {path} is damaged (sha256 {digest.hexdigest()[:12]}..., expected "
                                 f"{sha[:12]}...); reinstall face-recognition-models==0.3.0")
        _CHECKED[kind] = path
        return path


def import_dlib() -> Any:
    try:
        import dlib
    except ImportError as exc:
        raise FaceModelError(f"dlib is not installed ({exc}); {INSTALL_HINT}") from None
    return dlib


def available() -> str:
    """"" when the face models can be used, else why not (packages missing, a file damaged)."""
    try:
        import_dlib()
        for kind in ("landmarks", "descriptor"):
            model_file(kind)
    except FaceModelError as exc:
        return str(exc)
    return ""


class FaceModel:
    """A detector, the 5-point shape predictor and the ResNet descriptor, loaded once (about 0.3 s).

    dlib holds the GIL while it works, so one model serves one thread at a time (a lock guards it); parallel
    scans run in worker processes (:mod:`imagent.index.faces`)."""

    def __init__(self, options: FaceOptions | None = None, max_pixels: int = 100_000_000,
                 max_file_bytes: int = 200 * 1024 * 1024) -> None:
        self.options = options or FaceOptions()
        self.max_pixels = max_pixels
        self.max_file_bytes = max_file_bytes
        if self.options.detector not in ("hog", "cnn"):
            raise FaceModelError(f"unknown face detector {self.options.detector!r}; use hog or cnn")
        dlib = import_dlib()
        self._dlib = dlib
        if self.options.detector == "cnn":
            self._cnn = dlib.cnn_face_detection_model_v1(str(model_file("cnn")))
            self._hog = None
        else:
            self._hog = dlib.get_frontal_face_detector()
            self._cnn = None
        self._shape = dlib.shape_predictor(str(model_file("landmarks")))
        self._describe = dlib.face_recognition_model_v1(str(model_file("descriptor")))
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return face_model_id(self.options)

    def detect(self, rgb: np.ndarray) -> list[tuple[Any, float]]:
        """``(dlib rectangle, score)`` of every face in an RGB uint8 array, in the array's pixels."""
        if self._cnn is not None:
            found = self._cnn(rgb, self.options.upsample)
            return [(d.rect, float(d.confidence)) for d in found if d.confidence >= self.options.min_score]
        rects, scores, _ = self._hog.run(rgb, self.options.upsample, self.options.min_score)
        return [(r, float(s)) for r, s in zip(rects, scores, strict=True)]

    def faces(self, rgb: np.ndarray) -> tuple[list[FoundFace], int, str]:
        """The faces of an RGB uint8 array: ``(faces, found before filtering, note)``."""
        p = self.options
        h, w = rgb.shape[:2]
        with self._lock:
            dets = self.detect(rgb)
            found = len(dets)
            clipped = []
            for rect, score in dets:
                left, top = max(0, rect.left()), max(0, rect.top())
                right, bottom = min(w, rect.right()), min(h, rect.bottom())
                size = min(right - left, bottom - top)
                if size >= p.min_size:
                    clipped.append((rect, score, (left, top, right, bottom), size))
            small = found - len(clipped)
            clipped.sort(key=lambda c: -c[3])  # the largest faces first: the cap keeps them
            notes = []
            if small:
                notes.append(f"{small} face(s) smaller than {p.min_size} px left out (faces.min_size)")
            if len(clipped) > p.max_per_photo:
                notes.append(f"{len(clipped)} faces found; the {p.max_per_photo} largest kept "
                             "(faces.max_per_photo)")
                clipped = clipped[: p.max_per_photo]
            out = []
            odd = 0
            for rect, score, (left, top, right, bottom), size in clipped:
                shape = self._shape(rgb, rect)
                if p.landmark_check and not landmarks_plausible(shape, p.nose_drop_min, p.nose_drop_max):
                    odd += 1
                    continue
                vec = np.asarray(self._describe.compute_face_descriptor(rgb, shape, 0), dtype=np.float32)
                out.append(FoundFace((left / w, top / h, right / w, bottom / h), score, vec, int(size)))
            if odd:
                notes.append(f"{odd} detection(s) whose landmarks do not sit as a face's left out "
                             "(faces.landmark_check)")
        return out, found, "; ".join(notes)

    def scan_file(self, path: str) -> FileFaces:
        """The faces of the photo at ``path`` (see the module doc); never raises for a bad file."""
        p = self.options
        try:
            # Decoded no larger than the scan needs (its long side at least ``side``): a 100-MP photo is not held
            # whole as RGB (issue 47); its own size is the record's.
            with open_image_scaled(path, p.side, self.max_pixels, self.max_file_bytes, long_side=True) as im:
                width, height = im.info["source_size"]
                if min(width, height) < p.min_size:
                    return FileFaces(width=width, height=height,
                                     note=f"too small to hold a face ({width}x{height} px; faces need at least "
                                          f"{p.min_size} px, faces.min_size)")
                scale = min(p.side / max(width, height), MAX_UPSCALE)
                if abs(scale - 1.0) > 0.01:
                    im = im.resize((max(1, round(width * scale)), max(1, round(height * scale))),
                                   resample=_lanczos(), reducing_gap=3.0 if scale < 1 else None)
                rgb = np.asarray(im, dtype=np.uint8)
        except ImageLoadError as exc:
            return FileFaces(note=f"cannot read the photo: {exc}", error=True)
        except OSError as exc:
            return FileFaces(note=f"cannot read the photo: {exc.strerror or exc}", error=True)
        try:
            faces, found, note = self.faces(np.ascontiguousarray(rgb))
        except (RuntimeError, ValueError, MemoryError) as exc:  # dlib's own errors cost this photo, not the index
            return FileFaces(width=width, height=height, note=f"face detection failed: {exc}", error=True)
        return FileFaces(faces, width, height, found, note)


def nose_drop(points: list[tuple[float, float]]) -> float:
    """The 5-point landmarks' nose drop: how far the nose (point 4) sits from the line through the two eyes' centres
    (points 0-1 and 2-3), in eye distances, whichever way the face is turned in the picture (a face's is about
    0.55-0.85; the shape predictor fits a face's shape to anything, and on cartoons, fruit and patches it sits
    flatter or longer)."""
    a = np.mean(np.asarray(points[0:2], dtype=np.float64), axis=0)
    b = np.mean(np.asarray(points[2:4], dtype=np.float64), axis=0)
    d = float(np.linalg.norm(b - a))
    if d < 1e-6:
        return 0.0
    eye = (b - a) / d
    normal = np.array([-eye[1], eye[0]])
    return abs(float(np.dot(np.asarray(points[4], dtype=np.float64) - (a + b) / 2, normal))) / d


def landmarks_plausible(shape: Any, low: float, high: float) -> bool:
    """Whether a dlib 5-point ``shape`` sits as a face's does: its :func:`nose_drop` within ``low``..``high``."""
    drop = nose_drop([(shape.part(i).x, shape.part(i).y) for i in range(5)])
    return low <= drop <= high


def _lanczos() -> Any:
    from PIL import Image

    return Image.Resampling.LANCZOS


# --------------------------------------------------------------------------- worker processes

_WORKER_MODEL: FaceModel | None = None


def worker_init(load: Callable[[], FaceModel]) -> None:
    """Initializer of a scanning worker process: its own model, made by ``load`` (a picklable factory)."""
    global _WORKER_MODEL
    _WORKER_MODEL = load()


def worker_scan(path: str) -> FileFaces:
    """:meth:`FaceModel.scan_file` in a worker process started with :func:`worker_init`."""
    assert _WORKER_MODEL is not None, "worker_init was not run"
    return _WORKER_MODEL.scan_file(path)


def face_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances between descriptor rows ``a`` (n, 128) and ``b`` (m, 128): (n, m)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    sq = a @ b.T  # one (n, m) matrix, worked on in place (grouping calls this once per batch of grouped faces)
    sq *= -2.0
    sq += (a * a).sum(1)[:, None]
    sq += (b * b).sum(1)[None, :]
    np.maximum(sq, 0.0, out=sq)
    return np.sqrt(sq, out=sq)


def chinese_whispers(descriptors: np.ndarray, threshold: float) -> list[int]:
    """dlib's chinese-whispers clustering of descriptor rows: faces closer than ``threshold`` are linked and
    the graph's communities are the groups. Returns one label per row (0, 1, ...)."""
    if len(descriptors) == 0:
        return []
    if len(descriptors) == 1:
        return [0]
    dlib = import_dlib()
    vecs = [dlib.vector(np.asarray(d, dtype=np.float64).tolist()) for d in descriptors]
    return [int(x) for x in dlib.chinese_whispers_clustering(vecs, float(threshold))]


__all__ = ["DESCRIPTOR_DIM", "DLIB_MATCH_THRESHOLD", "FaceModel", "FaceModelError", "FileFaces",
           "FoundFace", "available", "chinese_whispers", "face_distance", "face_model_id",
           "model_file"]
