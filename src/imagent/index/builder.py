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
    with :meth:`Gallery.mark_skipped`. One bad file never stops a build.

``imagent index SOURCE`` runs it with the configured encoders and a progress bar.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from imagent.core.cache import stable_key
from imagent.core.config import IndexOptions
from imagent.core.hashing import short_id
from imagent.core.imageio import (
    IMAGE_EXTENSIONS,
    FileProbe,
    ImageLoadError,
    check_file,
    is_image_name,
    parse_exif_datetime,
    probe_file,
)
from imagent.core.types import ImageRecord
from imagent.index.embedding import PendingRecord, add_records, space_models
from imagent.index.gallery import Gallery, GalleryError
from imagent.models.base import DualEncoder, ImagePart, Message, TextEmbedder

__all__ = [
    "IMAGE_EXTENSIONS",
    "IndexReport",
    "SourceError",
    "build_index",
    "record_for_file",
]

Progress = Callable[[int, int, str], None]

MANIFEST_SUFFIXES = (".json", ".jsonl", ".csv")
# Columns with a meaning; every other column goes to ``record.extra``.
KNOWN_COLUMNS = frozenset(
    {"file", "path", "id", "caption", "captions", "taken_time", "latitude", "longitude", "address", "tags"}
)
CAPTION_PROMPT = (
    "Describe this image in one factual sentence: the main subject, what it is doing and the setting. "
    "Reply with the sentence only."
)
_MAX_CAPTION_WARNINGS = 5


class SourceError(ValueError):
    """The source as a whole is unusable (missing, unknown kind, manifest that does not parse)."""


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "seconds": round(self.seconds, 3),
            "total": self.total,
            "captioned": self.captioned,
            "warnings": list(self.warnings),
        }


# --------------------------------------------------------------------------- inputs


@dataclass
class _RowFields:
    """A manifest row's values, checked and normalised."""

    id: str | None = None
    captions: list[str] = field(default_factory=list)
    taken_time: datetime | None = None
    latitude: float | None = None
    longitude: float | None = None
    address: str | None = None
    tags: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    has_time: bool = False
    has_position: bool = False

    def digest(self) -> str:
        return stable_key(
            self.id, self.captions, self.taken_time.isoformat() if self.taken_time else None,
            self.latitude, self.longitude, self.address, self.tags, self.extra, self.has_time, self.has_position,
        )


@dataclass
class _Item:
    key: str  # source key: what identifies this input across runs
    path: str  # absolute file path ("" when a manifest row names none)
    display: str  # what the report shows
    row: _RowFields | None = None
    error: str | None = None  # found while reading the source: skip with this reason


@dataclass
class _Source:
    items: list[_Item]
    scope: str  # every source key of this source starts with it (removals stay inside)


def _abspath(p: str | Path) -> str:
    return os.path.abspath(os.path.expanduser(str(p)))


def _scan_folder(root: Path, exclude: Path | None) -> _Source:
    root_abs = _abspath(root)
    exclude_abs = _abspath(exclude) if exclude is not None else None
    found: list[str] = []
    unlistable: list[_Item] = []

    def walk_error(exc: OSError) -> None:
        # os.walk skips a folder it cannot list; say so instead of silently indexing less.
        where = _abspath(exc.filename) if exc.filename else root_abs
        reason = f"cannot list folder: {exc.strerror or exc}"
        key = f"file:{where.rstrip(os.sep)}{os.sep}"  # inside this source's scope, so it is forgotten later
        unlistable.append(_Item(key=key, path=where, display=where, error=reason))

    for dirpath, dirnames, filenames in os.walk(root_abs, followlinks=False, onerror=walk_error):
        kept = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if d.startswith(".") or full == exclude_abs:
                continue
            if is_image_name(d):
                found.append(full)  # a folder named like an image: reported, not silently ignored
            if not os.path.islink(full):
                kept.append(d)
        dirnames[:] = kept  # os.walk descends into what is left here
        # Hidden files are thumbnails, AppleDouble "._x.jpg" resource forks and the like, not photos.
        found.extend(os.path.join(dirpath, f) for f in filenames if not f.startswith(".") and is_image_name(f))
    found.sort()
    items = [_Item(key=f"file:{p}", path=p, display=p) for p in found] + unlistable
    return _Source(items, f"file:{root_abs.rstrip(os.sep)}{os.sep}")


def _read_rows(manifest: Path) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    """(where, raw row or None, error) for every row; ``where`` is ``line N`` (JSONL, CSV: the line
    in the file) or ``row N`` (JSON: the 1-based position in the list)."""
    suffix = manifest.suffix.lower()
    try:
        text = manifest.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"cannot read manifest {manifest}: {exc}") from None
    out: list[tuple[str, dict[str, Any] | None, str | None]] = []
    if suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                out.append((f"line {n}", None, f"invalid JSON ({exc.msg})"))
                continue
            out.append((f"line {n}", row, None) if isinstance(row, dict) else (f"line {n}", None, "not a JSON object"))
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SourceError(f"manifest {manifest} is not valid JSON: {exc}") from None
        if isinstance(data, dict):
            data = next((data[k] for k in ("images", "records", "rows") if isinstance(data.get(k), list)), None)
        if not isinstance(data, list):
            raise SourceError(f"manifest {manifest} must hold a JSON list of rows (or {{\"images\": [...]}})")
        for n, row in enumerate(data, 1):
            out.append((f"row {n}", row, None) if isinstance(row, dict) else (f"row {n}", None, "not a JSON object"))
    elif suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames:
            raise SourceError(f"manifest {manifest} has no header row")
        try:
            for row in reader:
                # Cells past the header land under the None key; empty cells mean "not given".
                cells = {k.strip(): v for k, v in row.items() if k is not None and v not in (None, "")}
                out.append((f"line {reader.line_num}", cells, None))
        except csv.Error as exc:
            raise SourceError(f"manifest {manifest}: line {reader.line_num}: {exc}") from None
    else:
        raise SourceError(f"unknown manifest type {manifest.suffix!r}; use .json, .jsonl or .csv")
    return out


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _text_list(value: Any, sep: str | None) -> list[str]:
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value if v is not None]
    elif sep is not None:
        items = str(value).split(sep)
    else:
        items = [str(value)]
    return [s.strip() for s in items if s.strip()]


def parse_time(value: Any) -> datetime:
    """ISO 8601 (``2021-06-01T12:00:00``, ``...Z``, ``2021-06-01 12:00:00``, ``2021-06-01``) or
    EXIF style (``2021:06:01 12:00:00``). Raises ``ValueError`` otherwise."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            parsed = parse_exif_datetime(text)
            if parsed is not None:
                return parsed
    raise ValueError(f"bad taken_time {value!r} (use ISO 8601, e.g. 2021-06-01 12:00:00)")


def _coordinate(name: str, value: Any, limit: float) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        x = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError(f"bad {name} {value!r} (not a number)") from None
    if not math.isfinite(x) or abs(x) > limit:
        raise ValueError(f"bad {name} {value!r} (out of range -{limit:g}..{limit:g})")
    return x


def _parse_row(raw: dict[str, Any], is_csv: bool) -> _RowFields:
    """Checked fields of one row; ``ValueError`` says what is wrong with it."""
    f = _RowFields()
    if _given(raw.get("id")):
        if isinstance(raw["id"], (dict, list, bool)):
            raise ValueError(f"bad id {raw['id']!r}")
        f.id = str(raw["id"]).strip()
    caps: list[str] = []
    if _given(raw.get("caption")):
        caps += _text_list(raw["caption"], None)
    if _given(raw.get("captions")):
        caps += _text_list(raw["captions"], "|" if is_csv else None)
    f.captions = list(dict.fromkeys(caps))  # drop repeats, keep order
    if _given(raw.get("taken_time")):
        f.taken_time = parse_time(raw["taken_time"])
        f.has_time = True
    has_lat, has_lon = _given(raw.get("latitude")), _given(raw.get("longitude"))
    if has_lat != has_lon:
        raise ValueError("latitude and longitude must be given together")
    if has_lat:
        f.latitude = _coordinate("latitude", raw["latitude"], 90.0)
        f.longitude = _coordinate("longitude", raw["longitude"], 180.0)
        f.has_position = True
    if _given(raw.get("address")):
        f.address = str(raw["address"]).strip()
    if _given(raw.get("tags")):
        f.tags = _text_list(raw["tags"], ",")
    f.extra = {str(k): v for k, v in raw.items() if k not in KNOWN_COLUMNS}
    return f


def _read_manifest(manifest: Path) -> _Source:
    man_abs = _abspath(manifest)
    base = os.path.dirname(man_abs)
    prefix = f"manifest:{man_abs}#"
    is_csv = manifest.suffix.lower() == ".csv"
    items: list[_Item] = []
    first_id: dict[str, str] = {}
    first_file: dict[str, str] = {}
    for where, raw, error in _read_rows(manifest):
        bad_key = f"{prefix}{where}"
        if raw is None:
            items.append(_Item(key=bad_key, path="", display=f"{manifest} ({where})", error=f"{where}: {error}"))
            continue
        name = raw.get("file") if _given(raw.get("file")) else raw.get("path")
        if not isinstance(name, str) or not name.strip():
            items.append(_Item(key=bad_key, path="", display=f"{manifest} ({where})",
                               error=f"{where}: no 'file' or 'path' column"))
            continue
        path = _abspath(os.path.join(base, name.strip()))  # join keeps an absolute name as it is
        try:
            row = _parse_row(raw, is_csv)
        except ValueError as exc:
            items.append(_Item(key=bad_key, path=path, display=path, error=f"{where}: {exc}"))
            continue
        if row.id is not None:
            key = f"{prefix}id:{row.id}"
            if row.id in first_id:
                items.append(_Item(key=bad_key, path=path, display=path,
                                   error=f"{where}: duplicate id {row.id!r} (first on {first_id[row.id]})"))
                continue
            first_id[row.id] = where
        else:
            key = f"{prefix}file:{path}"
            if path in first_file:
                items.append(_Item(key=bad_key, path=path, display=path,
                                   error=f"{where}: the same file as {first_file[path]}"))
                continue
        first_file.setdefault(path, where)
        items.append(_Item(key=key, path=path, display=path, row=row))
    return _Source(items, prefix)


def read_source(source: str | Path, exclude: Path | None = None) -> _Source:
    src = Path(source).expanduser()
    if src.is_dir():
        return _scan_folder(src, exclude)
    if src.is_file():
        if src.suffix.lower() in MANIFEST_SUFFIXES:
            return _read_manifest(src)
        raise SourceError(f"{src} is neither a folder nor a manifest ({', '.join(MANIFEST_SUFFIXES)})")
    raise SourceError(f"no such file or folder: {src}")


# --------------------------------------------------------------------------- records


def _make_record(item: _Item, probe: FileProbe) -> ImageRecord:
    row = item.row or _RowFields()
    return ImageRecord(
        id=row.id or short_id(probe.content_hash),
        path=item.path,
        content_hash=probe.content_hash,
        captions=list(row.captions),
        taken_time=row.taken_time if row.has_time else probe.taken_time,
        latitude=row.latitude if row.has_position else probe.latitude,
        longitude=row.longitude if row.has_position else probe.longitude,
        address=row.address,
        tags=list(row.tags),
        width=probe.info.width,
        height=probe.info.height,
        extra=dict(row.extra),
    )


def record_for_file(path: str | Path, gallery: Gallery | None, options: IndexOptions | None = None) -> ImageRecord:
    """The gallery's record for this file's content if it has one, else a transient record.

    A transient record has the content-hash id, EXIF time and position, no caption. Raises
    :class:`ImageLoadError` (a ``ValueError``) with the reason when the file is not a usable image."""
    options = options or IndexOptions()
    p = _abspath(path)
    try:
        probe = probe_file(p, options.max_pixels, options.max_file_bytes)
    except ImageLoadError as exc:
        raise ImageLoadError(f"cannot use {path} as an image: {exc}") from None
    if gallery is not None:
        found = gallery.record_by_hash(probe.content_hash)
        if found is not None:
            return found
    return _make_record(_Item(key=f"file:{p}", path=p, display=p), probe)


# --------------------------------------------------------------------------- captioning


class _Captioner:
    """Captions captionless records with a chat role that sees images, if one is configured."""

    def __init__(self, role: Any, options: IndexOptions, report: IndexReport) -> None:
        self.role = role
        self.report = report
        self.failures = 0
        self.warned = False
        self.wanted = options.caption_missing
        self.active = bool(self.wanted and role is not None and not role.caption_mode)

    @property
    def model_id(self) -> str | None:
        return str(self.role.model.model_id) if self.active else None

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
                f"captioning skipped: role {self.role.name!r} ({self.role.model.model_id}) cannot see images, "
                "so there is nothing to caption from"
            )

    def caption(self, records: Sequence[ImageRecord]) -> list[bool]:
        """Caption records in place; returns which ones got a caption."""
        done = []
        for rec in records:
            text = ""
            try:
                reply = self.role.text([Message.user(CAPTION_PROMPT, ImagePart(record=rec))], max_tokens=60)
                text = _clean_caption(reply)
            except Exception as exc:  # a failing model costs this caption, not the build
                self.failures += 1
                if self.failures <= _MAX_CAPTION_WARNINGS:
                    self.report.warnings.append(f"captioning {rec.path} failed: {exc}")
            if text:
                rec.captions = [text]
                rec.extra["caption_source"] = self.model_id
                self.report.captioned += 1
            done.append(bool(text))
        return done


def _clean_caption(reply: str) -> str:
    line = next((ln.strip() for ln in (reply or "").splitlines() if ln.strip()), "")
    return line.strip("\"'` ").strip()


# --------------------------------------------------------------------------- the build


def _fingerprint(st: os.stat_result, item: _Item, captioner_id: str | None) -> str:
    meta = stable_key(item.path, item.row.digest() if item.row else None, captioner_id)[:16]
    return f"{st.st_size}:{st.st_mtime_ns}:{meta}"


def _check_spaces(gallery: Gallery, dual: DualEncoder | None, text: TextEmbedder | None) -> list[str]:
    """Refuse encoders that differ from the index's; return spaces the index does not have yet."""
    wanted = space_models(dual, text)
    if not wanted:
        raise ValueError("build_index needs a dual encoder or a text embedder")
    have = gallery.spaces()
    for space, (model_id, dim) in wanted.items():
        info = have.get(space)
        if info is not None and (info.model_id, info.dim) != (model_id, dim):
            raise GalleryError(
                f"index {gallery.root} holds {space!r} vectors from {info.model_id} (dim {info.dim}), but the "
                f"configured encoder is {model_id} (dim {dim}); use another --index or delete this one"
            )
    return [s for s in wanted if s not in have]


class _Build:
    def __init__(
        self,
        gallery: Gallery,
        dual: DualEncoder | None,
        text: TextEmbedder | None,
        options: IndexOptions,
        captioner: Any,
        report: IndexReport,
    ) -> None:
        self.g = gallery
        self.dual = dual
        self.text = text
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

    def run(self, source: _Source, progress: Progress | None, force: bool) -> None:
        items = source.items
        stored = self.g.fingerprints()  # source key -> (id, fingerprint)
        self.owner = {i: k for k, (i, _) in stored.items()}  # id -> source key holding it
        self.owner_path = {i: self.g.record(i).path for i in self.owner if i in self.g}
        current = {it.key for it in items}
        total = len(items)
        for n, item in enumerate(items, 1):
            self._one(item, stored, current, source.scope, force)
            if len(self.pending) >= self.options.batch_size:
                self._flush()
            if progress is not None:
                progress(n, total, item.display)
        self._flush()
        self._finish(source.scope)

    def _skip(self, item: _Item, reason: str) -> None:
        self.report.skipped.append((item.display, reason))
        self.skips.append((item.key, item.path or item.display, reason))
        self.skipped_keys.add(item.key)

    def _one(self, item: _Item, stored: dict[str, tuple[str, str]], current: set[str], scope: str,
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
        # The captioner takes part in the fingerprint of captionless inputs only, so turning
        # captioning on later re-reads exactly the images it can caption.
        fp = _fingerprint(st, item, self.captioner.model_id if captionless else None)
        previous = stored.get(item.key)
        if previous is not None and previous[1] == fp and not force:
            self.report.unchanged += 1
            self.ok_keys.add(item.key)
            return
        try:
            probe = probe_file(item.path, self.options.max_pixels, self.options.max_file_bytes)
        except ImageLoadError as exc:
            self._skip(item, str(exc))
            return
        record = _make_record(item, probe)
        holder = self.owner.get(record.id)
        # A holder that is an input of this source but gone from it (a renamed or moved file) is
        # not a conflict: the upsert below takes its record over, under this input's key.
        if holder is not None and holder != item.key and (holder in current or not holder.startswith(scope)):
            other = self.owner_path.get(record.id, holder)
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
        if captionless:
            if self.captioner.active:
                self.needs_caption.append((len(self.pending), _fingerprint(st, item, None)))
            else:
                self.captioner.note_captionless()
        self.pending.append(PendingRecord(record, item.key, fp))
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
            add_records(self.g, self.pending, self.dual, self.text)
        if self.skips:
            with self.g.transaction() as c:
                for key, path, reason in self.skips:
                    self.g.mark_skipped(c, key, path, reason)
        self.pending, self.needs_caption, self.replaced, self.skips = [], [], [], []

    def _finish(self, scope: str) -> None:
        # Read the keys again: upserts above may have moved a record to a new key (renames).
        fresh = self.g.fingerprints()
        stale = sorted({i for k, (i, _) in fresh.items() if k.startswith(scope) and k not in self.ok_keys})
        forget = [k for k in self.g.skipped_keys() if k.startswith(scope) and k not in self.skipped_keys]
        if stale or forget:
            with self.g.transaction() as c:
                self.g.remove(c, stale)
                self.g.forget_skipped(c, forget)
        self.report.removed = len(stale)


def build_index(
    source: str | Path,
    index_root: str | Path | Gallery,
    dual: DualEncoder | None,
    text: TextEmbedder | None,
    options: IndexOptions | None = None,
    captioner: Any = None,
    progress: Progress | None = None,
) -> IndexReport:
    """Index ``source`` (a folder or a manifest) into the gallery at ``index_root``; see the module doc.

    Raises :class:`SourceError` for an unusable source and :class:`GalleryError` when the index
    was built with other encoders; a bad image or row is skipped and reported, never raised."""
    t0 = time.perf_counter()
    options = options or IndexOptions()
    gallery = index_root if isinstance(index_root, Gallery) else Gallery(index_root, create=True)
    report = IndexReport()
    new_spaces = _check_spaces(gallery, dual, text)
    src = read_source(source, exclude=gallery.root)
    report.total = len(src.items)
    # Records stored before a space existed have no vectors in it: embed them all again.
    force = bool(new_spaces) and any(k.startswith(src.scope) for k in gallery.fingerprints())
    if force:
        report.warnings.append(f"the index gains space(s) {', '.join(new_spaces)}: every image is embedded again")
    _Build(gallery, dual, text, options, captioner, report).run(src, progress, force)
    if not gallery.snapshot_is_current():
        gallery.write_snapshot()
    else:
        gallery.reload()
    report.seconds = time.perf_counter() - t0
    return report
