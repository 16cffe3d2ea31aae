"""The photo app's routes over the library service (:class:`imagent.library.LibraryService`): the library in pages,
one photo with its neighbours, a photo's file and record, thumbnails, the route a plain-words query takes, the
favicon, and the page's own addresses (``/photo/<id>``, ``/search``, ``/people``).

API (mounted by :func:`imagent.server.app.create_app`; the same Host, token and header rules as every route)
  ``GET /api/library?page=N&per_page=60``   the library newest first (photos without a date last), one page:
                                            ``{library, total, page, pages, per_page, photos, months, days}``;
                                            ``&where=EXPR`` the photos matching a filter instead, oldest first (the
                                            filter language of ``imagent search --where``)
  ``GET /api/photos/{id}``                  one photo: date and time, place and coordinates, camera, file name
                                            and folder, size, caption (and labels or people when the index has
                                            them), its previous and next photo in the library
  ``GET /api/images/{id}``                  the photo's file, re-checked against the index (404 gone, 409 changed)
  ``GET /api/records/{id}``                 its record (caption, metadata); ids may contain ``/``
  ``GET /api/thumbnails/{size}/{id}``       a JPEG of at most ``size`` pixels a side (``size`` in
                                            :data:`imagent.library.thumbs.THUMB_SIZES`) keeping the photo's shape,
                                            made once and kept in ``<index>/thumbnails/``
  ``GET /api/route?text=...``               where a plain-words query goes (:func:`imagent.api.route_method`) and
                                            what the query reader understood of it (``&unlink=KEY``: an understood
                                            filter read as words)

Pages are numbered from 0; a page that is negative, not a number, or past the last page is a 400 with what is
allowed. Thumbnails are keyed by the photo's content hash and size, so an edited photo (indexed again) gets a new
one and a renamed one keeps its own; a thumbnail is served only for a record the index holds, after the same
checks as ``/api/images``, so a file replaced since indexing is a 409 until it is indexed again. File names and
paths are shown through :func:`imagent.core.text.display_path` (a name that is not UTF-8 is still served).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

from imagent.api import route_method
from imagent.library import LibraryService

try:
    from fastapi import APIRouter, Query
    from fastapi.responses import HTMLResponse, Response
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI ({exc}); install it with: pip install \"imagent[web]\"") from exc

CACHED = {"Cache-Control": "private, max-age=3600"}


def library_router(library: LibraryService) -> APIRouter:
    """The JSON routes above over ``library`` (its errors are answered by :mod:`imagent.server.errors`)."""
    router = APIRouter()

    @router.get("/api/library")
    def library_page(page: str | None = Query(None, max_length=100),
                     per_page: str | None = Query(None, max_length=100),
                     where: str | None = Query(None, max_length=2000)) -> dict[str, Any]:
        return library.page(page, per_page, where).to_dict()

    @router.get("/api/photos/{image_id:path}")
    def photo(image_id: str) -> dict[str, Any]:
        return library.photo(image_id).to_dict()

    @router.get("/api/records/{image_id:path}")
    def record(image_id: str) -> dict[str, Any]:
        return library.record_data(image_id)

    @router.get("/api/images/{image_id:path}")
    def image(image_id: str) -> Response:
        photo_file = library.photo_file(image_id)
        return Response(photo_file.data, media_type=photo_file.media_type, headers=CACHED)

    @router.get("/api/thumbnails/{size}/{image_id:path}")
    def thumbnail(size: str, image_id: str) -> Response:
        side = int(size[:6]) if size.isdigit() and size.isascii() else -1
        return Response(library.thumbnail(image_id, side), media_type="image/jpeg", headers=CACHED)

    @router.get("/api/route")
    def query_route(text: str = Query("", max_length=2000),
                    unlink: list[str] = Query([], max_length=50)) -> dict[str, Any]:
        return route_method(text, library.gallery, [k[:300] for k in unlink]).to_dict()

    return router


def pages_router(page_html: Callable[[], HTMLResponse]) -> APIRouter:
    """The page's own addresses (each answers the page, which shows what the address names) and the favicon."""
    router = APIRouter()

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
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


__all__ = ["library_router", "pages_router"]
