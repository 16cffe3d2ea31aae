"""The photo app's routes: the library in pages, one photo with its neighbours, thumbnails cached on disk, the
route a plain-words query takes, the favicon, and the page's own addresses (``/photo/<id>``, ``/search``).

API (mounted by :func:`imagent.server.app.create_app`; the same Host, token and header rules as every route)
  ``GET /api/library?page=N&per_page=60``   the library newest first (photos without a date last), one page:
                                            ``{library, total, page, pages, per_page, photos, months, days}``;
                                            ``&where=EXPR`` the photos matching a filter instead, oldest first (the
                                            filter language of ``imagent search --where``)
  ``GET /api/photos/{id}``                  one photo: date and time, place and coordinates, camera, file name
                                            and folder, size, caption (and labels or people when the index has
                                            them), its previous and next photo in the library
  ``GET /api/thumbnails/{size}/{id}``       a JPEG of at most ``size`` pixels a side (``size`` in
                                            :data:`THUMB_SIZES`), made once and kept in ``<index>/thumbnails/``
  ``GET /api/route?text=...``               where a plain-words query goes (:func:`imagent.api.route_method`) and
                                            what the query reader understood of it (``&unlink=KEY``: an understood
                                            filter read as words)

Pages are numbered from 0; a page that is negative, not a number, or past the last page is a 400 with what is
allowed. Thumbnails are keyed by the photo's content hash and size, so an edited photo (indexed again) gets a new
one and a renamed one keeps its own; a thumbnail is served only for a record the index holds, after the same
checks as ``/api/images`` (a regular file, its size and modification time as indexed; its bytes hashed against
the index when the thumbnail is made), so a file replaced since indexing is a 409 until it is indexed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from imagent.api import Workspace, route_method
from imagent.core.types import ImageRecord
from imagent.index.gallery import Gallery
from imagent.tools.album import Album
from imagent.tools.filter_lang import FilterError
from imagent.tools.photo_search import where_rows

try:
    from fastapi import APIRouter, HTTPException, Query
    from fastapi.responses import HTMLResponse, Response
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI ({exc}); install it with: pip install \"imagent[web]\"") from exc

THUMB_SIZES = (320, 1600)  # grid cells (twice their CSS size), the photo view
PER_PAGE = 60
MAX_PER_PAGE = 200
THUMB_DIR = "thumbnails"


class PageError(ValueError):
    """A page or page size out of range, or not a number."""


def page_number(raw: str | None, pages: int) -> int:
    """``raw`` as a page of ``0 .. pages - 1`` (page 0 of an empty listing too), else :class:`PageError`."""
    text = (raw or "0").strip()
    if not text.isdigit() or not text.isascii():
        raise PageError(f"page must be a whole number from 0 to {max(pages - 1, 0)}, got {text[:40]!r}")
    page = int(text[:40])
    if page >= max(pages, 1):
        raise PageError(f"page {text[:40]} is past the last page ({max(pages - 1, 0)})")
    return page


def per_page_number(raw: str | None) -> int:
    text = (raw or str(PER_PAGE)).strip()
    if not text.isdigit() or not text.isascii() or not 1 <= int(text[:10]) <= MAX_PER_PAGE:
        raise PageError(f"per_page must be a whole number from 1 to {MAX_PER_PAGE}, got {text[:40]!r}")
    return int(text)


# --------------------------------------------------------------------------- the library's order


class LibraryOrder:
    """The gallery's rows newest first (photos without a date last, in the order indexed), with the month of each
    and the number of photos per day; built once per state of the index."""

    def __init__(self, gallery: Gallery) -> None:
        meta = Album(gallery).meta
        dated = meta.chrono[~np.isnan(meta.time[meta.chrono])][::-1]
        undated = np.flatnonzero(np.isnan(meta.time))
        self.rows = np.concatenate([dated, undated]).astype(np.int64)
        self.position = np.empty(len(self.rows), dtype=np.int64)
        self.position[self.rows] = np.arange(len(self.rows))
        seconds = meta.time[dated].astype("datetime64[s]")
        self.days = {str(d): int(n) for d, n in zip(*np.unique(seconds.astype("datetime64[D]"),
                                                              return_counts=True), strict=True)}
        months = seconds.astype("datetime64[M]").astype(str)
        self.months: list[dict[str, Any]] = []
        for i, month in enumerate(months):  # newest first, each with the position of its first photo
            if not self.months or self.months[-1]["month"] != month:
                self.months.append({"month": str(month), "count": 0, "first": i})
            self.months[-1]["count"] += 1
        self.undated = len(undated)


def library_name(gallery: Gallery) -> str:
    """What the library is called: its folders' (or manifests') names, never their paths on the server."""
    names = []
    for source in gallery.sources():
        p = Path(source)
        name = p.stem if p.suffix.lower() in (".json", ".jsonl", ".csv") else p.name
        if name and name not in names:
            names.append(name)
    return ", ".join(names) or gallery.root.name or "imagent"


def folder_of(record: ImageRecord, sources: list[str]) -> str:
    """The photo's folder as the library knows it: ``<library folder>/<subfolder>``, never the server's full path."""
    if not record.path:
        return ""
    path = Path(record.path)
    for source in sources:
        root = Path(source)
        base = root.parent if root.suffix.lower() in (".json", ".jsonl", ".csv") else root
        with contextlib.suppress(ValueError):
            rel = path.parent.relative_to(base)
            return str(Path(base.name) / rel) if str(rel) != "." else base.name
    return path.parent.name


# --------------------------------------------------------------------------- thumbnails


def thumbnail_key(record: ImageRecord, fingerprint: str | None) -> str:
    """The cache name of ``record``'s thumbnails: its content hash (else a hash of its id and fingerprint)."""
    if record.content_hash:
        return record.content_hash
    return hashlib.sha256(f"{record.id}\0{fingerprint or ''}\0{record.path}".encode("utf-8", "replace")).hexdigest()


def render_thumbnail(data: bytes, size: int, max_pixels: int) -> bytes:
    """``data`` (an image file's bytes) as a JPEG of at most ``size`` pixels a side, EXIF orientation applied. A JPEG
    is decoded at a reduced scale (DCT scaling); anything else, and any JPEG that fails that way, through
    :func:`imagent.core.imageio.image_from_bytes` (its checks and limits; :class:`ImageLoadError` when it cannot)."""
    from PIL import Image, ImageOps

    from imagent.core.imageio import image_from_bytes

    out = None
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format == "JPEG" and im.width * im.height <= max_pixels:
                im.draft("RGB", (size, size))
                im.load()
                out = ImageOps.exif_transpose(im).convert("RGB")
    except Exception:  # the careful path below says what is wrong with it
        out = None
    if out is None:
        out = image_from_bytes(data, max_pixels)
    out.thumbnail((size, size), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=85, optimize=True)
    return buf.getvalue()


class ThumbnailCache:
    """Thumbnails in ``<root>/<size>/<key[:2]>/<key>.jpg`` (the library's: ``<index>/thumbnails``; face crops:
    ``<index>/face-thumbnails``), written once (atomically) and read after.
    ``workers`` decodes run at once (a page of a grid asks for sixty)."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self._slots = threading.BoundedSemaphore(max(1, workers))
        self.made = 0  # thumbnails decoded by this process (tests read it: a hit decodes nothing)

    def path(self, key: str, size: int) -> Path:
        return self.root / str(size) / key[:2] / f"{key}.jpg"

    def get(self, key: str, size: int) -> bytes | None:
        try:
            return self.path(key, size).read_bytes()
        except OSError:
            return None

    def make(self, key: str, size: int, render: Callable[[], bytes]) -> bytes:
        """The thumbnail ``key`` at ``size``: from disk, else ``render()`` (at most ``workers`` at once), kept."""
        with self._slots:
            hit = self.get(key, size)  # another request may have made it while this one waited
            if hit is not None:
                return hit
            data = render()
            self.made += 1
            self._store(self.path(key, size), data)
            return data

    @staticmethod
    def _store(path: Path, data: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".jpg")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:  # a read-only index: served, just not kept
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)


# "size:mtime_ns:..." as the folder and manifest indexer writes a file's fingerprint (index/builder.py)
_FINGERPRINT = re.compile(r"^(\d+):(\d+):")


def still_indexed(record: ImageRecord, fingerprint: str | None) -> str:
    """Why ``record``'s file is no longer the one indexed ("" when it still is, as far as its size and modification
    time tell): the check a cached thumbnail is served after, without reading the file."""
    try:
        st = os.stat(record.path)
    except OSError as exc:
        return f"not on disk ({exc.strerror or 'cannot stat'})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    match = _FINGERPRINT.match(fingerprint or "")
    if match and (int(match.group(1)) != st.st_size or int(match.group(2)) != st.st_mtime_ns):
        return "its size or modification time differs from the index"
    return ""


# --------------------------------------------------------------------------- the routes


def library_router(workspace: Workspace, gallery: Gallery, card: Callable[[ImageRecord], dict[str, Any]],
                   page_html: Callable[[], HTMLResponse], read_file: Callable[[ImageRecord, str | None, int], bytes],
                   file_changed: type[Exception]) -> APIRouter:
    """The routes above over ``gallery``; ``card(record)`` is the photo as the page shows it (the same card the
    search results use), ``page_html()`` the page itself; ``read_file(record, fingerprint, max_bytes)`` reads a
    photo's bytes after the checks ``/api/images`` makes (raising ``FileNotFoundError`` or ``file_changed``)."""
    router = APIRouter()
    limits = workspace.settings.indexing
    thumbs = ThumbnailCache(gallery.root / THUMB_DIR, workers=min(4, os.cpu_count() or 1))
    state: dict[str, Any] = {"ids": None, "order": None, "generation": None, "fingerprints": {}}
    lock = threading.Lock()

    def order() -> LibraryOrder:
        with lock:
            if state["ids"] is not gallery.ids:
                state["order"], state["ids"] = LibraryOrder(gallery), gallery.ids
            return state["order"]

    def fingerprint_of(image_id: str) -> str | None:
        with lock:
            generation = gallery.generation()
            if state["generation"] != generation:
                state["fingerprints"] = {i: fp for i, fp in gallery.fingerprints().values()}
                state["generation"] = generation
            return state["fingerprints"].get(image_id)

    def known(image_id: str) -> ImageRecord:
        if image_id not in gallery:
            raise HTTPException(404, f"no photo {image_id[:200]!r} in the library")
        return gallery.record(image_id)

    def photo_card(rec: ImageRecord) -> dict[str, Any]:
        return {**card(rec), "file": Path(rec.path).name if rec.path else rec.id}

    @router.get("/api/library")
    def library(page: str | None = Query(None, max_length=100), per_page: str | None = Query(None, max_length=100),
                where: str | None = Query(None, max_length=2000)) -> dict[str, Any]:
        try:
            size = per_page_number(per_page)
            # a filter's matches oldest first (photos without a date last), else the library newest first
            rows = where_rows(gallery, where) if where is not None else order().rows
            pages = -(-len(rows) // size)
            n = page_number(page, pages)
        except (PageError, FilterError) as exc:
            raise HTTPException(400, str(exc)) from None
        ids = gallery.id_array[rows[n * size:(n + 1) * size]].tolist()
        photos = [photo_card(gallery.record(i)) for i in ids]
        lib = order()
        shown_days = {p["taken"][:10] for p in photos if p.get("taken")}
        out: dict[str, Any] = {
            "library": {"name": library_name(gallery), "size": len(gallery), "undated": lib.undated},
            "total": len(rows), "page": n, "pages": pages, "per_page": size, "photos": photos,
            "days": {d: lib.days.get(d, 0) for d in sorted(shown_days, reverse=True)},
            "where": where, "order": "oldest first" if where is not None else "newest first",
        }
        if where is None:
            out["months"] = [{"month": m["month"], "count": m["count"], "page": m["first"] // size}
                             for m in lib.months]
        return out

    @router.get("/api/photos/{image_id:path}")
    def photo(image_id: str) -> dict[str, Any]:
        rec = known(image_id)
        lib = order()
        at = int(lib.position[gallery.row(image_id)])
        neighbour = {d: gallery.ids[int(lib.rows[at + s])] if 0 <= at + s < len(lib.rows) else None
                     for d, s in (("previous", -1), ("next", 1))}
        return {**photo_card(rec), "folder": folder_of(rec, gallery.sources()), "device": rec.device,
                "latitude": rec.latitude, "longitude": rec.longitude, "width": rec.width, "height": rec.height,
                "captions": list(rec.captions), "caption_source": rec.caption_source, "position": at,
                "text_lines": [dict(x) for x in rec.text_lines],  # the text read in it, with boxes (text.js)
                "total": len(lib.rows), **neighbour}

    @router.get("/api/thumbnails/{size}/{image_id:path}")
    def thumbnail(size: str, image_id: str) -> Response:
        if not size.isdigit() or int(size[:6]) not in THUMB_SIZES:
            raise HTTPException(400, f"thumbnail size must be one of {', '.join(map(str, THUMB_SIZES))}")
        rec = known(image_id)  # only records the index holds: the id is looked up, never used as a path
        fingerprint = fingerprint_of(image_id)
        key = thumbnail_key(rec, fingerprint)
        headers = {"Cache-Control": "private, max-age=3600"}
        data = thumbs.get(key, int(size))
        if data is not None:
            why = still_indexed(rec, fingerprint)
            if why:
                raise HTTPException(409, f"the file of {image_id!r} changed since it was indexed ({why}); "
                                         "re-run imagent index to show it")
            return Response(data, media_type="image/jpeg", headers=headers)
        from imagent.core.imageio import ImageLoadError

        def read() -> bytes:
            return read_file(rec, fingerprint, limits.max_file_bytes)

        try:
            data = thumbs.make(key, int(size), lambda: render_thumbnail(read(), int(size), limits.max_pixels))
        except FileNotFoundError as exc:
            raise HTTPException(404, f"the file of {image_id!r} is not on disk ({exc})") from None
        except file_changed as exc:
            raise HTTPException(409, f"the file of {image_id!r} changed since it was indexed ({exc}); "
                                     "re-run imagent index to show it") from None
        except ImageLoadError as exc:
            raise HTTPException(409, f"the photo cannot be decoded for display ({exc})") from None
        return Response(data, media_type="image/jpeg", headers=headers)

    @router.get("/api/route")
    def query_route(text: str = Query("", max_length=2000),
                    unlink: list[str] = Query([], max_length=50)) -> dict[str, Any]:
        return route_method(text, gallery, [k[:300] for k in unlink]).to_dict()

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        from importlib import resources

        data = (resources.files("imagent.server") / "static" / "favicon.ico").read_bytes()
        return Response(data, media_type="image/x-icon", headers={"Cache-Control": "public, max-age=86400"})

    @router.get("/photo/{image_id:path}", include_in_schema=False)
    def photo_page(image_id: str) -> HTMLResponse:
        return page_html()  # the page shows the photo (or says it is not in the library)

    @router.get("/search", include_in_schema=False)
    def search_page() -> HTMLResponse:
        return page_html()

    @router.get("/people", include_in_schema=False)
    @router.get("/people/{person_id}", include_in_schema=False)
    def people_page(person_id: str = "") -> HTMLResponse:
        return page_html()  # the People page (or one group; the page says when there is no such group)

    return router
