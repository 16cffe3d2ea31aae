"""Pixels in the index: what the pixel model (:mod:`imagent.models.pixels`) adds to each photo.

When a pixel model is configured (``[pixels]``, on by default with the offline setup), every photo the builder
embeds also goes through it, in the same batch and the same SQLite transaction as its other vectors:

- its **labels** (top classes with probabilities) are stored on the record (``ImageRecord.labels``);
- its **visual feature** goes into the space ``visual`` (model id ``effnet-lite0:features``): "more like this"
  and the duplicate check compare photos there;
- in **caption mode** (the dual encoder reads captions), a photo *without* a caption gets its ConSE vector in the
  ``image`` space instead of an embedding of its file-name words, date and place: the image space then holds, per
  photo, the best surrogate there is: a caption, else what the pixel model saw, else the derived words
  (:func:`answered_by` names which, for each result). With ``dual_encoder.backend = "effnet-lite0"`` every photo's
  image vector is its ConSE vector anyway.

Resumable: a photo has been through the pixel model exactly when it has a ``visual`` vector, and that vector is
written in the transaction that stores its labels. An index built before (or without) pixels lacks the space, so the
next ``imagent index`` runs the model over the stored photos only (:func:`add_pixels`), batch by batch, without
reading or re-embedding anything else; a killed run resumes at the first photo without a ``visual`` vector.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from imagent.core.types import ImageRecord
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery, split_space

SPACE_VISUAL = "visual"


class PixelStage:
    """The pixel model as the builder uses it: loaded on first use (a run with nothing to embed loads nothing),
    with the ConSE of caption mode's image space in the image space's own text model.

    ``load_model`` builds the classifier (:class:`~imagent.models.pixels.EffNetLite0`); ``load_conse`` the
    :class:`~imagent.models.pixels.Conse` over the caption-mode dual encoder's text model (None when the image
    space is not caption mode: then nothing is written there). Counts what it ran, for the index report."""

    def __init__(self, load_model: Callable[[], Any], load_conse: Callable[[], Any] | None,
                 model_id: str = "effnet-lite0:features", dim: int = 1280) -> None:
        self._load_model = load_model
        self._load_conse = load_conse
        self._model: Any = None
        self._conse: Any = None
        self.model_id = model_id
        self.dim = dim
        self.photos = 0
        self.seconds = 0.0
        self.failed: list[str] = []

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = self._load_model()
        return self._model

    @property
    def conse(self) -> Any:
        if self._conse is None and self._load_conse is not None:
            self._conse = self._load_conse()
        return self._conse

    @property
    def caption_mode(self) -> bool:
        """Whether caption mode's image space takes ConSE vectors for photos without captions."""
        return self._load_conse is not None

    def run(self, records: list[ImageRecord]) -> Any:
        """One pass over ``records`` (:class:`~imagent.models.pixels.PixelOutput`); their labels are set in place."""
        t0 = time.perf_counter()
        out = self.model.analyze(records)
        self.seconds += time.perf_counter() - t0
        self.photos += len(records)
        for n, rec in enumerate(records):
            rec.labels = out.labels[n]
        self.failed.extend(out.failed.values())
        return out

    def conse_rows(self, records: list[ImageRecord], base: np.ndarray) -> np.ndarray:
        """Caption mode's image vectors: ``base`` (the text embeddings) with each captionless photo that has labels
        replaced by its ConSE vector from those labels."""
        rows = [n for n, r in enumerate(records) if not r.has_caption and r.labels]
        if not rows or self.conse is None:
            return base
        out = np.array(base, dtype=np.float32, copy=True)
        out[rows] = self.conse.of_labels([records[n] for n in rows])
        return out

    def report(self) -> dict[str, Any]:
        rate = self.photos / self.seconds if self.seconds > 0 else None
        return {"photos": self.photos, "seconds": round(self.seconds, 2),
                "images_per_s": round(rate, 1) if rate else None, "unreadable": len(self.failed)}


def answered_by(record: ImageRecord, space: str, info_model: str) -> str:
    """What a result's score in ``space`` compared the query with, for this photo: ``pixels`` (an encoder that sees
    them, or the pixel model's ConSE vector standing in caption mode), ``caption``, ``names`` (words from its
    file name and folders, date and place), ``nothing`` (none of these: a zero vector); ``looks`` for the visual
    space. ``info_model`` is the space's model id (``caption:...`` in caption mode)."""
    base, _ = split_space(space)
    if base == SPACE_VISUAL:
        return "looks"
    caption_mode = info_model.startswith("caption:")
    if base == SPACE_IMAGE and not caption_mode:
        return "pixels"
    if record.has_caption:
        return "caption"
    if base == SPACE_IMAGE and record.labels:
        return "pixels"
    if base in (SPACE_IMAGE, SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT) and record.derived_text:
        return "names"
    return "nothing"


def coverage(gallery: Gallery) -> dict[str, int]:
    """How the photos of the index are represented in its image space: by caption, by pixels (labels from the
    pixel model), by names (derived words only) or nothing; plus how many carry labels."""
    info = gallery.spaces().get(SPACE_IMAGE)
    model = info.model_id if info is not None else "caption:"
    counts = {"caption": 0, "pixels": 0, "names": 0, "nothing": 0, "labelled": 0}
    for rec in gallery.records():
        counts[answered_by(rec, SPACE_IMAGE, model)] += 1
        counts["labelled"] += bool(rec.labels)
    return counts


def pixel_note(pixels: dict[str, Any]) -> str:
    """The index report's line on the pixel model (``IndexReport.pixels``): what ran, at what speed, and what answers
    an image search for how many photos ("" when the index has no pixel model)."""
    seen = pixels.get("search")
    if not seen:
        return ""
    ran, rate = pixels.get("photos"), pixels.get("images_per_s")
    head = (f"pixels: {ran} photo(s) through {pixels.get('model', 'the pixel model')}"
            + (f" ({rate} images/s)" if rate else "") + "; " if ran else "pixels: ")
    return (head + f"{seen['labelled']} labelled; image search answers by caption for {seen['caption']}, by pixels "
            f"for {seen['pixels']}, by file names, dates and places for {seen['names']}")


def add_pixels(gallery: Gallery, records: list[ImageRecord], stage: PixelStage, dual: Any) -> None:
    """Run the pixel model over stored ``records`` (copies are changed, never the gallery's) and store, in one
    transaction: their labels, their ``visual`` vectors and, in caption mode, the ConSE image vector of each one
    without a caption (the others keep theirs). Nothing else about them is read or embedded again."""
    recs = [ImageRecord.from_dict(r.to_dict()) for r in records]
    out = stage.run(recs)
    swap = [n for n, r in enumerate(recs) if stage.caption_mode and dual is not None and not r.has_caption
            and r.labels]
    image = stage.conse.of_labels([recs[n] for n in swap]) if swap else None
    with gallery.transaction() as c:
        gallery.ensure_space(c, SPACE_VISUAL, stage.model_id, stage.dim)
        if image is not None:
            gallery.ensure_space(c, SPACE_IMAGE, dual.model_id, dual.dim)
        for n, rec in enumerate(recs):
            gallery.update_record(c, rec)
            gallery.put_vectors(c, rec.id, {SPACE_VISUAL: out.features[n]})
        for k, n in enumerate(swap):
            assert image is not None
            gallery.put_vectors(c, recs[n].id, {SPACE_IMAGE: image[k]})


def backfill(gallery: Gallery, stage: PixelStage, dual: Any, batch_size: int,
             progress: Callable[[int, int, str], None] | None = None) -> int:
    """Every stored photo without a ``visual`` vector goes through the pixel model (:func:`add_pixels`), one
    committed batch at a time: a killed run resumes where it stopped. Returns how many were done."""
    missing = gallery.missing_vectors([SPACE_VISUAL]).get(SPACE_VISUAL, [])
    if not missing:
        return 0
    gallery.reload()
    for start in range(0, len(missing), batch_size):
        batch = gallery.records(missing[start : start + batch_size])
        add_pixels(gallery, batch, stage, dual)
        if progress is not None:
            progress(min(start + batch_size, len(missing)), len(missing), batch[-1].path)
    gallery.reload()
    return len(missing)


__all__ = ["SPACE_VISUAL", "PixelStage", "add_pixels", "answered_by", "backfill", "coverage", "pixel_note"]
