"""The web UI: one page that runs a search and shows each step of the method's trace as it happens, and the photo
app around it (the library, a photo, People).

The page is static HTML + JavaScript (no build step); it talks to a small JSON API over the same
:class:`~imagent.api.Workspace` the CLI uses, and renders the same trace the CLI prints and the eval
report summarises. Everything the API returns is shown as text, never as HTML: captions, model output
and web titles are data.

:func:`create_app` only assembles: one :class:`~imagent.library.LibraryService` (photos, cards, days, thumbnails,
people, face crops), the routers over it (:mod:`imagent.server.library`, :mod:`imagent.server.people`) and over the
searches (:mod:`imagent.server.search`), the error policy (:mod:`imagent.server.errors`) and the trust policy
(:mod:`imagent.server.security`: Host, token, body size, headers; :mod:`imagent.server.limits`: the request's fields
and the method parameters; each search's model calls are capped by ``server.max_calls_per_search``).

API
  ``GET  /api/info``                    the gallery (with its build ``generation``), the methods with their
                                        defaults, the server's limits
  ``POST /api/search``, ``/api/searches``, ``/api/uploads``: searches (:mod:`imagent.server.search`)
  ``/api/library``, ``/api/photos/{id}``, ``/api/images/{id}``, ``/api/records/{id}``, ``/api/thumbnails/...``: the
                                        library (:mod:`imagent.server.library`)
  ``/api/people``, ``/api/faces/...``  people and face crops (:mod:`imagent.server.people`)

The server serves the index as it is now: after ``imagent index`` commits a build, the next request sees it (no
restart).
"""

from __future__ import annotations

import contextlib
import errno
import mimetypes
import socket
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from imagent.api import Workspace
from imagent.core.text import display_path
from imagent.library import LibraryService
from imagent.methods.base import describe_methods
from imagent.server.discovery import remove_discovery, write_discovery
from imagent.server.errors import install_error_policy
from imagent.server.jobs import SearchJobs
from imagent.server.library import library_router, pages_router
from imagent.server.limits import MAX_TOP_K
from imagent.server.people import people_router
from imagent.server.search import Searches, search_router
from imagent.server.security import Guard, HostPolicy, csp_for_html
from imagent.server.uploads import UploadStore

try:
    from fastapi import APIRouter, FastAPI, HTTPException
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse, Response
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI and uvicorn ({exc}); install them with: "
                      'pip install "imagent[web]"') from exc

STATIC = resources.files("imagent.server") / "static"


def create_app(workspace: Workspace, index: str | Path | None = None, token: str | None = None,
               allowed_hosts: Iterable[str] = ()) -> Any:
    """A FastAPI app serving ``workspace``'s gallery at ``index`` (the configured one by default): the routers over
    one :class:`~imagent.library.LibraryService` (a missing index fails here, not per request), the error policy
    (:mod:`imagent.server.errors`) and, around it all, the Host, token and size checks
    (:mod:`imagent.server.security`).

    ``token``: required from every client when given; ``allowed_hosts``: ``Host`` names answered besides
    the loopback ones and ``server.allowed_hosts``."""
    opts = workspace.settings.server
    library = LibraryService(workspace, index)
    jobs = SearchJobs(opts.max_running_searches, opts.abandoned_search_grace_s)
    uploads = UploadStore(opts.upload_ttl_s, opts.max_upload_pixels, opts.max_upload_decode_bytes)

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        jobs.cancel_all()  # a search still running stops at its next step
        uploads.close()

    app = FastAPI(title="imagent", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json",
                  description="Search a gallery and watch each step of the method's trace.", lifespan=lifespan)
    app.state.jobs, app.state.uploads, app.state.library = jobs, uploads, library
    install_error_policy(app)
    app.include_router(_page_router(library))
    app.include_router(pages_router(_page))
    app.include_router(library_router(library))
    app.include_router(people_router(library))
    app.include_router(search_router(Searches(workspace, library, index, jobs, uploads)))
    hosts = HostPolicy([*opts.allowed_hosts, *allowed_hosts])
    return Guard(app, hosts, token, opts.max_json_bytes, opts.max_upload_bytes)


def _page() -> HTMLResponse:
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"), headers={"Cache-Control": "no-store"})


def _page_router(library: LibraryService) -> APIRouter:
    """The page, its static files, the API's own docs and ``/api/info`` (the library, its build generation, the
    methods with their defaults, the server's limits)."""
    router = APIRouter()
    opts = library.settings.server
    shipped = {item.name for item in STATIC.iterdir() if item.is_file() and not item.name.startswith(".")}

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return _page()

    @router.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in shipped:  # the name is matched against what ships, never used to build a path first
            raise HTTPException(404, "no such file")
        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Response((STATIC / name).read_bytes(), media_type=media)

    @router.get("/api/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        html = get_swagger_ui_html(openapi_url="/api/openapi.json", title="imagent API")
        text = bytes(html.body).decode("utf-8")
        return HTMLResponse(text, headers={"Content-Security-Policy": csp_for_html(text)})

    @router.get("/api/info")
    def info() -> dict[str, Any]:
        gallery = library.gallery  # the index as it is now: a client compares the generation with its own
        methods = [{"name": name, **about} for name, about in describe_methods().items()]
        return {"gallery": {"root": display_path(gallery.root), "size": len(gallery), "sources":
                            [display_path(s) for s in gallery.sources()], "generation": gallery.loaded_generation},
                "methods": methods,
                "limits": {"max_upload_bytes": opts.max_upload_bytes, "max_calls_per_search": opts.max_calls_per_search,
                           "top_k": MAX_TOP_K}}

    return router


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
