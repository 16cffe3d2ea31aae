"""Build or update a gallery index from a folder of images or a manifest file.

Sources
    A folder is scanned recursively for image files (see :data:`IMAGE_EXTENSIONS`; hidden files
    and folders are left out). A manifest is a ``.json`` list of rows, a ``.jsonl`` file (one row a
    line) or a ``.csv`` file; a row names its image with ``file`` or ``path`` (relative to the
    manifest's folder, or absolute) and may give ``id``, ``caption``/``captions``, ``taken_time``,
    ``latitude``/``longitude``, ``address`` and ``tags``; any other column is kept in
    ``record.extra``. Manifest values override what EXIF says.

Incremental and resumable
    Each input has a *source key* (its absolute path, or for a manifest row the manifest and the
    row's id) and a *fingerprint* (size, mtime and a hash of the row's metadata). An input whose
    fingerprint is stored already is not read again; a changed one is re-read and re-embedded;
    inputs gone from the source (or no longer readable) are removed. Records are committed in
    batches of ``options.batch_size``, one SQLite transaction each, so a killed build keeps every
    finished batch and the next run carries on from there. The dense snapshot is written last;
    until then the gallery treats the old one as stale (see :mod:`imagent.index.gallery`).

    Removals only touch records this source owns (its folder, or its manifest), so several
    sources can share one index.

Bad inputs
    Anything that is not a complete image within the limits (:mod:`imagent.core.imageio`), and
    manifest rows with unusable values, are skipped with a reason: listed in the report and stored
    with :meth:`Gallery.mark_skipped`. One bad file never stops a build. File names that are not
    UTF-8 keep their exact bytes (surrogate escapes, stored losslessly) so the file still opens; they
    are *shown* escaped (``caf\\xe9.jpg``). Manifest text with lone surrogates or undecodable bytes is
    cleaned where it enters (:func:`imagent.core.text.clean_text`).

Captions
    A manifest's captions are ``caption_source = "given"``; ``captions=FILE`` imports more
    (:func:`import_captions`); ``options.caption_missing`` asks a captioner that sees pixels
    (:mod:`imagent.index.captioning`: prompt files, the model + prompt identity kept in each
    captioned record's fingerprint). An image with no caption gets ``derived_text``
    (:mod:`imagent.index.derived`), which the caption spaces embed instead.

``imagent index SOURCE`` runs it with the configured encoders and a progress bar.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagent.core.cache import stable_key
from imagent.core.config import IndexOptions
from imagent.core.imageio import (
    IMAGE_EXTENSIONS,
    ImageLoadError,
    check_file,
    probe_file,
)
from imagent.core.text import clean_text, display_path
from imagent.core.types import ImageRecord
from imagent.index import places
from imagent.index.ann import AnnUnavailable
from imagent.index.captioning import (
    CaptionPrompt,
    caption_rows,
    captioner_identity,
    load_caption_prompt,
    parse_caption_reply,
)
from imagent.index.faces import FacesReport, source_is_folder
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts
from imagent.index.records import UPGRADE_VERSION, make_record, record_for_file, upgraded
from imagent.index.sources import (
    MANIFEST_SUFFIXES,
    Source,
    SourceError,
    SourceItem,
    abspath,
    read_rows,
    read_source,
)
from imagent.index.stages import PendingRecord, catch_up, compute_all, run_after, store_new
from imagent.models.base import ImagePart, Message
from imagent.models.roles import Role

__all__ = [
    "IMAGE_EXTENSIONS",
    "IndexReport",
    "SourceError",
    "build_index",
    "record_for_file",
]

Progress = Callable[[int, int, str], None]

_MAX_CAPTION_WARNINGS = 5


@dataclass
class IndexReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path or row, reason)
    seconds: float = 0.0
    total: int = 0  # inputs found in the source (files, or manifest rows)
    captioned: int = 0
    warnings: list[str] = field(default_factory=list)
    imported: int = 0  # records given captions from a --captions file
    with_caption: int = 0  # records of the index with a real caption (given or from a captioner)
    without_caption: int = 0
    derived: int = 0  # of those without, how many have derived text (names, date, place)
    sees_pixels: bool | None = None  # whether the dual encoder sees pixels (None: no dual encoder)
    backfilled: int = 0  # stored records embedded in spaces added to the index by this run (those spaces only)
    upgraded: int = 0  # unchanged records given place names / new derived text (caption spaces re-embedded)
    faces: FacesReport | None = None  # the face pass, None when it did not run
    pixels: dict[str, Any] = field(default_factory=dict)  # the pixel model's run and what answers image search
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # per stage: version, photos, seconds, photos/s
    with_text: int | None = None  # records of the index with text read in them (None: no text stage ran)
    _texted: int = 0  # the same count, whether a text stage ran or not (set by coverage())

    def coverage(self, gallery: Gallery, dual: Any) -> None:
        """Count captions in the index, for :meth:`caption_note`."""
        self.with_caption, total = gallery.caption_coverage()
        self.without_caption = total - self.with_caption
        self.derived = texted = 0
        for r in gallery.records():  # one pass over the records for both counts
            self.derived += bool(not r.has_caption and r.derived_text)
            texted += bool(r.text_lines)
        self._texted = texted
        self.sees_pixels = None if dual is None else bool(getattr(dual, "sees_pixels", True))
        if self.pixels or gallery.has_space("visual"):
            from imagent.index.pixels import coverage

            self.pixels["search"] = coverage(gallery)

    def pixel_note(self) -> str:
        """Which space answers an image search, per photo, in words ("" without a pixel model)."""
        from imagent.index.pixels import pixel_note

        return pixel_note(self.pixels)

    def text_note(self) -> str:
        """The text stage's line: photos read this run, at what speed, and how many photos of the index hold text
        ("" when no text stage ran)."""
        run = self.stages.get("text")
        if run is None or self.with_text is None:
            return ""
        rate = run.get("photos_per_s")
        head = (f"text: {run.get('photos', 0)} photo(s) read" + (f" ({rate} images/s)" if rate else "")
                if run.get("photos") else "text: no photo to read")
        return (f"{head}; {self.with_text} photo(s) of the index hold text (search \"quoted words\", "
                "--where \"text ~ 'word'\")")

    def caption_note(self) -> str:
        """What search relies on for images without captions, in plain words ("" when all have one)."""
        if not self.without_caption:
            return ""
        seen = self.pixels.get("search") or {}
        n = self.without_caption
        head = f"{n} image{'s' if n != 1 else ''} {'have' if n != 1 else 'has'} no caption"
        if not self.sees_pixels and seen.get("pixels"):
            names = f"; {seen['names']} are searched by file names, dates and places" if seen.get("names") else ""
            return (f"{head}: search by content sees the pixels of {seen['pixels']} of them (the pixel model's labels "
                    f"and ConSE vectors){names}; for real captions: `imagent index SRC --caption-missing` with a "
                    "vision captioner, or `--captions FILE`")
        words = "words from their file names and folders, dates and places"
        if self.sees_pixels:
            return (f"{head}: the dual encoder sees their pixels (clip), and caption-based methods use {words}; "
                    "for real captions: `imagent index SRC --caption-missing` with a vision captioner, or "
                    "`imagent index SRC --captions FILE`")
        return (f"{head}: search uses {words}; for content search turn the pixel model on (pixels.model = "
                "\"effnet-lite0\", the offline default), configure a dual encoder that sees pixels "
                "(e.g. `imagent models presets`, then `imagent models use clip-b32`) or caption with a vision "
                "model: `imagent index SRC --caption-missing` (or import captions: `--captions FILE`)")

    def to_dict(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "with_caption": self.with_caption,
            "without_caption": self.without_caption,
            "derived_text": self.derived,
            "caption_note": self.caption_note(),
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "seconds": round(self.seconds, 3),
            "total": self.total,
            "captioned": self.captioned,
            "embedded_in_new_spaces": self.backfilled,
            "upgraded": self.upgraded,
            "pixels": dict(self.pixels),
            "pixel_note": self.pixel_note(),
            "with_text": self.with_text,
            "text_note": self.text_note(),
            "warnings": list(self.warnings),
            "faces": self.faces.to_dict() if self.faces is not None else None,
            "stages": {k: dict(v) for k, v in self.stages.items()},
        }


# --------------------------------------------------------------------------- captioning


class _Captioner:
    """Captions captionless records with a chat role that sees images, if one is configured.

    A role whose model cannot see pixels is refused: it would describe an image from its file name at best,
    and invent the rest (a "caption" nobody could tell from a real one)."""

    def __init__(self, role: Role | None, options: IndexOptions, report: IndexReport) -> None:
        self.role = role
        self.report = report
        self.failures = 0
        self.warned = False
        self.wanted = options.caption_missing
        self.active = bool(self.wanted and role is not None and not role.caption_mode)
        self.prompt: CaptionPrompt | None = load_caption_prompt(options.caption_prompt) if self.active else None
        self.max_tokens = options.caption_max_tokens

    @property
    def model_id(self) -> str | None:
        return str(self.role.model.model_id) if self.active and self.role is not None else None

    @property
    def identity(self) -> str | None:
        """Model id + prompt hash, stored in the fingerprint of the records it captions."""
        if not self.active or self.prompt is None or self.role is None:
            return None
        return captioner_identity(str(self.role.model.model_id), self.prompt)

    def note_captionless(self) -> None:
        """Called for each record with no caption; warns once when nothing can caption it."""
        if not self.wanted or self.active or self.warned:
            return
        self.warned = True
        if self.role is None:
            self.report.warnings.append("caption_missing is set but no captioner role was given; "
                                        "captionless images keep no caption")
        else:
            self.report.warnings.append(
                f"captioning refused: role {self.role.name!r} ({self.role.model.model_id}) cannot see images, and a "
                "model that does not see an image must not describe it; configure a captioner with vision"
            )

    def caption(self, records: Sequence[ImageRecord]) -> list[bool]:
        """Caption records in place; returns which ones got a caption."""
        assert self.prompt is not None and self.role is not None
        done = []
        for rec in records:
            text = ""
            try:
                reply = self.role.text([Message.user(self.prompt.text, ImagePart(record=rec))],
                                       max_tokens=self.max_tokens)
                text = parse_caption_reply(reply)
            except Exception as exc:  # a failing model costs this caption, not the build
                self.failures += 1
                if self.failures <= _MAX_CAPTION_WARNINGS:
                    self.report.warnings.append(f"captioning {display_path(rec.path)} failed: {clean_text(str(exc))}")
            if text:
                rec.captions = [text]
                rec.caption_source = f"captioner:{self.model_id}"
                rec.derived_text = ""
                self.report.captioned += 1
            done.append(bool(text))
        return done


# --------------------------------------------------------------------------- the build


# Bump when records gain fields that need every input read again (2: derived_text, caption_source).
_RECORD_VERSION = 2


def _fingerprint(st: os.stat_result, item: SourceItem, captioner: str | None = None) -> str:
    """``size:mtime:meta`` of the input, then ``|captioner identity`` when a captioner described it.

    The captioner part is compared only by a run that captions (see :meth:`_Build._one`), so a run without
    ``--caption-missing`` keeps the captions an earlier run made, and a run with another captioner model or
    prompt re-captions them."""
    meta = stable_key(item.path, item.row.digest() if item.row else None, None, _RECORD_VERSION)[:16]
    base = f"{st.st_size}:{st.st_mtime_ns}:{meta}"
    return f"{base}|{captioner}" if captioner else base


def _store_refreshed(gallery: Gallery, parts: IndexParts, refresh: Sequence[tuple[ImageRecord, str, str]]) -> None:
    """Store upgraded records (same id, key and fingerprint) with their caption spaces embedded again; image
    vectors of an encoder that sees pixels stay as they are (the pixels did not change)."""
    records = [r for r, _, _ in refresh]
    embed = parts.embed
    part = embed.caption_spaces()
    out = compute_all(parts.runner, [embed], records, part)[embed.name]
    with gallery.transaction() as c:
        for rec, key, fp in refresh:
            gallery.upsert(c, rec, key, fp, {})
        embed.put(c, gallery, records, out, part)


class _Build:
    def __init__(self, gallery: Gallery, parts: IndexParts, options: IndexOptions, report: IndexReport,
                 captioner: Role | None = None) -> None:
        self.g = gallery
        self.parts = parts
        self.options = options
        self.report = report
        self.captioner = _Captioner(captioner, options, report)
        self.pending: list[PendingRecord] = []
        # (index into pending, fingerprint to store if captioning fails)
        self.needs_caption: list[tuple[int, str]] = []
        self.replaced: list[str] = []  # ids to delete before this batch's upserts
        self.skips: list[tuple[str, str, str]] = []  # (source key, path, reason) to store
        self.ok_keys: set[str] = set()  # inputs that end this run with a current record
        self.skipped_keys: set[str] = set()
        self.root: str | None = None
        # Stored records of unchanged inputs brought up to date (place names, derived text with the day):
        # (record, source key, fingerprint); their caption spaces are embedded again, their image vectors kept.
        self.refresh: list[tuple[ImageRecord, str, str]] = []
        self.upgrade = False

    def run(self, source: Source, progress: Progress | None, force: bool) -> None:
        items = source.items
        self.root = source.root
        mark = f"upgrade:{stable_key(source.scope)[:16]}"
        self.upgrade = self.g.meta(mark) != UPGRADE_VERSION
        shown = source.scope.removeprefix("file:").removeprefix("manifest:").rstrip("#")
        shown = shown.rstrip(os.sep) or shown
        if self.g.meta(f"source:{stable_key(source.scope)[:16]}") != shown:  # what the web UI's header names
            self.g.set_meta(f"source:{stable_key(source.scope)[:16]}", shown)
        stored = self.g.fingerprints()  # source key -> (id, fingerprint)
        self.owner = {i: k for k, (i, _) in stored.items()}  # id -> source key holding it
        self.owner_path = {i: self.g.record(i).path for i in self.owner if i in self.g}
        current = {it.key for it in items}
        total = len(items)
        for n, item in enumerate(items, 1):
            try:
                self._one(item, stored, current, source.scope, force)
            except (OSError, ValueError) as exc:
                # Anything unforeseen about one input (an OS error on a strange file, a value a row carries)
                # costs that input, with the reason, never the build.
                self._skip(item, f"unexpected {type(exc).__name__}: {clean_text(str(exc))}")
            if len(self.pending) + len(self.refresh) >= self.options.batch_size:
                self._flush()
            if progress is not None:
                progress(n, total, item.display)
        self._flush()
        self._finish(source.scope)
        if self.upgrade and (places.available() or not self.parts.places.names):
            self.g.set_meta(mark, UPGRADE_VERSION)  # the next run skips the look at unchanged records

    def _skip(self, item: SourceItem, reason: str) -> None:
        self.report.skipped.append((item.display, reason))
        self.skips.append((item.key, item.path or item.display, reason))
        self.skipped_keys.add(item.key)

    def _unchanged(self, previous: tuple[str, str] | None, fp: str, captionless: bool) -> bool:
        if previous is None:
            return False
        old_base, _, old_captioner = previous[1].partition("|")
        if old_base != fp:
            return False
        identity = self.captioner.identity
        if not (captionless and identity):
            return True  # not captioning now: whatever captions the record has stay
        if old_captioner == identity:
            return True
        stored = self.g.record(previous[0]) if previous[0] in self.g else None
        # Captions given by a manifest or imported with --captions are never replaced by a captioner's.
        return stored is not None and stored.caption_source == "given"

    def _one(self, item: SourceItem, stored: dict[str, tuple[str, str]], current: set[str], scope: str,
             force: bool) -> None:
        if item.error is not None:
            self._skip(item, item.error)
            return
        try:
            st = check_file(item.path, self.options.max_file_bytes)
        except ImageLoadError as exc:
            self._skip(item, str(exc))
            return
        captionless = not (item.row and item.row.captions)
        fp = _fingerprint(st, item)
        previous = stored.get(item.key)
        if not force and self._unchanged(previous, fp, captionless):
            self.report.unchanged += 1
            self.ok_keys.add(item.key)
            if self.upgrade and previous is not None and previous[0] in self.g:
                new = upgraded(self.g.record(previous[0]), self.root, self.parts.places)
                if new is not None:
                    self.refresh.append((new, item.key, previous[1]))
            return
        try:
            probe = probe_file(item.path, self.options.max_pixels, self.options.max_file_bytes)
        except ImageLoadError as exc:
            self._skip(item, str(exc))
            return
        record = make_record(item, probe, self.root, self.parts.places)
        holder = self.owner.get(record.id)
        # A holder that is an input of this source but gone from it (a renamed or moved file) is
        # not a conflict: the upsert below takes its record over, under this input's key.
        if holder is not None and holder != item.key and (holder in current or not holder.startswith(scope)):
            other = display_path(self.owner_path.get(record.id, holder))
            if item.row is not None and item.row.id is not None:
                self._skip(item, f"id {record.id!r} is already used by {other}")
            else:
                self._skip(item, f"same image as {other} (identical content)")
            return
        if previous is not None and previous[0] != record.id:
            # Same input, new content, new id: drop the old record (in its own transaction,
            # committed before the new one, so no state ever has two records for one input).
            self.replaced.append(previous[0])
            self.owner.pop(previous[0], None)
        self.owner[record.id] = item.key
        self.owner_path[record.id] = record.path
        pending = PendingRecord(record, item.key, fp)
        if captionless:
            if self.captioner.active:
                self.needs_caption.append((len(self.pending), fp))
                pending.fingerprint = f"{fp}|{self.captioner.identity}"
            else:
                self.captioner.note_captionless()
        self.pending.append(pending)
        self.ok_keys.add(item.key)
        if previous is None:
            self.report.added += 1
        else:
            self.report.updated += 1

    def _flush(self) -> None:
        if self.needs_caption:
            jobs = [(self.pending[i], fallback) for i, fallback in self.needs_caption]
            got = self.captioner.caption([p.record for p, _ in jobs])
            for (p, fallback), ok in zip(jobs, got, strict=True):
                if not ok:
                    # Store the fingerprint an uncaptioned input has, so the next run tries again.
                    p.fingerprint = fallback
        if self.replaced:
            with self.g.transaction() as c:
                self.g.remove(c, self.replaced)
        if self.pending:
            store_new(self.g, self.parts.inline, self.parts.runner, self.pending)
        if self.refresh:
            _store_refreshed(self.g, self.parts, self.refresh)
            self.report.upgraded += len(self.refresh)
        if self.skips:
            with self.g.transaction() as c:
                for key, path, reason in self.skips:
                    self.g.mark_skipped(c, key, path, reason)
        self.pending, self.needs_caption, self.replaced, self.skips, self.refresh = [], [], [], [], []

    def _finish(self, scope: str) -> None:
        # Read the keys again: upserts above may have moved a record to a new key (renames).
        fresh = self.g.fingerprints()
        stale = sorted({i for k, (i, _) in fresh.items() if k.startswith(scope) and k not in self.ok_keys})
        if stale and not self.options.prune and not any(k.startswith(scope) for k in self.ok_keys):
            where = display_path(scope.removeprefix("file:").removeprefix("manifest:").rstrip("#"))
            raise SourceError(
                f"{where} holds none of the {len(stale)} photo(s) this index has from it (an unmounted "
                "disk or a moved folder?); nothing was removed, and their faces, names and marks stay. To remove "
                "them all: imagent index --prune")
        forget = [k for k in self.g.skipped_keys() if k.startswith(scope) and k not in self.skipped_keys]
        if stale or forget:
            with self.g.transaction() as c:
                self.g.remove(c, stale)
                self.g.forget_skipped(c, forget)
        self.report.removed = len(stale)


def _source_root(source: str | Path) -> str | None:
    src = Path(source).expanduser()
    return abspath(src) if src.is_dir() else (os.path.dirname(abspath(src)) if src.is_file() else None)


def import_captions(caption_file: str | Path, gallery: Gallery, parts: IndexParts, report: IndexReport,
                    source_root: str | None = None) -> int:
    """Store the captions of ``caption_file`` (see :mod:`imagent.index.captioning`) on the gallery's records,
    as ``caption_source = "given"``, and embed their caption spaces again. Returns how many records changed.

    A row names its record by ``id``, or by ``file``/``path`` relative to the caption file's folder (or to
    ``source_root``, the indexed folder). Rows that match nothing are skipped with a reason."""
    path = Path(caption_file).expanduser()
    if not path.is_file():
        raise SourceError(f"no such caption file: {display_path(path)}")
    if path.suffix.lower() not in MANIFEST_SUFFIXES:
        raise SourceError(f"unknown caption file type {path.suffix!r}; use .jsonl, .json or .csv")
    rows, bad = caption_rows(read_rows(path, report.warnings), path, path.suffix.lower() == ".csv")
    shown = display_path(path)
    for where, reason in bad:
        report.skipped.append((f"{shown} ({where})", f"{where}: {reason}"))
    keys = {i: (k, fp) for k, (i, fp) in gallery.fingerprints().items()}
    by_path = {abspath(r.path): r.id for r in gallery.records()}
    updates: dict[str, ImageRecord] = {}
    for row in rows:
        rid = row.id if row.id in gallery else None
        if rid is None and row.path is not None:
            rid = by_path.get(row.path)
            if rid is None and source_root and row.name:
                rid = by_path.get(abspath(os.path.join(source_root, row.name)))
        if rid is None or rid not in keys:
            what = f"id {row.id!r}" if row.id else display_path(row.name or "")
            report.skipped.append((f"{shown} ({row.where})", f"{row.where}: {what} is not in the index"))
            continue
        rec = ImageRecord.from_dict(gallery.record(rid).to_dict())
        rec.captions, rec.caption_source = list(row.captions), "given"
        updates[rid] = rec
    records = list(updates.values())
    for start in range(0, len(records), 256):
        # Caption spaces only: a pixel encoder's image vectors do not depend on the caption.
        batch = records[start : start + 256]
        _store_refreshed(gallery, parts, [(rec, *keys[rec.id]) for rec in batch])
    report.imported = len(records)
    return len(records)


def build_index(
    source: str | Path,
    index_root: str | Path | Gallery,
    parts: IndexParts,
    options: IndexOptions | None = None,
    progress: Progress | None = None,
    captions: str | Path | None = None,
) -> IndexReport:
    """Index ``source`` (a folder or a manifest) into the gallery at ``index_root`` with ``parts`` (the encoders,
    the per-photo stages, the captioner and the runner they compute on: :func:`imagent.index.parts.compose_index`);
    see the module doc.

    ``parts``' encoders may be :class:`~imagent.index.embedding.LazyEncoder`: then a run with nothing to embed
    never loads a model. ``captions``: a caption file imported after the source is read (before any captioner
    runs, so images it covers are not captioned by a model).

    The inline stages (the pixel model, the embedding) run with each batch of new records, in its transaction;
    then each catches up on the stored photos it owes (a space the index gains, photos indexed before the pixel
    model, a stage whose version changed, a killed run's rest); the snapshot is written; then the stages that run
    after it (faces) do theirs.

    Raises :class:`SourceError` for an unusable source and :class:`GalleryError` when the index
    was built with other encoders; a bad image or row is skipped and reported, never raised."""
    t0 = time.perf_counter()
    options = options or IndexOptions()
    gallery = index_root if isinstance(index_root, Gallery) else Gallery(index_root, create=True)
    gallery.configure(options, parts.ann)
    report = IndexReport()
    for stage in parts.stages:
        stage.check(gallery)
    src = read_source(source, exclude=gallery.root)
    report.warnings.extend(src.warnings)
    report.total = len(src.items)
    _read_source(gallery, parts, options, report, src, progress, captions)
    _catch_up_inline(gallery, parts, options, report, progress)
    if not gallery.snapshot_is_current():
        gallery.write_snapshot()
    else:
        gallery.reload()
    try:
        built = gallery.build_ann()
    except AnnUnavailable as exc:  # a large gallery without the `ann` extra: the exact scan still answers
        built = []
        report.warnings.append(f"{exc}; searches use the exact scan")
    if built:
        report.warnings.append(f"approximate search store (re)built for {', '.join(built)}")
    report.warnings.extend(gallery.ann_notes)  # a calibration short of its recall target
    pixels = parts.pixels
    if pixels is not None:
        report.pixels = {"model": pixels.model_id.split(":")[0], **_pixel_run(parts)}
    report.coverage(gallery, parts.dual)
    # After the snapshot: a kill here leaves the records and vectors complete (faces: imagent.index.faces).
    for stage in parts.after:
        run_after(gallery, stage, parts.runner, _chunk(parts, options), source_is_folder(source), progress)
        report.warnings.extend(stage.notes())
    faces = [s for s in parts.after if s.name == "faces"]
    report.faces = getattr(faces[0], "report", None) if faces else None
    report.stages = {s.name: {"version": s.version, **parts.runner.stats.of(s.name)} for s in parts.stages}
    if "text" in report.stages:  # counted by coverage(), before the after-stages (they add no text)
        report.with_text = report._texted
    report.seconds = time.perf_counter() - t0
    return report


def _read_source(gallery: Gallery, parts: IndexParts, options: IndexOptions, report: IndexReport, src: Source,
                 progress: Progress | None, captions: str | Path | None) -> None:
    """The records of the source's inputs, with the inline stages' results; ``captions`` imported after a first
    pass that captions nothing, then a second pass captions what is still missing."""
    if captions is None:
        _Build(gallery, parts, options, report, parts.captioner).run(src, progress, False)
        return
    _Build(gallery, parts, options.model_copy(update={"caption_missing": False}), report).run(src, progress, False)
    gallery.reload()
    import_captions(captions, gallery, parts, report, src.root)
    gallery.reload()
    if options.caption_missing:
        second = IndexReport()
        _Build(gallery, parts, options, second, parts.captioner).run(src, progress, False)
        report.updated += second.updated + second.added
        report.captioned += second.captioned
        report.warnings.extend(second.warnings)


def _catch_up_inline(gallery: Gallery, parts: IndexParts, options: IndexOptions, report: IndexReport,
                     progress: Progress | None) -> None:
    """Each inline stage over the stored photos it owes (any source's), in stage order: the pixel model first (its
    labels feed caption mode's image vectors), then the spaces the index gains; each commits chunk by chunk."""
    batch = _chunk(parts, options)
    for stage in parts.inline:
        done = catch_up(gallery, stage, parts.runner, batch, progress)
        if stage is parts.embed:
            report.backfilled += parts.embed.backfilled
        elif done and stage is parts.pixels:
            report.warnings.append("the pixel model labelled the photos indexed before it (labels, visual features)")
        report.warnings.extend(stage.notes())


def _chunk(parts: IndexParts, options: IndexOptions) -> int:
    """Photos a catch-up chunk holds (each committed on its own): the runner's task size (Ray), else a batch."""
    return max(1, parts.runner.chunk_size or options.batch_size)


def _pixel_run(parts: IndexParts) -> dict[str, Any]:
    run = parts.runner.stats.of("pixels")
    failed = parts.pixels.failed if parts.pixels is not None else []
    rate = run["photos_per_s"]
    return {"photos": run["photos"], "seconds": round(run["seconds"], 2),
            "images_per_s": round(rate, 1) if rate else None, "unreadable": len(failed)}
