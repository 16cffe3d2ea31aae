"""The web UI: one page that runs a search and shows each step of the method's trace as it happens.

The page is static HTML + JavaScript (no build step); it talks to a small JSON API over the same
:class:`~imagent.api.Workspace` the CLI uses, and renders the same trace the CLI prints and the eval
report summarises. Everything the API returns is shown as text, never as HTML: captions, model output
and web titles are data.

API
  ``GET  /api/info``                    the gallery, the methods with their defaults, the server's limits
  ``POST /api/search``                  :class:`imagent.api.SearchRequest` (``{text, method, top_k,
                                        reference | reference_upload, keep_reference, params, max_calls, where,
                                        sort, like, collapse_duplicates}``) -> results + trace, when it is done
  ``POST /api/searches``                the same request, started in the background -> ``{id}``
  ``GET  /api/searches/{id}/events``    its trace as server-sent events: ``started``, ``step_start``,
                                        ``step_end``, ``call``, then ``result`` | ``error`` | ``cancelled``
  ``POST /api/searches/{id}/cancel``    stop it at its next step or model call
  ``POST /api/uploads``                 a reference image's bytes -> ``{upload_id, ...}`` (never served back)
  ``GET  /api/images/{id}``             a gallery image's file, re-checked against the index (404/409 else)
  ``GET  /api/records/{id}``            a gallery record (caption, metadata); ids may contain ``/``
  ``/api/people``, ``/api/faces/...``  people and face thumbnails (:mod:`imagent.server.people`)

What the server trusts is in :mod:`imagent.server.security` (Host, token, body size, headers) and
:mod:`imagent.server.limits` (the request's fields and the method parameters); each search's model calls are capped by
``server.max_calls_per_search`` through the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import mimetypes
import os
import re
import socket
import stat
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from imagent.api import (
    PreparedSearch,
    SearchRequest,
    TaskMismatch,
    Workspace,
    card_labels,
    record_place,
    result_json,
    shown_labels,
    user_error_types,
)
from imagent.core.imageio import ImageLoadError, is_image_name
from imagent.core.redact import redact
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Result
from imagent.methods.base import describe_methods
from imagent.models.base import ChatError
from imagent.server.discovery import remove_discovery, write_discovery
from imagent.server.jobs import SearchJobs, TooManySearches
from imagent.server.library import library_router, still_indexed
from imagent.server.limits import MAX_TOP_K, RequestLimitError, check_params, check_request
from imagent.server.people import people_router
from imagent.server.security import Guard, HostPolicy, csp_for_html
from imagent.server.uploads import UploadStore
from imagent.tools.photo_search import where_rows

try:
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
    from starlette.concurrency import run_in_threadpool
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI and uvicorn ({exc}); install them with: "
                      'pip install "imagent[web]"') from exc

STATIC = resources.files("imagent.server") / "static"
_FINGERPRINT = re.compile(r"^(\d+):(\d+):")  # "size:mtime_ns:..." written by the folder/manifest indexer


class FileChanged(Exception):
    """The file on disk is no longer the one the index recorded."""


def read_indexed_file(record: ImageRecord, fingerprint: str | None, max_bytes: int) -> bytes:
    """The bytes of ``record``'s file, only if it is still the file that was indexed.

    The path comes from the index, never from the request. The file must be a regular file; when the
    index recorded its size and mtime they must match; when it recorded the content hash, the bytes
    served are hashed and must match it. So a file replaced, or a symlink swapped in pointing out of the
    gallery (to ``~/.ssh/id_rsa``, say), is refused until it is indexed again. The bytes hashed are the
    bytes sent: nothing can change between the check and the reply."""
    if not record.path:
        raise FileNotFoundError("no file recorded")
    if not record.content_hash and not is_image_name(record.path):
        raise FileChanged("not an image file name and no content hash to check it by")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in must not block the worker
    try:
        fd = os.open(record.path, flags)
    except OSError as exc:
        raise FileNotFoundError(exc.strerror or "cannot open") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise FileChanged("not a regular file")
        match = _FINGERPRINT.match(fingerprint or "")
        if match and (int(match.group(1)) != st.st_size or int(match.group(2)) != st.st_mtime_ns):
            raise FileChanged("its size or modification time differs from the index")
        if st.st_size > max_bytes:
            raise FileChanged("larger than the indexing limit")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileChanged("larger than the indexing limit")
    if record.content_hash and hashlib.sha256(data).hexdigest() != record.content_hash:
        raise FileChanged("its content differs from the index")
    return data


def create_app(workspace: Workspace, index: str | Path | None = None, token: str | None = None,
               allowed_hosts: Iterable[str] = ()) -> Any:
    """A FastAPI app serving ``workspace``'s gallery at ``index`` (the configured one by default).

    ``token``: required from every client when given; ``allowed_hosts``: ``Host`` names answered besides
    the loopback ones and ``server.allowed_hosts``."""
    opts = workspace.settings.server
    gallery = workspace.gallery(index)  # opened once: a missing index fails at start, not per request
    jobs = SearchJobs(opts.max_running_searches, opts.abandoned_search_grace_s)
    uploads = UploadStore(opts.upload_ttl_s, opts.max_upload_pixels, opts.max_upload_decode_bytes)
    fingerprints: dict[str, Any] = {"generation": None, "by_id": {}}
    upload_names: dict[str, str] = {}  # upload id -> the file name the page sent (the reference keeps it)

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        jobs.cancel_all()  # a search still running stops at its next step
        uploads.close()

    app = FastAPI(title="imagent", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json",
                  description="Search a gallery and watch each step of the method's trace.", lifespan=lifespan)
    app.state.jobs, app.state.uploads = jobs, uploads

    def describe_error(exc: Exception) -> tuple[int, str] | None:
        # The same errors the CLI reports as one line: a bad method or parameter, a model server down.
        if not isinstance(exc, user_error_types()):
            return None
        # Redacted: a server's error text may echo the API key (see imagent.core.redact).
        msg = redact(str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc))
        if isinstance(exc, ChatError):
            return 502, f"model call failed: {msg}"
        return 400, msg

    def user_error(_request: Any, exc: Exception) -> JSONResponse:
        status, msg = describe_error(exc) or (500, "internal error")
        return JSONResponse({"detail": msg}, status_code=status)

    for error_type in user_error_types():
        app.add_exception_handler(error_type, user_error)

    def invalid_request(_request: Any, exc: RequestValidationError) -> Response:
        # What was wrong and where, without echoing the input back (it may be large or not encodable);
        # ASCII JSON, so a lone surrogate in the request cannot break the reply.
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()]
        return Response(json.dumps({"detail": errors}, default=str), status_code=422, media_type="application/json")

    app.add_exception_handler(RequestValidationError, invalid_request)

    def fingerprint_of(image_id: str) -> str | None:
        generation = gallery.generation()
        if fingerprints["generation"] != generation:
            fingerprints["by_id"] = {i: fp for i, fp in gallery.fingerprints().values()}
            fingerprints["generation"] = generation
        return fingerprints["by_id"].get(image_id)

    # ------------------------------------------------------------------ the page

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"),
                            headers={"Cache-Control": "no-store"})

    shipped = {item.name for item in STATIC.iterdir() if item.is_file() and not item.name.startswith(".")}

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in shipped:  # the name is matched against what ships, never used to build a path first
            raise HTTPException(404, "no such file")
        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Response((STATIC / name).read_bytes(), media_type=media)

    # the library, photos, thumbnails (imagent.server.library)
    # (the card with the gallery: a photo's people and labels are the gallery's)
    app.include_router(library_router(workspace, gallery, lambda rec: _card(rec, gallery), page, read_indexed_file,
                                      FileChanged))

    @app.get("/api/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        html = get_swagger_ui_html(openapi_url="/api/openapi.json", title="imagent API")
        text = bytes(html.body).decode("utf-8")
        return HTMLResponse(text, headers={"Content-Security-Policy": csp_for_html(text)})

    # ------------------------------------------------------------------ gallery

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        methods = [{"name": name, **about} for name, about in describe_methods().items()]
        return {"gallery": {"root": str(gallery.root), "size": len(gallery), "sources": gallery.sources()},
                "methods": methods,
                "limits": {"max_upload_bytes": opts.max_upload_bytes, "max_calls_per_search": opts.max_calls_per_search,
                           "top_k": MAX_TOP_K}}

    def known(image_id: str) -> ImageRecord:
        if image_id not in gallery:
            raise HTTPException(404, f"no image {image_id[:200]!r} in the gallery")
        return gallery.record(image_id)

    @app.get("/api/records/{image_id:path}")
    def record(image_id: str) -> dict[str, Any]:
        rec = known(image_id)
        return {**rec.to_dict(), "place": record_place(rec)}

    def photo_bytes(image_id: str) -> bytes:
        """A photo's file as the index recorded it (the id is looked up, never used as a path): 404 when it is
        gone, 409 when it changed since indexing. /api/images and the face crops read through it."""
        rec = known(image_id)
        try:
            return read_indexed_file(rec, fingerprint_of(image_id), workspace.settings.indexing.max_file_bytes)
        except FileNotFoundError as exc:
            raise HTTPException(404, f"the file of {image_id!r} is not on disk ({exc})") from None
        except FileChanged as exc:
            raise HTTPException(409, f"the file of {image_id!r} changed since it was indexed ({exc}); "
                                     "re-run imagent index to serve it") from None

    @app.get("/api/images/{image_id:path}")
    def image(image_id: str) -> Response:
        rec = known(image_id)
        data = photo_bytes(image_id)
        media = mimetypes.guess_type(rec.path)[0] or "application/octet-stream"
        if media in ("image/heic", "image/heif") or rec.path.lower().endswith((".heic", ".heif", ".hif")):
            data, media = _as_jpeg(data, workspace.settings.indexing.max_pixels), "image/jpeg"  # browsers show JPEG
        return Response(data, media_type=media, headers={"Cache-Control": "private, max-age=3600"})

    def photo_unchanged(image_id: str) -> None:
        """The check of /api/images without reading the file (before a cached face crop is served)."""
        rec = known(image_id)
        if not os.path.isfile(rec.path):
            raise HTTPException(404, f"the file of {image_id!r} is not on disk")
        why = still_indexed(rec, fingerprint_of(image_id))
        if why:
            raise HTTPException(409, f"the file of {image_id!r} changed since it was indexed ({why}); "
                                     "re-run imagent index to serve it")

    app.include_router(people_router(workspace, gallery, photo_bytes, photo_unchanged))

    # ------------------------------------------------------------------ uploads

    @app.post("/api/uploads", status_code=201)
    async def upload(request: Request) -> dict[str, Any]:
        """The body is the image file itself, sent as ``image/...`` (no multipart form needed)."""
        data = await request.body()
        name = _upload_name(request.query_params.get("name"))
        try:
            item = await run_in_threadpool(uploads.add, data)
        except ImageLoadError as exc:
            raise HTTPException(415, f"not a usable image: {_no_server_paths(str(exc), name)}") from None
        try:
            rec = await run_in_threadpool(uploads.record, item, gallery)
        except ImageLoadError as exc:  # its message names the server's temporary file: name the upload instead
            raise HTTPException(415, f"not a usable image: {_no_server_paths(str(exc), name)}") from None
        upload_names[item.id] = name
        while len(upload_names) > 256:
            upload_names.pop(next(iter(upload_names)))
        in_gallery = rec.id in gallery
        return {"upload_id": item.id, "width": item.width, "height": item.height, "bytes": len(data),
                "gallery_id": rec.id if in_gallery else None}

    # ------------------------------------------------------------------ search

    def prepare(req: SearchRequest) -> PreparedSearch:
        """Everything a request can get wrong, checked before any model loads: the web's bounds, method,
        parameters (validated and bounded), reference. Returns the prepared search (:meth:`Workspace.prepare`)."""
        try:
            check_request(req)
        except RequestLimitError as exc:  # answered like pydantic's own errors: 422, where and why
            raise RequestValidationError([{"loc": ("body", exc.field), "msg": str(exc), "type": exc.kind}]) \
                from None
        if req.reference and req.reference_upload:
            raise HTTPException(400, "give a reference or a reference_upload, not both")
        ref: ImageRecord | None = None
        if req.reference:
            # Only gallery ids: a reference given as a path would let a page read any file on this machine.
            if not isinstance(req.reference, str) or req.reference not in gallery:
                raise HTTPException(400, f"reference {str(req.reference)[:200]!r} is not an image id in the gallery")
            ref = gallery.record(req.reference)
        elif req.reference_upload:
            item = uploads.get(req.reference_upload)
            if item is None:
                raise HTTPException(400, "unknown or expired reference_upload; upload the image again")
            ref = uploads.record(item, gallery)
            if ref.id not in gallery:
                ref = _uploaded_record(ref, upload_names.get(item.id, ""))
        if req.where is not None:
            where_rows(gallery, req.where)  # a bad expression: 400 with where and why, before anything runs
        if req.like is not None and (not isinstance(req.like, str) or req.like not in gallery):  # never a path
            raise HTTPException(400, f"like {str(req.like)[:200]!r} is not an image id in the gallery")
        # The server's own index, the reference resolved: the fields a client never chooses.
        request = req.model_copy(update={"reference": ref, "reference_upload": None, "index": index, "query": None})
        try:
            return workspace.prepare(request, check_params=check_params)
        except TaskMismatch as exc:
            need = ("needs a reference image: press 'use as reference' on a result, or upload one"
                    if ref is None else "takes no reference image: clear it")
            raise HTTPException(400, f"method {req.method!r} {need} (it handles {sorted(exc.tasks)} queries)") \
                from None

    def new_trace(req: SearchRequest) -> Trace:
        cap = opts.max_calls_per_search
        return Trace(max_calls=min(cap, req.max_calls) if req.max_calls is not None else cap)

    def payload(result: Result, req: SearchRequest | None = None) -> dict[str, Any]:
        data = json.loads(result_json(result, gallery))
        if req is not None:  # what the results are restricted to and ordered by, shown with them
            data["filter"] = {"where": req.where, "sort": req.sort,
                              "matches": result.trace.counters.get("where_matches")}
        if result.answer_set is not None:
            data["answer_set"] = list(result.answer_set)
            data["answer"] = [_card(gallery.record(i), gallery) for i in result.answer_set if i in gallery]
        return data

    @app.post("/api/search")
    def search(req: SearchRequest) -> JSONResponse:
        # A plain ``def``: FastAPI runs it in a worker thread, so a slow model call does not block the page.
        prepared = prepare(req)
        try:
            with jobs.admit():  # the same limit as background searches
                return JSONResponse(payload(workspace.run(prepared, trace=new_trace(req)), req))
        except TooManySearches as exc:
            raise HTTPException(429, str(exc)) from None

    @app.post("/api/searches", status_code=202)
    def start_search(req: SearchRequest) -> dict[str, Any]:
        prepared = prepare(req)
        try:
            estimate: int | None = prepared.estimate
        except Exception:  # an estimate is a courtesy: never a reason to refuse the search
            estimate = None
        trace = new_trace(req)
        try:
            job = jobs.start(trace, req.method, estimate, lambda t: payload(workspace.run(prepared, trace=t), req),
                             describe_error)
        except TooManySearches as exc:
            raise HTTPException(429, str(exc)) from None
        return {"id": job.id, "events": f"/api/searches/{job.id}/events", "estimate": estimate,
                "max_calls": trace.max_calls}

    def job_or_404(job_id: str) -> Any:
        job = jobs.get(job_id)
        if job is None:
            raise HTTPException(404, f"no search {job_id[:100]!r} (finished searches are kept for a while)")
        return job

    @app.get("/api/searches/{job_id}/events")
    async def events(job_id: str, request: Request) -> StreamingResponse:
        job = job_or_404(job_id)
        last = request.headers.get("last-event-id", "")
        start = int(last) + 1 if last.isdigit() and len(last) < 12 else 0

        async def stream() -> AsyncIterator[str]:
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

        # watched: while the stream is open the search counts as listened to; abandoned, it is cancelled
        return StreamingResponse(job.watched(stream()), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @app.post("/api/searches/{job_id}/cancel")
    def cancel(job_id: str) -> dict[str, Any]:
        job = job_or_404(job_id)
        job.cancel()
        return {"id": job.id, "cancelled": not job.done or job.events[-1][0] == "cancelled", "done": job.done}

    hosts = HostPolicy([*opts.allowed_hosts, *allowed_hosts])
    return Guard(app, hosts, token, opts.max_json_bytes, opts.max_upload_bytes)


def _as_jpeg(data: bytes, max_pixels: int) -> bytes:
    """A HEIC/HEIF photo's bytes as a JPEG a browser can show (decoded within the pixel limit)."""
    import io

    from imagent.core.imageio import image_from_bytes

    try:
        im = image_from_bytes(data, max_pixels)
    except ImageLoadError as exc:
        raise HTTPException(409, f"the photo cannot be decoded for display ({exc})") from None
    out = io.BytesIO()
    im.save(out, "JPEG", quality=90)
    return out.getvalue()


def _card(rec: ImageRecord, gallery: Any = None) -> dict[str, Any]:
    """A photo as the page shows it; ``labels``: what the pixel model saw, ``[{"name", "p"}]`` best first;
    ``people``: the groups whose faces it holds, ``[{"id", "name"}]``."""
    from imagent.index.people import photo_people

    return {"id": rec.id, "caption": rec.caption, "path": rec.path,
            "taken": rec.taken_time.isoformat() if rec.taken_time else None, "place": record_place(rec),
            "labels": card_labels(rec, gallery) if gallery is not None else shown_labels(rec),
            "people": photo_people(gallery, rec.id) if gallery is not None else []}


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


def serve(workspace: Workspace, index: str | Path | None = None, host: str = "127.0.0.1", port: int = 8765,
          token: str | None = None, allowed_hosts: Iterable[str] = (), on_listening: Any = None) -> None:
    """Run the server until interrupted. ``on_listening(server)`` runs once the socket accepts
    connections (the CLI prints the address then, not before: a busy port fails first)."""
    import uvicorn

    app = create_app(workspace, index, token=token, allowed_hosts=allowed_hosts)  # a missing index fails here
    sock = listen_socket(host, port)  # a busy port fails here, before anything is announced
    root = workspace.gallery(index).root

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                write_discovery(root, host, port, token)
                if on_listening is not None:
                    on_listening()
                # Load the encoders now, not on the first search (LLMs load when a method first calls one);
                # a failure here is reported by that search.
                threading.Thread(target=_warm_up, args=(workspace, index), name="warm-up", daemon=True).start()

        async def shutdown(self, sockets: Any = None) -> None:
            # Here, not only in ``finally``: uvicorn re-raises SIGTERM/SIGINT after its shutdown, which ends
            # the process before ``run`` returns.
            await super().shutdown(sockets=sockets)
            remove_discovery(root)

    server = Server(uvicorn.Config(app, log_level="warning"))
    try:
        server.run(sockets=[sock])
    finally:
        remove_discovery(root)
        sock.close()


def _warm_up(workspace: Workspace, index: str | Path | None) -> None:
    with contextlib.suppress(Exception):  # the first search reports the same error to the user
        workspace.context(index)


class ServeError(ValueError):
    """The server cannot start (port busy, address not available); the message says what to do."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, or :class:`ServeError` naming the problem."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ServeError(f"cannot listen on {host!r}: {exc.strerror or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart right after a stop (TIME_WAIT)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServeError(f"port {port} on {host} is already in use (another imagent serve?); "
                             f"stop it or choose another port with --port") from None
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
