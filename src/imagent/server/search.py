"""The search routes: a search run at once or in the background with its trace streamed, and the reference images
uploaded for composed searches.

  ``POST /api/search``                  :class:`imagent.api.SearchRequest` -> results + trace, when it is done
  ``POST /api/searches``                the same request, started in the background -> ``{id}``
  ``GET  /api/searches/{id}/events``    its trace as server-sent events: ``started``, ``step_start``, ``step_end``,
                                        ``call``, then ``result`` | ``error`` | ``cancelled``
  ``POST /api/searches/{id}/cancel``    stop it at its next step or model call
  ``POST /api/uploads``                 a reference image's bytes -> ``{upload_id, ...}`` (never served back)

Each search runs over the index as it is now (the library service reopens it when a build committed since), and its
answer says which build generation it was answered at (``generation``), so a client that has the index open itself
(the CLI) uses the answer only when both see the same index. Every result row says what matched it
(``matched_by``; the rows' ``spaces`` travel with the answer).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from imagent.api import PreparedSearch, SearchRequest, TaskMismatch, Workspace, result_json
from imagent.core.imageio import ImageLoadError
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Result
from imagent.library import LibraryService
from imagent.library import service as library_service
from imagent.server.errors import describe_error
from imagent.server.jobs import SearchJobs, TooManySearches
from imagent.server.limits import RequestLimitError, check_params, check_request
from imagent.server.uploads import UploadStore
from imagent.tools.photo_search import where_rows

try:
    from fastapi import APIRouter, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.concurrency import run_in_threadpool
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI ({exc}); install it with: pip install \"imagent[web]\"") from exc


class Searches:
    """What the search routes share: the workspace and its library at ``index``, the background searches, the
    uploads and the file names the page sent with them."""

    def __init__(self, workspace: Workspace, library: LibraryService, index: str | Path | None, jobs: SearchJobs,
                 uploads: UploadStore) -> None:
        self.workspace, self.library, self.index = workspace, library, index
        self.jobs, self.uploads = jobs, uploads
        self.upload_names: dict[str, str] = {}  # upload id -> the file name the page sent (the reference keeps it)

    def prepare(self, req: SearchRequest) -> PreparedSearch:
        """Everything a request can get wrong, checked before any model loads: the web's bounds, method,
        parameters (validated and bounded), reference. Returns the prepared search (:meth:`Workspace.prepare`)."""
        try:
            check_request(req)
        except RequestLimitError as exc:  # answered like pydantic's own errors: 422, where and why
            raise RequestValidationError([{"loc": ("body", exc.field), "msg": str(exc), "type": exc.kind}]) \
                from None
        if req.reference and req.reference_upload:
            raise HTTPException(400, "give a reference or a reference_upload, not both")
        gallery = self.library.gallery  # the index as it is now
        ref = self._reference(req, gallery)
        if req.where is not None:
            where_rows(gallery, req.where)  # a bad expression: 400 with where and why, before anything runs
        if req.like is not None and (not isinstance(req.like, str) or req.like not in gallery):  # never a path
            raise HTTPException(400, f"like {str(req.like)[:200]!r} is not an image id in the gallery")
        # The server's own index, the reference resolved: the fields a client never chooses.
        request = req.model_copy(update={"reference": ref, "reference_upload": None, "index": self.index,
                                         "query": None})
        try:
            return self.workspace.prepare(request, check_params=check_params)
        except TaskMismatch as exc:
            need = ("needs a reference image: press 'use as reference' on a result, or upload one"
                    if ref is None else "takes no reference image: clear it")
            kinds = sorted(exc.tasks)
            raise HTTPException(400, f"method {req.method!r} {need} (the query kinds it handles: {kinds})") from None

    def _reference(self, req: SearchRequest, gallery: Any) -> ImageRecord | None:
        if req.reference:
            # Only gallery ids: a reference given as a path would let a page read any file on this machine.
            if not isinstance(req.reference, str) or req.reference not in gallery:
                raise HTTPException(400, f"reference {str(req.reference)[:200]!r} is not an image id in the gallery")
            return gallery.record(req.reference)
        if req.reference_upload:
            item = self.uploads.get(req.reference_upload)
            if item is None:
                raise HTTPException(400, "unknown or expired reference_upload; upload the image again")
            ref = self.uploads.record(item, gallery)
            return ref if ref.id in gallery else _uploaded_record(ref, self.upload_names.get(item.id, ""))
        return None

    def new_trace(self, req: SearchRequest) -> Trace:
        cap = self.workspace.settings.server.max_calls_per_search
        return Trace(max_calls=min(cap, req.max_calls) if req.max_calls is not None else cap)

    def payload(self, result: Result, req: SearchRequest | None = None) -> dict[str, Any]:
        """The answer as JSON: rows (each with ``matched_by``), trace, the filter shown with them, the answer set's
        cards, and the build ``generation`` it was answered at."""
        gallery = self.workspace.gallery(self.index)  # the object the search ran over (or a newer one)
        data = json.loads(result_json(result, gallery))
        data["generation"] = gallery.loaded_generation
        if req is not None:  # what the results are restricted to and ordered by, shown with them
            data["filter"] = {"where": req.where, "sort": req.sort,
                              "matches": result.trace.counters.get("where_matches")}
        if result.answer_set is not None:
            data["answer_set"] = list(result.answer_set)
            card = library_service.photo_card
            data["answer"] = [card(gallery.record(i), gallery).to_dict() for i in result.answer_set if i in gallery]
        return data

    def run(self, prepared: PreparedSearch, req: SearchRequest, trace: Trace) -> dict[str, Any]:
        return self.payload(self.workspace.run(prepared, trace=trace), req)

    async def upload(self, request: Request) -> dict[str, Any]:
        data = await request.body()
        name = _upload_name(request.query_params.get("name"))
        try:
            item = await run_in_threadpool(self.uploads.add, data)
            rec = await run_in_threadpool(self.uploads.record, item, self.library.gallery)
        except ImageLoadError as exc:  # its message may name the server's temporary file: name the upload instead
            raise HTTPException(415, f"not a usable image: {_no_server_paths(str(exc), name)}") from None
        self.upload_names[item.id] = name
        while len(self.upload_names) > 256:
            self.upload_names.pop(next(iter(self.upload_names)))
        in_gallery = rec.id in self.library.gallery
        return {"upload_id": item.id, "width": item.width, "height": item.height, "bytes": len(data),
                "gallery_id": rec.id if in_gallery else None}


def search_router(searches: Searches) -> APIRouter:
    """The routes above over ``searches``."""
    router = APIRouter()
    jobs = searches.jobs

    @router.post("/api/uploads", status_code=201)
    async def upload(request: Request) -> dict[str, Any]:
        """The body is the image file itself, sent as ``image/...`` (no multipart form needed)."""
        return await searches.upload(request)

    @router.post("/api/search")
    def search(req: SearchRequest) -> JSONResponse:
        # A plain ``def``: FastAPI runs it in a worker thread, so a slow model call does not block the page.
        prepared = searches.prepare(req)
        try:
            with jobs.admit():  # the same limit as background searches
                return JSONResponse(searches.run(prepared, req, searches.new_trace(req)))
        except TooManySearches as exc:
            raise HTTPException(429, str(exc)) from None

    @router.post("/api/searches", status_code=202)
    def start_search(req: SearchRequest) -> dict[str, Any]:
        prepared = searches.prepare(req)
        try:
            estimate: int | None = prepared.estimate
        except Exception:  # an estimate is a courtesy: never a reason to refuse the search
            estimate = None
        trace = searches.new_trace(req)
        try:
            job = jobs.start(trace, req.method, estimate, lambda t: searches.run(prepared, req, t), describe_error)
        except TooManySearches as exc:
            raise HTTPException(429, str(exc)) from None
        return {"id": job.id, "events": f"/api/searches/{job.id}/events", "estimate": estimate,
                "max_calls": trace.max_calls}

    def job_or_404(job_id: str) -> Any:
        job = jobs.get(job_id)
        if job is None:
            raise HTTPException(404, f"no search {job_id[:100]!r} (finished searches are kept for a while)")
        return job

    @router.get("/api/searches/{job_id}/events")
    async def events(job_id: str, request: Request) -> StreamingResponse:
        job = job_or_404(job_id)
        last = request.headers.get("last-event-id", "")
        start = int(last) + 1 if last.isdigit() and len(last) < 12 else 0
        # watched: while the stream is open the search counts as listened to; abandoned, it is cancelled
        return StreamingResponse(job.watched(_event_stream(job, start, request)), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @router.post("/api/searches/{job_id}/cancel")
    def cancel(job_id: str) -> dict[str, Any]:
        job = job_or_404(job_id)
        job.cancel()
        return {"id": job.id, "cancelled": not job.done or job.events[-1][0] == "cancelled", "done": job.done}

    return router


async def _event_stream(job: Any, start: int, request: Request) -> AsyncIterator[str]:
    n, idle = start, 0.0
    yield "retry: 1000\n\n"
    while True:
        for i, event, data in job.since(n):
            yield f"id: {i}\nevent: {event}\ndata: {data}\n\n"
            n, idle = i + 1, 0.0
        if job.done and not job.since(n):
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(0.1)
        idle += 0.1
        if idle >= 15:  # a comment keeps proxies from closing a quiet stream
            yield ": keep-alive\n\n"
            idle = 0.0


def _upload_name(raw: str | None) -> str:
    """The uploaded file's own name as the page sent it: the last path part, printable, at most 200 characters."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    return "".join(c for c in name if c.isprintable())[:200].strip()


def _no_server_paths(message: str, name: str) -> str:
    """An upload error without the server's temporary paths (they say nothing to the user and leak the layout)."""
    return re.sub(r"(/[^\s:'\"]*)?imagent-uploads-[^\s:'\"]*", name or "the upload", message)


def _uploaded_record(ref: ImageRecord, name: str = "") -> ImageRecord:
    """An uploaded reference is stored under a random name: its derived text must not be that name's words.
    The file name the page sent stands in (its words, like an indexed file's), with its EXIF date and place
    (marked as derived text, never a caption)."""
    from imagent.index.derived import date_phrase, path_words, place_phrase

    words = [" ".join(path_words(name, None)) if name else "", date_phrase(ref.taken_time),
             place_phrase(ref.address, ref.latitude, ref.longitude, ref.place)]
    extra = {**ref.extra, "uploaded": True, **({"file_name": name} if name else {})}
    return replace(ref, derived_text="; ".join(w for w in words if w), extra=extra)


__all__ = ["Searches", "search_router"]
