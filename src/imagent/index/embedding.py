"""Compute a batch of records' vectors in every space the encoders allow, and store them.

The indexing command (:mod:`imagent.index.builder`) and tests that build a gallery from records
both go through :func:`add_records`, so there is one way vectors get into an index.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from imagent.core.cache import stable_key
from imagent.core.types import ImageRecord
from imagent.index.gallery import (
    SPACE_CAPTION_DUAL,
    SPACE_CAPTION_TEXT,
    SPACE_IMAGE,
    Gallery,
    encoder_space,
    split_space,
)
from imagent.models.base import DualEncoder, TextEmbedder
from imagent.models.encoders import caption_text


class LazyEncoder:
    """An encoder that is loaded on first use, with its model id known before that (from the config).

    An incremental ``imagent index`` that finds nothing new compares model ids only, so it never pays the
    seconds a model load costs. ``model_id`` is the configured prediction until the model is loaded, then
    the model's own (a wrong prediction is still caught when vectors are written)."""

    def __init__(self, load: Callable[[], Any], model_id: str | None = None, sees_pixels: bool | None = None) -> None:
        self._load = load
        self._model_id = model_id
        self._sees_pixels = sees_pixels
        self._encoder: Any = None

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def get(self) -> Any:
        if self._encoder is None:
            self._encoder = self._load()
        return self._encoder

    @property
    def model_id(self) -> str:
        if self._encoder is None and self._model_id is not None:
            return self._model_id
        return str(self.get().model_id)

    @property
    def dim(self) -> int:
        return int(self.get().dim)

    @property
    def sees_pixels(self) -> bool:
        if self._encoder is None and self._sees_pixels is not None:
            return self._sees_pixels
        return bool(getattr(self.get(), "sees_pixels", True))

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self.get().encode_texts(texts)

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        return self.get().encode_images(records)


def encoder_model_id(encoder: Any) -> str:
    return str(encoder.model_id)


def encoder_dim(encoder: Any) -> int | None:
    """The encoder's dim, or None for a :class:`LazyEncoder` not loaded yet (asking would load it)."""
    if isinstance(encoder, LazyEncoder) and not encoder.loaded:
        return None
    return int(encoder.dim)


def embedding_text(record: ImageRecord) -> str:
    """What the caption spaces embed: the captions, else the text derived from names, date and place."""
    return caption_text(record) or record.derived_text.strip()


@dataclass
class PendingRecord:
    record: ImageRecord
    source_key: str
    fingerprint: str


@dataclass(frozen=True)
class ExtraEncoder:
    """An extra retriever (config ``[encoders.<name>]``) and its spaces: a dual encoder fills ``image@<name>``
    and ``caption_dual@<name>``, a text embedder ``caption_text@<name>``. ``encoder`` may be a
    :class:`LazyEncoder` (loaded only when something must be embedded or a query encoded)."""

    name: str
    kind: Literal["dual", "text"]
    encoder: Any

    @property
    def spaces(self) -> list[str]:
        if self.kind == "dual":
            return [encoder_space(SPACE_IMAGE, self.name), encoder_space(SPACE_CAPTION_DUAL, self.name)]
        return [encoder_space(SPACE_CAPTION_TEXT, self.name)]


def space_encoders(dual: Any, text: Any, extras: Sequence[ExtraEncoder] = ()) -> dict[str, Any]:
    """space -> the encoder that fills it, for every space these encoders provide (main ones first).
    Names only: nothing is loaded."""
    out: dict[str, Any] = {}
    if dual is not None:
        out[SPACE_IMAGE] = out[SPACE_CAPTION_DUAL] = dual
    if text is not None:
        out[SPACE_CAPTION_TEXT] = text
    for extra in extras:
        for space in extra.spaces:
            out[space] = extra.encoder
    return out


def space_models(dual: DualEncoder | None, text: TextEmbedder | None, extras: Sequence[ExtraEncoder] = (),
                 spaces: Collection[str] | None = None) -> dict[str, tuple[str, int]]:
    """space -> (model id, dim) for the spaces these encoders can fill (only ``spaces``, when given)."""
    return {space: (enc.model_id, enc.dim) for space, enc in space_encoders(dual, text, extras).items()
            if spaces is None or space in spaces}


def uses_pixel_model(encoder: Any, pixels: Any) -> bool:
    """Whether ``encoder`` is a pixel dual encoder (``effnet-lite0`` ...) over the pixel stage's own classifier (then
    its image vectors come from the stage's pass: one forward pass per photo)."""
    if pixels is None or encoder is None:
        return False
    if isinstance(encoder, LazyEncoder):
        from imagent.models.pixels import is_pixel_backend

        if not is_pixel_backend(encoder.model_id.split("+", 1)[0]):
            return False
        encoder = encoder.get()
    return getattr(encoder, "pixel_model", None) is not None and encoder.pixel_model is pixels.model


def _unwrap(encoder: Any) -> Any:
    return encoder.get() if isinstance(encoder, LazyEncoder) else encoder


def embed_records(
    records: Sequence[ImageRecord], dual: DualEncoder | None, text: TextEmbedder | None,
    caption_spaces_only: bool = False, extras: Sequence[ExtraEncoder] = (), spaces: Collection[str] | None = None,
    pixels: Any = None,
) -> dict[str, np.ndarray]:
    """space -> (n, dim) float32. A record without a caption is embedded by its derived text (file and folder
    words, date, place); one with neither gets zero caption vectors (cosine 0).

    Identical computations are shared: in caption mode with the same text model, the image,
    caption_dual and caption_text spaces are one encoding (so are the spaces of extra encoders with the same
    model). ``caption_spaces_only`` leaves out the image space of an encoder that sees pixels (new captions do
    not change it); ``spaces`` (when given) limits the work to those spaces (ones added to an index later).

    ``pixels`` (a :class:`~imagent.index.pixels.PixelStage`): the pixel model runs over the records (their labels
    set in place, space ``visual`` filled) unless only caption spaces are asked for, and caption mode's image space
    takes the ConSE vector of each captionless photo with labels (:mod:`imagent.index.pixels`)."""
    from imagent.index.pixels import SPACE_VISUAL

    captions = [embedding_text(r) for r in records]
    has_caption = np.array([bool(c) for c in captions])
    out: dict[str, np.ndarray] = {}
    done: dict[str, np.ndarray] = {}  # "model_id|what" -> vectors
    seen = None
    if pixels is not None and not caption_spaces_only and (spaces is None or SPACE_VISUAL in spaces):
        seen = pixels.run(list(records))
        out[SPACE_VISUAL] = seen.features

    def texts_in(encoder: DualEncoder | TextEmbedder) -> np.ndarray:
        key = f"{encoder.model_id.removeprefix('caption:')}|captions"
        if key not in done:
            vecs = np.zeros((len(records), encoder.dim), dtype=np.float32)
            idx = np.flatnonzero(has_caption)
            if idx.size:
                vecs[idx] = encoder.encode_texts([captions[i] for i in idx])
            done[key] = vecs
        return done[key]

    def images_in(encoder: DualEncoder) -> np.ndarray:
        key = f"{encoder.model_id}|images"
        if key not in done:
            if seen is not None and uses_pixel_model(encoder, pixels):  # the stage's pass, unreadable files as zeros
                done[key] = _unwrap(encoder).conse.vectors(seen.tops)
            else:
                done[key] = np.asarray(encoder.encode_images(list(records)), dtype=np.float32)
        return done[key]

    for space, encoder in space_encoders(dual, text, extras).items():
        if spaces is not None and space not in spaces:
            continue
        if split_space(space)[0] == SPACE_IMAGE and getattr(encoder, "sees_pixels", True):
            if not caption_spaces_only:
                out[space] = images_in(encoder)
        elif space == SPACE_IMAGE and pixels is not None and pixels.caption_mode:
            out[space] = pixels.conse_rows(list(records), texts_in(encoder))
        else:
            out[space] = texts_in(encoder)
    return out


def pixel_space_models(pixels: Any) -> dict[str, tuple[str, int]]:
    """The ``visual`` space's (model id, dim) when a pixel stage runs."""
    from imagent.index.pixels import SPACE_VISUAL

    return {SPACE_VISUAL: (pixels.model_id, pixels.dim)} if pixels is not None else {}


def add_records(
    gallery: Gallery,
    pending: Sequence[PendingRecord],
    dual: DualEncoder | None,
    text: TextEmbedder | None,
    extras: Sequence[ExtraEncoder] = (),
    pixels: Any = None,
) -> None:
    """Embed and store one batch in a single transaction (all or nothing); with ``pixels``, the pixel model's
    labels and visual features too (in the same transaction)."""
    if not pending:
        return
    vectors = embed_records([p.record for p in pending], dual, text, extras=extras, pixels=pixels)
    with gallery.transaction() as c:
        for space, (model_id, dim) in {**space_models(dual, text, extras), **pixel_space_models(pixels)}.items():
            gallery.ensure_space(c, space, model_id, dim)
        for i, p in enumerate(pending):
            gallery.upsert(c, p.record, p.source_key, p.fingerprint, {s: v[i] for s, v in vectors.items()})


def add_spaces(
    gallery: Gallery,
    records: Sequence[ImageRecord],
    spaces: Collection[str],
    dual: DualEncoder | None,
    text: TextEmbedder | None,
    extras: Sequence[ExtraEncoder] = (),
    pixels: Any = None,
) -> None:
    """Embed stored ``records`` in ``spaces`` only (spaces added to the index after them) and store those
    vectors in one transaction; their other spaces and the records themselves are not touched. ``pixels``: caption
    mode's image space takes the ConSE vectors of stored labels (the ``visual`` space is filled by
    :func:`imagent.index.pixels.add_pixels`, not here)."""
    if not records:
        return
    vectors = embed_records(records, dual, text, extras=extras, spaces=spaces, pixels=pixels)
    with gallery.transaction() as c:
        for space, (model_id, dim) in space_models(dual, text, extras, spaces).items():
            gallery.ensure_space(c, space, model_id, dim)
        for i, r in enumerate(records):
            gallery.put_vectors(c, r.id, {s: v[i] for s, v in vectors.items()})


def gallery_from_records(
    root: str, records: Sequence[ImageRecord], dual: DualEncoder | None, text: TextEmbedder | None,
    batch_size: int = 256, extras: Sequence[ExtraEncoder] = (), pixels: Any = None,
) -> Gallery:
    """Build (or extend) a gallery straight from records (tests, benchmarks, the Python API); ``pixels`` a
    :class:`~imagent.index.pixels.PixelStage` for labels and visual features."""
    g = Gallery(root, create=True)
    items = [PendingRecord(r, f"record:{r.id}", stable_key(r.to_dict())) for r in records]
    for start in range(0, len(items), batch_size):
        add_records(g, items[start : start + batch_size], dual, text, extras, pixels)
    g.write_snapshot()
    return g
