"""How the web answers errors: one table from the library's, the search's and the request's error types to HTTP
statuses, installed on the app once (routes raise; they never translate).

- a request that does not validate: 422 with where and why (never the input echoed back: it may be large or not
  encodable), as ASCII JSON;
- a photo, face or group the index does not hold, a file no longer on disk, no face data: 404;
- a file changed since it was indexed, a photo that cannot be decoded for display: 409;
- a page, filter, name or other value a user can fix: 400; a model server that failed: 502.

Every message is redacted (:func:`imagent.core.redact.redact`: a server's error text may echo the API key) and its
text cleaned of lone surrogates.
"""

from __future__ import annotations

import json
from typing import Any

from imagent.api import user_error_types
from imagent.core.redact import redact
from imagent.core.text import clean_text
from imagent.index.face_store import FaceDataMissing
from imagent.index.people import PeopleError, UnknownPeople
from imagent.library import CannotShow, PhotoChanged, PhotoGone, UnknownPhoto
from imagent.library.days import PageError
from imagent.models.base import ChatError
from imagent.tools.filter_lang import FilterError

try:
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
except ImportError as exc:  # pragma: no cover - the [web] extra is missing
    raise ImportError(f"the web UI needs FastAPI ({exc}); install it with: pip install \"imagent[web]\"") from exc

NO_FACE_DATA = "this index has no face data: `imagent index` finds faces in photo folders (faces.mode)"

# The most specific type wins (Starlette looks an exception's classes up in method-resolution order).
STATUS: dict[type[BaseException], int] = {
    UnknownPhoto: 404, PhotoGone: 404, UnknownPeople: 404, FaceDataMissing: 404,
    PhotoChanged: 409, CannotShow: 409,
    PageError: 400, FilterError: 400, PeopleError: 400,
}


def describe_error(exc: BaseException) -> tuple[int, str] | None:
    """``(status, message)`` for an error a user can act on; None for anything else (an internal error)."""
    status = next((s for t, s in STATUS.items() if isinstance(exc, t)), None)
    if status is None and not isinstance(exc, user_error_types()):
        return None
    msg = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
    if isinstance(exc, FaceDataMissing):
        msg = NO_FACE_DATA
    elif isinstance(exc, PhotoGone):
        msg = f"the photo's file is not on disk ({msg})"
    elif isinstance(exc, PhotoChanged):
        msg = f"the photo's file changed since it was indexed ({msg}); re-run imagent index to show it"
    msg = clean_text(redact(msg))
    if isinstance(exc, ChatError):
        return 502, f"model call failed: {msg}"
    return status or 400, msg


def _answer(_request: Any, exc: Exception) -> JSONResponse:
    status, msg = describe_error(exc) or (500, "internal error")
    return JSONResponse({"detail": msg}, status_code=status)


def _invalid_request(_request: Any, exc: RequestValidationError) -> Response:
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
    return Response(json.dumps({"detail": errors}, default=str), status_code=422, media_type="application/json")


def install_error_policy(app: Any) -> None:
    """Answer every error above as JSON ``{"detail": ...}`` with its status."""
    for error_type in {*user_error_types(), *STATUS}:
        app.add_exception_handler(error_type, _answer)
    app.add_exception_handler(RequestValidationError, _invalid_request)


__all__ = ["NO_FACE_DATA", "describe_error", "install_error_policy"]
