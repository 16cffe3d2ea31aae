"""The library service: one index as a photo library, for the web routes and the CLI commands alike.

:class:`LibraryService` answers every photo-library operation with typed values (:mod:`imagent.library.types`, the
people dataclasses of :mod:`imagent.index.people`, the duplicate groups of :mod:`imagent.index.duplicates`):

- photos: a photo's bytes only while its file is the one indexed (:mod:`imagent.library.files`), a card, one photo
  with its neighbours, the library a page at a time newest first with its months and days, thumbnails;
- people: the groups, one group, name, merge, split, remove a face, forget all face data, face crops (all of a
  photo's faces cut from one reduced decode; none outlives its face);
- duplicates: the groups of copies and near-duplicates.

The service reads the index as it is now: when a build committed since (a newer generation), the next call reopens
it (:meth:`imagent.api.Workspace.gallery` with ``fresh``), so ``imagent serve`` shows what ``imagent index`` just
added without a restart. Each call reads one gallery object from start to end.

Errors are typed too, so each shell says them its own way (the web as HTTP statuses, the CLI as one line):
:class:`UnknownPhoto`, :class:`~imagent.library.files.PhotoGone` (not found), :class:`~imagent.library.files.
PhotoChanged`, :class:`CannotShow` (conflict), :class:`~imagent.library.days.PageError`,
:class:`~imagent.tools.filter_lang.FilterError`, :class:`~imagent.index.people.PeopleError` (bad request),
:class:`~imagent.index.people.UnknownPeople`, :class:`~imagent.index.face_store.FaceDataMissing` (not found).
"""

from __future__ import annotations

import io
import mimetypes
import os
import threading
from pathlib import Path
from typing import Any

from imagent.api import Workspace, card_labels, record_place, shown_labels
from imagent.core.imageio import ImageLoadError
from imagent.core.text import clean_text, display_path
from imagent.core.types import ImageRecord
from imagent.index.duplicates import Group
from imagent.index.face_store import FACE_THUMBS, face_crop_key
from imagent.index.gallery import Gallery
from imagent.index.people import (
    FaceRemoved,
    Forgotten,
    Merged,
    Moved,
    Person,
    Renamed,
    ScanSummary,
    UnknownPeople,
    existing_faces,
    face_of,
    faces_in_photo,
    forget,
    get_person,
    list_people,
    merge_people,
    name_person,
    people_index,
    remove_face,
    scan_summary,
    split_face,
)
from imagent.library.days import LibraryOrder, PageError, folder_of, library_name, page_number, per_page_number
from imagent.library.files import check_unchanged, read_indexed_file
from imagent.library.thumbs import (
    THUMB_DIR,
    THUMB_SIZES,
    ThumbnailCache,
    crop_digest,
    crop_faces,
    render_thumbnail,
    thumbnail_key,
)
from imagent.library.types import (
    Label,
    LibraryInfo,
    LibraryPage,
    MonthPage,
    PersonRef,
    PhotoCard,
    PhotoDetail,
    PhotoFile,
    TextLine,
)
from imagent.tools.photo_search import empty_hint, where_rows

MAX_FACE_CROP = 512


class UnknownPhoto(LookupError):
    """An id the index does not hold (never used as a path)."""


class CannotShow(Exception):
    """The photo's file is the one indexed but cannot be decoded for display (a thumbnail, a face crop, a HEIC)."""


def text_lines(rec: ImageRecord) -> list[TextLine]:
    """The lines of text read in the photo (``ImageRecord.text_lines``), cleaned for showing, with their boxes."""
    return [TextLine(clean_text(str(x.get("text", ""))), [[float(v) for v in corner] for corner in x.get("box", [])],
                     float(x.get("confidence", 0.0))) for x in rec.text_lines]


def photo_card(rec: ImageRecord, gallery: Gallery | None = None) -> PhotoCard:
    """``rec`` as a grid or result list shows it: its labels (what the pixel model saw, best first, above
    ``pixels.label_show_p``: :func:`imagent.api.card_labels`) and people (the face groups in it) when ``gallery`` is
    given; the path and file name through :func:`display_path`."""
    labels = card_labels(rec, gallery) if gallery is not None else shown_labels(rec)
    people = people_index(gallery).people_of(rec.id) if gallery is not None else []
    return PhotoCard(id=rec.id, caption=clean_text(rec.caption), path=display_path(rec.path) if rec.path else "",
                     file=display_path(Path(rec.path).name) if rec.path else rec.id,
                     taken=rec.taken_time.isoformat() if rec.taken_time else None, place=record_place(rec),
                     labels=[Label(x["name"], x["p"]) for x in labels],
                     people=[PersonRef(p["id"], p["name"]) for p in people])


def record_json(rec: ImageRecord) -> dict[str, Any]:
    """A record's fields as JSON-safe data: its path shown through :func:`display_path`, every other text cleaned
    of lone surrogates (:func:`clean_text`)."""

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return clean_text(value)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    data = clean(rec.to_dict())
    if rec.path:
        data["path"] = display_path(rec.path)
    return {**data, "place": record_place(rec)}


class LibraryService:
    """The photo library of ``workspace``'s index at ``index`` (the configured one by default); a missing index fails
    here. Thread-safe: the web server calls it from many threads."""

    def __init__(self, workspace: Workspace, index: str | Path | None = None) -> None:
        self.workspace = workspace
        self.index = index
        self.settings = workspace.settings
        self._lock = threading.Lock()
        root = workspace.gallery(index).root
        workers = min(4, os.cpu_count() or 1)
        self.thumbnails = ThumbnailCache(root / THUMB_DIR, workers=workers)
        self.face_crops = ThumbnailCache(root / FACE_THUMBS, workers=workers)
        self._order: tuple[list[str], LibraryOrder] | None = None
        self._fingerprints: tuple[int, int, dict[str, str]] | None = None
        self._photo_locks: dict[str, threading.Lock] = {}

    # ------------------------------------------------------------------ the index now

    @property
    def gallery(self) -> Gallery:
        """The index as it is now (reopened when a build committed since it was opened)."""
        with self._lock:
            return self.workspace.gallery(self.index, fresh=True)

    @property
    def generation(self) -> int:
        """The build generation the service serves."""
        return self.gallery.loaded_generation

    def _order_of(self, g: Gallery) -> LibraryOrder:
        with self._lock:
            if self._order is None or self._order[0] is not g.ids:
                self._order = (g.ids, LibraryOrder(g))
            return self._order[1]

    def _fingerprint(self, g: Gallery, image_id: str) -> str | None:
        with self._lock:
            if self._fingerprints is None or self._fingerprints[:2] != (id(g), g.loaded_generation):
                self._fingerprints = (id(g), g.loaded_generation, dict(g.fingerprints().values()))
            return self._fingerprints[2].get(image_id)

    def _min_group(self) -> int:
        return self.settings.faces.min_group

    # ------------------------------------------------------------------ photos

    def record(self, image_id: str, g: Gallery | None = None) -> ImageRecord:
        g = g or self.gallery
        if not isinstance(image_id, str) or image_id not in g:
            raise UnknownPhoto(f"no photo {clean_text(str(image_id))[:200]!r} in the library")
        return g.record(image_id)

    def card(self, image_id: str) -> PhotoCard:
        g = self.gallery
        return photo_card(self.record(image_id, g), g)

    def record_data(self, image_id: str) -> dict[str, Any]:
        """A photo's record (caption, metadata, labels) as JSON-safe data (:func:`record_json`)."""
        return record_json(self.record(image_id))

    def photo(self, image_id: str) -> PhotoDetail:
        """One photo: its card, folder, camera, coordinates, size, captions, and its neighbours in the library."""
        g = self.gallery
        rec = self.record(image_id, g)
        lib = self._order_of(g)
        at = int(lib.position[g.row(image_id)])
        near = [g.ids[int(lib.rows[at + s])] if 0 <= at + s < len(lib.rows) else None for s in (-1, 1)]
        return PhotoDetail(**vars(photo_card(rec, g)), folder=folder_of(rec, g.sources()),
                           device=clean_text(rec.device) if rec.device else rec.device, latitude=rec.latitude,
                           longitude=rec.longitude, width=rec.width, height=rec.height,
                           captions=[clean_text(c) for c in rec.captions], caption_source=rec.caption_source,
                           text_lines=text_lines(rec), position=at, total=len(lib.rows), previous=near[0], next=near[1])

    def page(self, page: str | None = None, per_page: str | None = None, where: str | None = None) -> LibraryPage:
        """One page of the library newest first (photos without a date last), or with ``where`` of a filter's
        matches oldest first. :class:`PageError` or :class:`FilterError` when the page or filter is wrong."""
        g = self.gallery
        size = per_page_number(per_page)
        lib = self._order_of(g)
        rows = where_rows(g, where) if where is not None else lib.rows
        pages = -(-len(rows) // size)
        n = page_number(page, pages)
        photos = [photo_card(g.record(i), g) for i in g.id_array[rows[n * size:(n + 1) * size]].tolist()]
        shown_days = {p.taken[:10] for p in photos if p.taken}
        months = None if where is not None else [MonthPage(m.month, m.count, m.first // size) for m in lib.months]
        return LibraryPage(LibraryInfo(library_name(g), len(g), lib.undated), total=len(rows), page=n, pages=pages,
                           per_page=size, photos=photos,
                           days={d: lib.days.get(d, 0) for d in sorted(shown_days, reverse=True)}, where=where,
                           order="oldest first" if where is not None else "newest first", months=months,
                           hint=empty_hint(g, where) if where is not None and not rows.size else None)

    def photo_bytes(self, image_id: str) -> bytes:
        """A photo's file exactly as indexed (:func:`read_indexed_file`: gone or changed since is refused)."""
        g = self.gallery
        rec = self.record(image_id, g)
        return read_indexed_file(rec, self._fingerprint(g, image_id), self.settings.indexing.max_file_bytes)

    def photo_file(self, image_id: str) -> PhotoFile:
        """:meth:`photo_bytes` with its media type, as a browser can show it (a HEIC/HEIF photo as a JPEG)."""
        rec = self.record(image_id)
        data = self.photo_bytes(image_id)
        media = mimetypes.guess_type(rec.path)[0] or "application/octet-stream"
        if media in ("image/heic", "image/heif") or rec.path.lower().endswith((".heic", ".heif", ".hif")):
            from imagent.core.imageio import image_from_bytes

            try:
                im = image_from_bytes(data, self.settings.indexing.max_pixels)
            except ImageLoadError as exc:
                raise CannotShow(f"the photo cannot be decoded for display ({exc})") from None
            out = io.BytesIO()
            im.save(out, "JPEG", quality=90)
            return PhotoFile(out.getvalue(), "image/jpeg")
        return PhotoFile(data, media)

    def thumbnail(self, image_id: str, size: int) -> bytes:
        """A JPEG of at most ``size`` (one of :data:`THUMB_SIZES`) pixels a side that keeps the photo's shape, made
        once and kept in ``<index>/thumbnails``; a kept one is served only while the file is the one indexed."""
        if size not in THUMB_SIZES:
            raise PageError(f"thumbnail size must be one of {', '.join(map(str, THUMB_SIZES))}")
        g = self.gallery
        rec = self.record(image_id, g)
        fingerprint = self._fingerprint(g, image_id)
        key = thumbnail_key(rec, fingerprint)
        data = self.thumbnails.get(key, size)
        if data is not None:
            check_unchanged(rec, fingerprint)
            return data
        limits = self.settings.indexing
        try:
            return self.thumbnails.make(key, size, lambda: render_thumbnail(
                read_indexed_file(rec, fingerprint, limits.max_file_bytes), size, limits.max_pixels))
        except ImageLoadError as exc:
            raise CannotShow(f"the photo cannot be decoded for display ({exc})") from None

    # ------------------------------------------------------------------ people

    def people(self) -> tuple[list[Person], ScanSummary]:
        """Every group (the larger first, tiny ones last) and the counts of the face data."""
        g = self.gallery
        return list_people(g, self._min_group()), scan_summary(g)

    def person(self, ref: int | str) -> Person:
        """One group by id (``7``, ``#7``) or name."""
        g = self.gallery
        p = get_person(g, ref)
        p.tiny = len(p.faces) < self._min_group()
        return p

    def name(self, person: int, name: str | None) -> Renamed:
        return name_person(self.gallery, person, name)

    def merge(self, into: int, others: list[int]) -> Merged:
        return merge_people(self.gallery, into, others)

    def split(self, face: int, to: int | None = None) -> Moved:
        return split_face(self.gallery, face, to)

    def remove_face(self, face: int) -> FaceRemoved:
        return remove_face(self.gallery, face)

    def forget(self) -> Forgotten:
        return forget(self.gallery)

    def face_crop(self, face_id: int, size: int = 160) -> bytes:
        """A square JPEG of at most ``size`` px around one face, out of its photo's file as :meth:`photo_bytes`
        reads it. On a miss every face of that photo is cut from one reduced decode and kept in
        ``<index>/face-thumbnails``; a kept crop is served after the file's size and time are checked."""
        size = max(32, min(int(size), MAX_FACE_CROP))
        g = self.gallery
        face = face_of(g, face_id)
        rec = g.record(face.photo)
        fingerprint = self._fingerprint(g, face.photo)
        key = face_crop_key(face.id, crop_digest(rec, face.box))
        hit = self.face_crops.get(key, size)
        if hit is None:
            with self._photo_lock(face.photo):
                hit = self.face_crops.get(key, size) or self._cut_faces(g, rec, fingerprint, size).get(key)
            if hit is None:  # removed (or forgotten) while it was being cut
                raise UnknownPeople(f"no face {face.id} in this index")
        check_unchanged(rec, fingerprint)  # a kept crop, but only of a file still indexed
        return hit

    def _photo_lock(self, photo: str) -> threading.Lock:
        with self._lock:
            return self._photo_locks.setdefault(photo, threading.Lock())

    def _cut_faces(self, g: Gallery, rec: ImageRecord, fingerprint: str | None, size: int) -> dict[str, bytes]:
        faces = faces_in_photo(g, rec.id)
        keys = {face_crop_key(f.id, crop_digest(rec, f.box)): f.id for f in faces}
        limits = self.settings.indexing
        data = read_indexed_file(rec, fingerprint, limits.max_file_bytes)

        def keep() -> set[str]:  # asked after the crops are on disk: a face gone meanwhile loses its crop again
            alive = existing_faces(g, list(keys.values()))
            return {k for k, fid in keys.items() if fid in alive}

        try:
            return self.face_crops.make_many(size, list(keys), lambda: crop_faces(data, [f.box for f in faces], size,
                                                                                  limits.max_pixels), keep)
        except ImageLoadError as exc:
            raise CannotShow(f"the photo cannot be decoded for its face crops ({exc})") from None

    # ------------------------------------------------------------------ duplicates

    def duplicates(self) -> list[Group]:
        """Groups of exact copies and near-duplicates (nothing is changed)."""
        _ = self.gallery  # the index as it is now
        return self.workspace.duplicate_groups(self.index)


__all__ = ["CannotShow", "LibraryService", "UnknownPhoto", "photo_card", "record_json"]
