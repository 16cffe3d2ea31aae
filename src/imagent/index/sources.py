"""Reading a source: a folder scanned for images, or a manifest (``.json``, ``.jsonl``, ``.csv``) of rows.

:func:`read_source` turns a source into :class:`Source`: one :class:`SourceItem` per input, each with its
*source key* (what identifies it across runs), its absolute path and, for a manifest row, its checked values
(:class:`RowFields`: :class:`~imagent.core.types.ImageRecord`'s own field names, so a field added to the record
needs no second list here). Nothing here opens an image or touches the index: the builder
(:mod:`imagent.index.builder`) does that. A row with unusable values becomes an item with an ``error`` (skipped
with that reason); a source that cannot be read at all raises :class:`SourceError`.

Manifest columns: ``file`` or ``path`` (relative to the manifest's folder, or absolute), ``id``,
``caption``/``captions``, ``taken_time``, ``latitude``/``longitude``, ``address``, ``tags``; any other column is
kept in ``record.extra``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from imagent.core.cache import stable_key
from imagent.core.imageio import is_image_name, parse_exif_datetime
from imagent.core.text import clean_text, display_path
from imagent.core.types import ImageRecord

__all__ = ["KNOWN_COLUMNS", "MANIFEST_SUFFIXES", "RowFields", "Source", "SourceError", "SourceItem", "abspath",
           "given", "parse_time", "read_rows", "read_source"]

MANIFEST_SUFFIXES = (".json", ".jsonl", ".csv")
RECORD_FIELDS = frozenset(f.name for f in fields(ImageRecord))


def _id(value: Any, is_csv: bool) -> str:
    if isinstance(value, (dict, list, bool)):
        raise ValueError(f"bad id {value!r}")
    return str(value).strip()


def _text_column(value: Any, is_csv: bool) -> str:
    return str(value).strip()


# A manifest column that fills the ImageRecord field of its name, with its parser (``ValueError``: a bad value).
# Adding a field a manifest may give is one line here; ``caption``/``captions`` and ``latitude``/``longitude``
# (read together) are in :func:`_parse_row`.
COLUMNS: dict[str, Callable[[Any, bool], Any]] = {
    "id": _id,
    "taken_time": lambda value, is_csv: parse_time(value),
    "address": _text_column,
    "tags": lambda value, is_csv: _text_list(value, ","),
}
assert set(COLUMNS) <= RECORD_FIELDS
# Columns with a meaning; every other column goes to ``record.extra``.
KNOWN_COLUMNS = frozenset({"file", "path", "caption", "captions", "latitude", "longitude", *COLUMNS})


class SourceError(ValueError):
    """The source as a whole is unusable (missing, unknown kind, manifest that does not parse)."""




@dataclass
class RowFields:
    """A manifest row's values, checked and normalised: ``given`` maps :class:`ImageRecord` field names to the
    values the row gives (only those; ``extra`` always: the row's other columns). The record built from the row
    takes them over the file's own (:func:`imagent.index.records.make_record`)."""

    given: dict[str, Any] = field(default_factory=lambda: {"extra": {}})

    def __post_init__(self) -> None:
        unknown = set(self.given) - RECORD_FIELDS
        if unknown:
            raise ValueError(f"not ImageRecord fields: {sorted(unknown)}")

    @property
    def id(self) -> str | None:
        return self.given.get("id")

    @property
    def captions(self) -> list[str]:
        return list(self.given.get("captions", []))

    def digest(self) -> str:
        """What the row says, as a key (part of the input's fingerprint in the index). The fields manifests
        gave before ``given`` existed hash as they did then, so an index built earlier sees its rows unchanged;
        a field given since is hashed after them."""
        g = self.given
        t = g.get("taken_time")
        first = (g.get("id"), g.get("captions", []), t.isoformat() if t else None, g.get("latitude"),
                 g.get("longitude"), g.get("address"), g.get("tags", []), g.get("extra", {}), "taken_time" in g,
                 "latitude" in g)
        later = {k: v for k, v in g.items() if k not in _FIRST_FIELDS}
        return stable_key(*first, *([later] if later else []))


_FIRST_FIELDS = frozenset({"id", "captions", "taken_time", "latitude", "longitude", "address", "tags", "extra"})


@dataclass
class SourceItem:
    key: str  # source key: what identifies this input across runs
    path: str  # absolute file path ("" when a manifest row names none)
    display: str  # what the report shows
    row: RowFields | None = None
    error: str | None = None  # found while reading the source: skip with this reason


@dataclass
class Source:
    items: list[SourceItem]
    scope: str  # every source key of this source starts with it (removals stay inside)
    root: str | None = None  # the folder whose sub-folder names describe the images (derived text)
    warnings: list[str] = field(default_factory=list)


def abspath(p: str | Path) -> str:
    return os.path.abspath(os.path.expanduser(str(p)))


def _scan_folder(root: Path, exclude: Path | None) -> Source:
    root_abs = abspath(root)
    exclude_abs = abspath(exclude) if exclude is not None else None
    found: list[str] = []
    unlistable: list[SourceItem] = []

    def walk_error(exc: OSError) -> None:
        # os.walk skips a folder it cannot list; say so instead of silently indexing less.
        where = abspath(exc.filename) if exc.filename else root_abs
        reason = f"cannot list folder: {exc.strerror or exc}"
        key = f"file:{where.rstrip(os.sep)}{os.sep}"  # inside this source's scope, so it is forgotten later
        unlistable.append(SourceItem(key=key, path=where, display=display_path(where), error=reason))

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
    items = [SourceItem(key=f"file:{p}", path=p, display=display_path(p)) for p in found] + unlistable
    return Source(items, f"file:{root_abs.rstrip(os.sep)}{os.sep}", root=root_abs)


Rows = list[tuple[str, dict[str, Any] | None, str | None]]


def read_rows(manifest: Path, warnings: list[str] | None = None) -> Rows:
    """(where, raw row or None, error) for every row; ``where`` is ``line N`` (JSONL, CSV: the line
    in the file) or ``row N`` (JSON: the 1-based position in the list).

    Bytes that are not UTF-8 are kept as surrogate escapes (``errors="surrogateescape"``): a file name
    written in Latin-1 then still names the file on disk, and text gets U+FFFD (see :func:`_clean_row`)."""
    suffix = manifest.suffix.lower()
    try:
        text = manifest.read_bytes().decode("utf-8-sig", "surrogateescape")
    except OSError as exc:
        raise SourceError(f"cannot read manifest {display_path(manifest)}: {exc.strerror or exc}") from None
    if warnings is not None and clean_text(text) is not text:
        warnings.append(f"{display_path(manifest)} is not valid UTF-8: undecodable bytes in text were replaced "
                        "by \ufffd (file names keep their bytes)")
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


def given(value: Any) -> bool:
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


def _parse_row(raw: dict[str, Any], is_csv: bool) -> RowFields:
    """Checked fields of one row; ``ValueError`` says what is wrong with it."""
    values: dict[str, Any] = {}
    for name, parse in COLUMNS.items():
        if given(raw.get(name)):
            values[name] = parse(raw[name], is_csv)
    caps: list[str] = []
    if given(raw.get("caption")):
        caps += _text_list(raw["caption"], None)
    if given(raw.get("captions")):
        caps += _text_list(raw["captions"], "|" if is_csv else None)
    if caps:
        values["captions"] = list(dict.fromkeys(caps))  # drop repeats, keep order
    has_lat, has_lon = given(raw.get("latitude")), given(raw.get("longitude"))
    if has_lat != has_lon:
        raise ValueError("latitude and longitude must be given together")
    if has_lat:
        values["latitude"] = _coordinate("latitude", raw["latitude"], 90.0)
        values["longitude"] = _coordinate("longitude", raw["longitude"], 180.0)
    values["extra"] = {str(k): v for k, v in raw.items() if k not in KNOWN_COLUMNS}
    return RowFields(values)


def _clean_value(value: Any) -> Any:
    """Text in a row with lone surrogates replaced (:func:`clean_text`), recursively."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_value(v) for k, v in value.items()}
    return value


def _clean_row(raw: dict[str, Any]) -> dict[str, Any]:
    """Every value cleaned except the file name, which must keep its exact (surrogate-escaped) bytes."""
    return {clean_text(str(k)): (v if k in ("file", "path") else _clean_value(v)) for k, v in raw.items()}


def _read_manifest(manifest: Path) -> Source:
    man_abs = abspath(manifest)
    base = os.path.dirname(man_abs)
    prefix = f"manifest:{man_abs}#"
    is_csv = manifest.suffix.lower() == ".csv"
    shown = display_path(manifest)
    items: list[SourceItem] = []
    first_id: dict[str, str] = {}
    first_file: dict[str, str] = {}
    warnings: list[str] = []
    for where, raw, error in read_rows(manifest, warnings):
        bad_key = f"{prefix}{where}"
        if raw is None:
            items.append(SourceItem(key=bad_key, path="", display=f"{shown} ({where})", error=f"{where}: {error}"))
            continue
        raw = _clean_row(raw)
        name = raw.get("file") if given(raw.get("file")) else raw.get("path")
        if not isinstance(name, str) or not name.strip():
            items.append(SourceItem(key=bad_key, path="", display=f"{shown} ({where})",
                               error=f"{where}: no 'file' or 'path' column"))
            continue
        path = abspath(os.path.join(base, name.strip()))  # join keeps an absolute name as it is
        try:
            row = _parse_row(raw, is_csv)
        except ValueError as exc:
            items.append(SourceItem(key=bad_key, path=path, display=display_path(path), error=f"{where}: {exc}"))
            continue
        if row.id is not None:
            key = f"{prefix}id:{row.id}"
            if row.id in first_id:
                items.append(SourceItem(key=bad_key, path=path, display=display_path(path),
                                   error=f"{where}: duplicate id {row.id!r} (first on {first_id[row.id]})"))
                continue
            first_id[row.id] = where
        else:
            key = f"{prefix}file:{path}"
            if path in first_file:
                items.append(SourceItem(key=bad_key, path=path, display=display_path(path),
                                   error=f"{where}: the same file as {first_file[path]}"))
                continue
        first_file.setdefault(path, where)
        items.append(SourceItem(key=key, path=path, display=display_path(path), row=row))
    return Source(items, prefix, root=base, warnings=warnings)


def read_source(source: str | Path, exclude: Path | None = None) -> Source:
    src = Path(source).expanduser()
    if src.is_dir():
        return _scan_folder(src, exclude)
    if src.is_file():
        if src.suffix.lower() in MANIFEST_SUFFIXES:
            return _read_manifest(src)
        raise SourceError(f"{display_path(src)} is neither a folder nor a manifest ({', '.join(MANIFEST_SUFFIXES)})")
    raise SourceError(f"no such file or folder: {display_path(src)}")
