"""The people JSON API: the index's face groups, naming and merging them, and face thumbnails.

Included by :func:`imagent.server.app.create_app` (same Host, token and body-size checks as every route):

  ``GET  /api/people``                     ``{"people": [group], "faces": summary}``; each group
                                           ``{"id", "name", "faces", "photos", "tiny", "photo_ids", "face_ids",
                                           "thumbnails"}`` (the larger groups first, tiny ones last; ``thumbnails``
                                           up to ``thumbs`` face-crop URLs)
  ``GET  /api/people/{id}``                one group with every face: ``{..., "face_list": [{"id", "photo", "box",
                                           "score", "size", "thumbnail"}]}``
  ``POST /api/people/{id}/name``           ``{"name": "Anna"}`` (``""`` or null clears it) -> the group
  ``POST /api/people/merge``               ``{"into": 3, "ids": [5, 7]}`` -> the merged group
  ``POST /api/faces/{id}/split``           ``{"to": 4}`` or ``{}`` (a new group of its own) ->
                                           ``{"face", "from", "to", "new_group"}``
  ``POST /api/faces/{id}/remove``          delete a face that is nobody -> ``{"face", "photo", "from"}``
  ``GET  /api/faces/{id}/thumbnail``       a JPEG crop of one face (``?size=`` 32..512, default 160)

A face thumbnail is cut only from a face the index holds, out of the photo's file as ``/api/images`` serves it
(the path comes from the index and the file must still be the one indexed: the same check), decoded within the
pixel budget, and kept in ``<index>/face-thumbnails`` (served again after the file's size and time are checked;
``imagent people forget`` deletes the folder with the rest of the face data). An index without face data answers
the list with ``{"people": [], "faces": null}`` and 404 for the rest. Names are checked as ``imagent people name``
checks them (:func:`imagent.index.people.check_name`).
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from imagent.core.imageio import ImageLoadError, image_from_bytes
from imagent.index.face_store import FACE_THUMBS, FaceDataMissing, face_crop_key
from imagent.index.people import (
    Face,
    PeopleError,
    Person,
    UnknownPeople,
    face_of,
    get_person,
    list_people,
    merge_people,
    name_person,
    remove_face,
    scan_summary,
    split_face,
)
from imagent.server.library import ThumbnailCache

try:
    from fastapi import APIRouter, HTTPException, Query
    from fastapi.responses import Response
    from starlette.concurrency import run_in_threadpool
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI ({exc}); install it with: pip install \"imagent[web]\"") from exc

THUMB_MARGIN = 0.25  # of the box's size, added on every side of a face crop


class NameRequest(BaseModel):
    name: str | None = Field(None, max_length=200, description="the person's name; empty or null clears it")


class MergeRequest(BaseModel):
    into: int = Field(..., ge=1, description="the group that stays")
    ids: list[int] = Field(..., min_length=1, max_length=100, description="groups merged into it")


class SplitRequest(BaseModel):
    to: int | None = Field(None, ge=1, description="an existing group; none: a new group of its own")


def thumbnail_url(face_id: int) -> str:
    return f"/api/faces/{face_id}/thumbnail"


def face_json(face: Face) -> dict[str, Any]:
    return {**face.to_dict(), "thumbnail": thumbnail_url(face.id)}


def person_json(p: Person, thumbs: int = 4) -> dict[str, Any]:
    # The face thumbnails shown for a group: its largest faces (the clearest crops) first.
    best = sorted(p.faces, key=lambda f: (-f.size, f.id))[:thumbs]
    return {"id": p.id, "name": p.name, "faces": len(p.faces), "photos": len(p.photos), "tiny": p.tiny,
            "photo_ids": p.photos, "face_ids": [f.id for f in p.faces],
            "thumbnails": [thumbnail_url(f.id) for f in best]}


def crop_face(data: bytes, box: tuple[float, float, float, float], size: int, max_pixels: int) -> bytes:
    """A square JPEG of ``size`` px around ``box`` (fractions of the upright photo) with a margin."""
    im = image_from_bytes(data, max_pixels)  # EXIF orientation applied: the boxes are of the upright photo
    w, h = im.size
    x0, y0, x1, y1 = box[0] * w, box[1] * h, box[2] * w, box[3] * h
    side = max(x1 - x0, y1 - y0) * (1 + 2 * THUMB_MARGIN)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    left, top = max(0, round(cx - side / 2)), max(0, round(cy - side / 2))
    right, bottom = min(w, round(cx + side / 2)), min(h, round(cy + side / 2))
    crop = im.crop((left, top, max(right, left + 1), max(bottom, top + 1)))
    crop.thumbnail((size, size))
    out = io.BytesIO()
    crop.save(out, "JPEG", quality=85)
    return out.getvalue()


def crop_digest(record: Any, box: tuple[float, float, float, float]) -> str:
    """What a face crop is cut from: the photo's content (hash, else id and path) and the box."""
    photo = record.content_hash or f"{record.id}\0{record.path}"
    return hashlib.sha256(f"{photo}\0{','.join(f'{v:.2f}' for v in box)}".encode("utf-8", "replace")).hexdigest()


def people_router(workspace: Any, gallery: Any, photo_bytes: Callable[[str], bytes],
                  photo_unchanged: Callable[[str], None]) -> APIRouter:
    """The routes above over ``gallery``. ``photo_bytes(image_id)`` returns a photo's file exactly as
    ``/api/images`` would serve it (raising the same HTTP errors), so face crops pass the same checks;
    ``photo_unchanged(image_id)`` raises those errors when the file is gone or changed (without reading it), the
    check before a cached crop is served. Crops are kept in ``<index>/face-thumbnails`` (face data: ``imagent
    people forget`` deletes them, removing a face deletes its crops)."""
    router = APIRouter()
    indexing = workspace.settings.indexing
    crops = ThumbnailCache(Path(gallery.root) / FACE_THUMBS, workers=min(4, os.cpu_count() or 1))

    def people_error(exc: Exception) -> HTTPException:
        if isinstance(exc, FaceDataMissing):
            return HTTPException(404, "this index has no face data: `imagent index` finds faces in photo folders "
                                      "(faces.mode)")
        return HTTPException(404 if isinstance(exc, UnknownPeople) else 400, str(exc))

    @router.get("/api/people")
    def people(thumbs: int = Query(4, ge=0, le=32)) -> dict[str, Any]:
        try:
            groups = list_people(gallery, workspace.settings.faces.min_group)
            summary = scan_summary(gallery)
        except FaceDataMissing:
            return {"people": [], "faces": None}
        return {"people": [person_json(p, thumbs) for p in groups], "faces": summary}

    @router.get("/api/people/{person_id}")
    def person(person_id: int) -> dict[str, Any]:
        try:
            p = get_person(gallery, person_id)
        except (PeopleError, FaceDataMissing) as exc:
            raise people_error(exc) from None
        return {**person_json(p, len(p.faces)), "face_list": [face_json(f) for f in p.faces]}

    def group(person_id: int) -> dict[str, Any]:
        p = get_person(gallery, person_id)
        p.tiny = len(p.faces) < workspace.settings.faces.min_group
        return person_json(p)

    @router.post("/api/people/merge")
    def merge(req: MergeRequest) -> dict[str, Any]:
        try:
            done = merge_people(gallery, req.into, req.ids)
            return {**group(req.into), "merged": done["merged"], "faces_moved": done["faces_moved"]}
        except (PeopleError, FaceDataMissing) as exc:
            raise people_error(exc) from None

    @router.post("/api/people/{person_id}/name")
    def name(person_id: int, req: NameRequest) -> dict[str, Any]:
        try:
            done = name_person(gallery, person_id, req.name or None)
            return {**group(person_id), "previous": done["previous"]}
        except (PeopleError, FaceDataMissing) as exc:
            raise people_error(exc) from None

    @router.post("/api/faces/{face_id}/split")
    def split(face_id: int, req: SplitRequest) -> dict[str, Any]:
        try:
            return split_face(gallery, face_id, req.to)
        except (PeopleError, FaceDataMissing) as exc:
            raise people_error(exc) from None

    @router.post("/api/faces/{face_id}/remove")
    def remove(face_id: int) -> dict[str, Any]:
        try:
            return remove_face(gallery, face_id)
        except (PeopleError, FaceDataMissing) as exc:
            raise people_error(exc) from None

    @router.get("/api/faces/{face_id}/thumbnail")
    async def thumbnail(face_id: int, size: int = Query(160, ge=32, le=512)) -> Response:
        try:
            face = await run_in_threadpool(face_of, gallery, face_id)
        except (PeopleError, FaceDataMissing) as exc:
            raise people_error(exc) from None
        key = face_crop_key(face.id, crop_digest(gallery.record(face.photo), face.box))
        headers = {"Cache-Control": "private, max-age=3600"}
        jpeg = crops.get(key, size)
        if jpeg is not None:
            await run_in_threadpool(photo_unchanged, face.photo)  # a kept crop, but only of a file still indexed
            return Response(jpeg, media_type="image/jpeg", headers=headers)

        def render() -> bytes:
            return crop_face(photo_bytes(face.photo), face.box, size, indexing.max_pixels)  # the /api/images checks

        try:
            jpeg = await run_in_threadpool(crops.make, key, size, render)
        except ImageLoadError as exc:
            raise HTTPException(409, f"the photo of face {face_id} cannot be decoded ({exc})") from None
        return Response(jpeg, media_type="image/jpeg", headers=headers)

    return router


__all__ = ["crop_face", "people_router", "person_json"]
