"""The people JSON API over the library service: the index's face groups, naming and merging them, face crops.

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

A face crop is cut only from a face the index holds, out of the photo's file as ``/api/images`` serves it (the file
must still be the one indexed), every face of a photo from one decode at a reduced scale, and kept in
``<index>/face-thumbnails`` (served again after the file's size and time are checked; removing a face or ``imagent
people forget`` deletes its crops, and a crop being made meanwhile deletes itself). An index without face data
answers the list with ``{"people": [], "faces": null}`` and 404 for the rest; a group or face id the index does not
hold, however large, is a 404. Names are checked as ``imagent people name`` checks them
(:func:`imagent.index.people.check_name`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from imagent.index.face_store import FaceDataMissing
from imagent.index.people import Face, Person
from imagent.library import LibraryService
from imagent.library.service import MAX_FACE_CROP

try:
    from fastapi import APIRouter, Query
    from fastapi.responses import Response
    from starlette.concurrency import run_in_threadpool
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI ({exc}); install it with: pip install \"imagent[web]\"") from exc


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


def people_router(library: LibraryService) -> APIRouter:
    """The routes above over ``library`` (its errors are answered by :mod:`imagent.server.errors`)."""
    router = APIRouter()

    @router.get("/api/people")
    def people(thumbs: int = Query(4, ge=0, le=32)) -> dict[str, Any]:
        try:
            groups, summary = library.people()
        except FaceDataMissing:
            return {"people": [], "faces": None}
        return {"people": [person_json(p, thumbs) for p in groups], "faces": summary.to_dict()}

    @router.get("/api/people/{person_id}")
    def person(person_id: int) -> dict[str, Any]:
        p = library.person(person_id)
        return {**person_json(p, len(p.faces)), "face_list": [face_json(f) for f in p.faces]}

    @router.post("/api/people/merge")
    def merge(req: MergeRequest) -> dict[str, Any]:
        done = library.merge(req.into, req.ids)
        return {**person_json(library.person(req.into)), "merged": done.merged, "faces_moved": done.faces_moved}

    @router.post("/api/people/{person_id}/name")
    def name(person_id: int, req: NameRequest) -> dict[str, Any]:
        done = library.name(person_id, req.name or None)
        return {**person_json(library.person(person_id)), "previous": done.previous}

    @router.post("/api/faces/{face_id}/split")
    def split(face_id: int, req: SplitRequest) -> dict[str, Any]:
        return library.split(face_id, req.to).to_dict()

    @router.post("/api/faces/{face_id}/remove")
    def remove(face_id: int) -> dict[str, Any]:
        return library.remove_face(face_id).to_dict()

    @router.get("/api/faces/{face_id}/thumbnail")
    async def thumbnail(face_id: int, size: int = Query(160, ge=32, le=MAX_FACE_CROP)) -> Response:
        jpeg = await run_in_threadpool(library.face_crop, face_id, size)
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})

    return router


__all__ = ["people_router", "person_json"]
