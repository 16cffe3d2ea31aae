"""Pixels in the index: the pixel model (:mod:`imagent.models.pixels`) as a per-photo stage (:class:`PixelStage`).

When a pixel model is configured (``[pixels]``, on by default with the offline setup), every photo the builder
stores also goes through it, in the same chunk and the same SQLite transaction as its other vectors:

- its **labels** (top classes with probabilities) are stored on the record (``ImageRecord.labels``);
- its **visual feature** goes into the space ``visual`` (model id ``effnet-lite0:features``): "more like this"
  and the duplicate check compare photos there;
- in **caption mode** (the dual encoder reads captions), a photo *without* a caption gets its ConSE vector in the
  ``image`` space instead of an embedding of its file-name words, date and place (the embedding stage reads the
  labels this stage sets: :class:`~imagent.index.embedding.EmbedStage`): the image space then holds, per photo, the
  best surrogate there is: a caption, else what the pixel model saw, else the derived words (:func:`answered_by`
  names which, for each result). With ``dual_encoder.backend = "effnet-lite0"`` every photo's image vector is its
  ConSE vector anyway (from this stage's pass: one forward pass a photo).

Resumable and versioned like every stage (:mod:`imagent.index.stages`): its runs are recorded with the labels and
the ``visual`` vector, in one transaction; an index built before (or without) pixels, or with another version
(``labels_top_k``), has photos it owes, and the next ``imagent index`` runs the model over those only, chunk by
chunk, without reading or re-embedding anything else (in caption mode their image vectors are dropped with the new
labels, and the embedding stage computes them again right after); a killed run resumes at the first photo not
committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from imagent.core.config import PixelOptions
from imagent.core.types import ImageRecord
from imagent.index.gallery import (
    SPACE_CAPTION_DUAL,
    SPACE_CAPTION_TEXT,
    SPACE_IMAGE,
    Gallery,
    GalleryError,
    split_space,
)
from imagent.index.stages import Stage, Todo

if TYPE_CHECKING:
    from imagent.index.store import Writer

SPACE_VISUAL = "visual"


@dataclass
class PixelRow:
    """One photo through the pixel model: its stored labels, its top classes ``(index, p)`` (for ConSE), its
    L2-normalised visual feature (zeros when the file could not be read: ``failed`` says why)."""

    labels: list[dict[str, Any]]
    tops: list[tuple[int, float]]
    feature: np.ndarray
    failed: str = ""


class PixelStage(Stage):
    """The pixel model as a stage: loaded on first use (a run with nothing to compute loads nothing).

    ``load_model`` builds the classifier (:class:`~imagent.models.pixels.EffNetLite0`); ``image_reads_labels``: the
    index's image space is caption mode's, whose captionless photos take ConSE vectors of their labels (so new
    labels on a stored photo make its image vector stale)."""

    name = "pixels"
    needs = "pixels"
    stores = ("labels (on the record)", "vectors: visual")

    def __init__(self, load_model: Callable[[], Any], options: PixelOptions, image_reads_labels: bool = False,
                 model_id: str = "effnet-lite0:features", dim: int = 1280) -> None:
        self._load_model = load_model
        self._model: Any = None
        self.options = options
        self.image_reads_labels = image_reads_labels
        self.model_id = model_id
        self.dim = dim
        self.failed: list[str] = []

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = self._load_model()
        return self._model

    @property
    def version(self) -> str:
        return f"{self.model_id}/labels{self.options.labels_top_k}"

    def check(self, gallery: Gallery) -> None:
        seen = gallery.spaces().get(SPACE_VISUAL)
        if seen is not None and seen.model_id != self.model_id:
            raise GalleryError(f"index {gallery.root} holds 'visual' vectors from {seen.model_id}, but the pixel "
                               f"model is {self.model_id}; keep the index's model (pixels.model = "
                               f"\"{seen.model_id.split(':')[0]}\"), use another --index or set pixels.model = "
                               "\"none\"")

    def compute(self, records: list[ImageRecord], earlier: Mapping[str, list[Any]], part: tuple[str, ...] = ()
                ) -> list[PixelRow]:
        out = self.model.analyze(records)
        return [PixelRow(out.labels[n], out.tops[n], out.features[n], out.failed.get(n, ""))
                for n in range(len(records))]

    def apply(self, records: Sequence[ImageRecord], out: Sequence[PixelRow]) -> None:
        for rec, row in zip(records, out, strict=True):
            rec.labels = row.labels

    def put(self, c: Writer, gallery: Gallery, records: Sequence[ImageRecord], out: Sequence[PixelRow],
            part: tuple[str, ...] = ()) -> None:
        gallery.ensure_space(c, SPACE_VISUAL, self.model_id, self.dim)
        for rec, row in zip(records, out, strict=True):
            gallery.put_vectors(c, rec.id, {SPACE_VISUAL: row.feature})
            if row.failed:
                self.failed.append(row.failed)

    def todo(self, gallery: Gallery) -> list[Todo]:
        # An index from before runs were recorded: a photo with a visual vector went through the model.
        gallery.seed_stage(self.name, self.version, SPACE_VISUAL)
        return super().todo(gallery)

    def commit(self, gallery: Gallery, records: Sequence[ImageRecord], out: Sequence[PixelRow],
               part: tuple[str, ...] = ()) -> None:
        """Stored photos (copies; their labels set by :meth:`apply`): labels, visual vectors and runs in one
        transaction; nothing else about them is read or embedded again, except caption mode's image vector of a
        captionless photo, dropped here and computed again from the new labels by the embedding stage."""
        stale = [r.id for r in records if self.image_reads_labels and not r.has_caption and r.labels]
        with gallery.transaction() as c:
            for rec in records:
                gallery.update_record(c, rec)
            self.put(c, gallery, records, out)
            c.mark_stage(self.name, [r.id for r in records], self.version)
            if stale:
                c.drop_vectors(SPACE_IMAGE, stale)

    def notes(self) -> list[str]:
        if not self.failed:
            return []
        return [f"the pixel model could not read {len(self.failed)} file(s) (no labels, zero visual vector): "
                f"{'; '.join(self.failed[:3])}"]


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


__all__ = ["SPACE_VISUAL", "PixelRow", "PixelStage", "answered_by", "coverage", "pixel_note"]
