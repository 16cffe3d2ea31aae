"""The web UI: one page that runs a search and shows each step of the method's trace.

The page is static HTML + JavaScript (no build step); it talks to a small JSON API over the same
:class:`~imagent.api.Workspace` the CLI uses, and renders the same trace the CLI prints and the eval
report summarises. Everything the API returns is shown as text, never as HTML: captions, model output
and web titles are data.

API
  ``GET  /api/info``           the gallery (size, location) and the methods with their defaults
  ``POST /api/search``         ``{text, method, top_k, reference, keep_reference, params}`` -> results + trace
  ``GET  /api/images/{id}``    a gallery image's file (only ids in the gallery; 404 otherwise)
  ``GET  /api/records/{id}``   a gallery record (caption, metadata), e.g. to show a chosen reference
"""

from __future__ import annotations

import mimetypes
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from imagent.api import Workspace, user_error_types
from imagent.models.base import ChatError

STATIC = resources.files("imagent.server") / "static"


class SearchRequest(BaseModel):
    text: str = Field(min_length=1, max_length=2000)
    method: str = "clip"
    top_k: int = Field(10, ge=1, le=200)
    reference: str | None = None  # a gallery id
    keep_reference: bool = False
    params: dict[str, Any] = Field(default_factory=dict)  # the method's hyper-parameters for this search


def create_app(workspace: Workspace, index: str | Path | None = None) -> Any:
    """A FastAPI app serving ``workspace``'s gallery at ``index`` (the configured one by default)."""
    try:
        from fastapi import FastAPI, HTTPException
        from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
    except ImportError as exc:  # pragma: no cover - the [web] extra is missing
        raise ImportError(f"the web UI needs FastAPI and uvicorn ({exc}); install them with: "
                          'pip install "imagent[web]"') from exc

    from imagent.api import result_json
    from imagent.methods.base import describe_methods

    app = FastAPI(title="imagent", docs_url="/api/docs", openapi_url="/api/openapi.json")
    gallery = workspace.gallery(index)  # opened once: a missing index fails at start, not per request

    def user_error(_request: Any, exc: Exception) -> JSONResponse:
        # The same errors the CLI reports as one line: a bad method or parameter, a model server down.
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        if isinstance(exc, ChatError):
            return JSONResponse({"detail": f"model call failed: {msg}"}, status_code=502)
        return JSONResponse({"detail": msg}, status_code=400)

    for error_type in user_error_types():
        app.add_exception_handler(error_type, user_error)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return (STATIC / "index.html").read_text(encoding="utf-8")

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        item = STATIC / name
        if "/" in name or name.startswith(".") or not item.is_file():
            raise HTTPException(404, "no such file")
        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Response(item.read_bytes(), media_type=media)

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        methods = [{"name": name, **about} for name, about in describe_methods().items()]
        return {"gallery": {"root": str(gallery.root), "size": len(gallery)}, "methods": methods}

    @app.get("/api/records/{image_id}")
    def record(image_id: str) -> dict[str, Any]:
        if image_id not in gallery:
            raise HTTPException(404, f"no image {image_id!r} in the gallery")
        return gallery.record(image_id).to_dict()

    @app.get("/api/images/{image_id}")
    def image(image_id: str) -> FileResponse:
        # Only files the index recorded are served: the id is looked up, never used as a path.
        if image_id not in gallery:
            raise HTTPException(404, f"no image {image_id!r} in the gallery")
        path = Path(gallery.record(image_id).path or "")
        if not path.is_file():
            raise HTTPException(404, f"the file of {image_id!r} is not on disk")
        return FileResponse(path, headers={"Cache-Control": "max-age=3600"})

    @app.post("/api/search")
    def search(req: SearchRequest) -> Response:
        # A plain ``def``: FastAPI runs it in a worker thread, so a slow model call does not block the page.
        if req.reference and req.reference not in gallery:
            # Only gallery ids: a reference given as a path would let a page read any file on this machine.
            raise HTTPException(400, f"reference {req.reference!r} is not an image id in the gallery")
        result = workspace.search(req.text, method=req.method, top_k=req.top_k, reference=req.reference or None,
                                  index=index, keep_reference=req.keep_reference, params=req.params)
        return Response(result_json(result, gallery), media_type="application/json")

    return app


def serve(workspace: Workspace, index: str | Path | None = None, host: str = "127.0.0.1", port: int = 8765) -> None:
    import uvicorn

    uvicorn.run(create_app(workspace, index), host=host, port=port, log_level="warning")
