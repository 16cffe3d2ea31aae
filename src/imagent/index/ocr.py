"""Text in photos as a per-photo stage of the index (:mod:`imagent.index.stages`): :class:`TextStage`, ``text``.

Every photo a build stores goes through the OCR model (:mod:`imagent.models.ocr`, ``[ocr]``), in the same chunk and
the same SQLite transaction as its other results: its text lines (``{"text", "box", "confidence"}``, reading order)
are stored on its record (``ImageRecord.text_lines``), where search, the filter ``text ~`` and the descriptions read
them (:mod:`imagent.index.text`). The detector runs on every photo and the recogniser only where it found text, so a
photo without text costs the detection alone.

Incremental like every stage: its runs are recorded at its version (the reader's: the package, the model files'
hashes and the settings that change what is read, known without loading the model), so re-indexing an unchanged
folder runs no OCR, a new version (``ocr.max_side``...) reads the stored photos again, chunk by chunk, and a killed
run resumes at the first photo not committed. A file the reader cannot decode (truncated since it was probed, too
many pixels) keeps no text and is named in the build's notes, as the pixel stage names its own. ``ocr.enabled =
false`` leaves the stage out of the composition (:func:`text_stage`); on Ray it computes on the actors like the
others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from imagent.core.config import OcrOptions
from imagent.core.types import ImageRecord
from imagent.index.stages import Stage

if TYPE_CHECKING:
    from imagent.index.gallery import Gallery
    from imagent.index.store import Writer


@dataclass
class TextRow:
    """One photo through the OCR model: its text lines (``TextLine.to_dict()``), or why its file could not be read."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    failed: str = ""


class TextStage(Stage):
    """The OCR model as a stage (module doc); ``load_reader`` builds the :class:`~imagent.models.ocr.TextReader` on
    the first compute (a build with nothing to read loads nothing)."""

    name = "text"
    needs = "pixels"
    stores = ("text_lines (on the record)",)

    def __init__(self, load_reader: Callable[[], Any], options: OcrOptions) -> None:
        self._load_reader = load_reader
        self._reader: Any = None
        self.options = options
        self.failed: list[str] = []
        self._version: str | None = None

    @property
    def reader(self) -> Any:
        if self._reader is None:
            self._reader = self._load_reader()
        return self._reader

    @property
    def version(self) -> str:
        if self._version is None:
            from imagent.models.registry import text_reader_version

            self._version = f"{self.options.model}/{text_reader_version(self.options)}"
        return self._version

    def compute(self, records: list[ImageRecord], earlier: Mapping[str, list[Any]], part: tuple[str, ...] = ()
                ) -> list[TextRow]:
        from imagent.core.imageio import ImageLoadError

        reader = self.reader
        out = []
        for rec in records:
            try:
                out.append(TextRow([line.to_dict() for line in reader.read_file(rec.path)]))
            except ImageLoadError as exc:
                out.append(TextRow(failed=f"cannot read {rec.path!r} (record {rec.id!r}): {exc}"))
            except Exception as exc:  # the engine failing on one photo: that photo keeps no text, the build goes on
                out.append(TextRow(failed=f"the OCR model failed on {rec.path!r} (record {rec.id!r}): "
                                          f"{type(exc).__name__}: {exc}"))
        return out

    def apply(self, records: Sequence[ImageRecord], out: Sequence[TextRow]) -> None:
        for rec, row in zip(records, out, strict=True):
            rec.text_lines = list(row.lines)

    def put(self, c: Writer, gallery: Gallery, records: Sequence[ImageRecord], out: Sequence[TextRow],
            part: tuple[str, ...] = ()) -> None:
        # New records are stored with their text (apply ran before they were written); only failures are kept.
        self.failed.extend(row.failed for row in out if row.failed)

    def commit(self, gallery: Gallery, records: Sequence[ImageRecord], out: Sequence[TextRow],
               part: tuple[str, ...] = ()) -> None:
        """Stored photos (copies, their text set by :meth:`apply`): the records and the runs in one transaction;
        nothing else about them is read or embedded again."""
        with gallery.transaction() as c:
            for rec in records:
                gallery.update_record(c, rec)
            self.put(c, gallery, records, out)
            c.mark_stage(self.name, [r.id for r in records], self.version)

    def notes(self) -> list[str]:
        if not self.failed:
            return []
        return [f"the OCR model could not read {len(self.failed)} file(s) (no text stored): "
                f"{'; '.join(self.failed[:3])}"]


def text_stage(ctx: Any) -> TextStage | None:
    """The stage from a :class:`~imagent.index.parts.StageContext` (typed loosely: the composition imports this
    module): ``ctx.settings.ocr`` (None with ``enabled = false``), its reader bounded by the index's decode limits
    (``ctx.settings.indexing``)."""
    options = ctx.settings.ocr
    if not options.enabled:
        return None
    from imagent.models.registry import build_text_reader

    limits = ctx.settings.indexing
    return TextStage(partial(build_text_reader, options, max_pixels=limits.max_pixels,
                             max_bytes=limits.max_file_bytes), options)


__all__ = ["TextRow", "TextStage", "text_stage"]
