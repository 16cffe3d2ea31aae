"""``imagent search`` through a running ``imagent serve`` on the same index.

The server has the models loaded, so the answer comes in a fraction of a second instead of a cold
start. The server announces itself in ``<index>/.imagent-server.json`` (see
:mod:`imagent.server.discovery`); this module trusts that file only when its process is alive and its
port answers, and falls back to searching in-process otherwise (``None``). ``--no-server`` skips it.

The server is asked only when it serves the same build of the index as this command sees (the gallery's build
generation, in ``/api/info`` and in the answer): right after ``imagent index`` the server has reopened the index at
its next request, and a server that has not (an older one) is not asked. The rows it returns say what matched each
photo (``matched_by``) as a search in this process would.

The search runs on the server's models and configuration, so it is only used when this command asks
for nothing the server cannot know: no ``--config`` file and only method parameters in ``--set``
(sent with the request, bounded by the server). The body is the same :class:`~imagent.api.SearchRequest` the
search would run in process (:meth:`~imagent.api.SearchRequest.wire`). A reference file is uploaded; a gallery
id is sent as is. The server streams the trace as it goes (the live status line gets the same events) and a
Ctrl-C cancels the search on the server. Standard library only: nothing heavy is imported on this path.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagent.server.discovery import discovery_path, pid_alive, read_discovery

if TYPE_CHECKING:
    from imagent.api import SearchRequest

CONNECT_TIMEOUT_S = 0.5


class ServedSearchError(ValueError):
    """The server refused the search (bad method, parameter, reference): its message, for the user."""


def find_server(index_root: str | Path) -> dict[str, Any] | None:
    """The discovery file's content when a live server on this index answers, else None; ``generation`` is the
    index build the server serves (None from a server that does not say)."""
    info = read_discovery(discovery_path(index_root))
    if info is None or not pid_alive(int(info["pid"])):
        return None
    try:
        status, reply = _request(info, "GET", "/api/info", timeout=CONNECT_TIMEOUT_S * 4)
    except OSError:
        return None
    if status != 200:
        return None
    gallery = reply.get("gallery") if isinstance(reply.get("gallery"), dict) else {}
    return {**info, "generation": gallery.get("generation")}


def _same_index(info: dict[str, Any], served: Any, generation: int | None) -> bool:
    """Whether the server answers from the index build this command sees (said on stderr when not)."""
    if generation is None or served == generation:
        return True
    sys.stderr.write(f"(imagent serve at {info.get('url')} serves build {served} of this index, this command sees "
                     f"build {generation}: searching in this process)\n")
    return False


def served_search_allowed(config: Path | None, sets: list[str], method: str, no_server: bool) -> bool:
    """Only when the server can answer what was asked: no config file, only this method's parameters
    (in ``--set`` or ``IMAGENT__METHODS__...`` variables; other settings may differ from the server's)."""
    env_ok = all(k.upper().startswith("IMAGENT__METHODS__") for k in os.environ if k.upper().startswith("IMAGENT__"))
    return not no_server and config is None and env_ok and all(s.startswith(f"methods.{method}.") for s in sets)


def try_served_search(index_root: str | Path, request: SearchRequest,
                      listener: Callable[[str, dict[str, Any]], None] | None = None,
                      generation: int | None = None) -> Any | None:
    """The :class:`~imagent.core.types.Result` of ``request`` from a server running on ``index_root``, or None
    when there is none (or it cannot be reached, or it serves another build of the index than ``generation``, the
    one this command sees: before the search and in its answer). Raises :class:`ServedSearchError` when the server
    refuses the request, and :class:`~imagent.models.base.ChatError` when its model calls failed."""
    if os.environ.get("IMAGENT_NO_SERVER"):
        return None
    info = find_server(index_root)
    if info is None or not _same_index(info, info.get("generation"), generation):
        return None
    body = request.wire()
    if request.reference is not None:
        ref_path = Path(request.reference).expanduser()
        if ref_path.is_file():
            status, reply = _request(info, "POST", "/api/uploads", ref_path.read_bytes(),
                                     "application/octet-stream")
            _raise_for(status, reply)
            body["reference"] = reply.get("gallery_id")
            body["reference_upload"] = None if reply.get("gallery_id") else reply["upload_id"]
    status, reply = _request(info, "POST", "/api/searches", json.dumps(body).encode("utf-8"), "application/json")
    _raise_for(status, reply)
    job = reply["id"]
    try:
        event, payload = _follow(info, reply["events"], listener)
    except KeyboardInterrupt:
        _request(info, "POST", f"/api/searches/{job}/cancel", b"", "application/json")
        raise
    if event == "result":
        if not _same_index(info, payload.get("generation"), generation):  # a build committed meanwhile
            return None
        sys.stderr.write(f"(answered by imagent serve at {info.get('url')}; --no-server searches in this process)\n")
        return result_from_payload(payload)
    if event == "cancelled":
        raise KeyboardInterrupt  # cancelled on the server (by the page or another client)
    _raise_for(int(payload.get("status", 500)), payload)
    return None


def result_from_payload(payload: dict[str, Any]) -> Any:
    """A :class:`Result` rebuilt from the web API's JSON (rows, trace, stages, answer set)."""
    from imagent.core.trace import CallRecord, Trace, TraceStep
    from imagent.core.types import MatchCut, Ranking, Result

    def ranking(d: dict[str, Any]) -> Ranking:
        return Ranking(list(d.get("ids", [])), [float(s) for s in d.get("scores", [])])

    t = payload.get("trace", {})
    call_fields = set(CallRecord.__dataclass_fields__)
    steps = [
        TraceStep(name=s["name"], inputs=s.get("inputs", {}), outputs=s.get("outputs", {}),
                  calls=[CallRecord(**{k: v for k, v in c.items() if k in call_fields}) for c in s.get("calls", [])],
                  notes=list(s.get("notes", [])), seconds=float(s.get("seconds", 0.0)))
        for s in t.get("steps", [])
    ]
    trace = Trace(method=t.get("method", ""), query=t.get("query", {}), steps=steps, counters=t.get("counters", {}))
    rows = payload.get("results", [])
    cut = payload.get("match_cut")  # where the matches stop: the rows' levels come back the same
    return Result(
        ranking=Ranking([r["id"] for r in rows], [float(r["score"]) for r in rows],
                        MatchCut(**{k: cut[k] for k in MatchCut.__dataclass_fields__ if k in cut})
                        if isinstance(cut, dict) and {"strong", "possible", "median", "spread", "photos"} <= set(cut)
                        else None),
        trace=trace,
        stages={k: ranking(v) for k, v in (payload.get("stages") or {}).items()},
        answer_set=payload.get("answer_set"),
        source=payload.get("source") or "method",
        source_reason=payload.get("source_reason") or "",
        counts={str(k): int(v) for k, v in (payload.get("counts") or {}).items()},
        warnings=[str(w) for w in payload.get("warnings") or []],
        spaces=[str(x) for x in payload.get("spaces") or []],
        understood=payload.get("understood") if isinstance(payload.get("understood"), dict) else None,
    )


def _raise_for(status: int, reply: dict[str, Any]) -> None:
    if status < 400:
        return
    detail = reply.get("detail") if isinstance(reply, dict) else None
    if isinstance(detail, list):  # request validation errors
        detail = "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in detail)
    message = f"{detail or f'HTTP {status}'} (from the imagent server; --no-server searches in this process)"
    if status == 502:
        from imagent.models.base import ChatError

        raise ChatError(message)
    raise ServedSearchError(message)


def _connection(info: dict[str, Any], timeout: float) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection(str(info.get("host") or "127.0.0.1"), int(info["port"]), timeout=timeout)
    conn.connect()
    return conn


def _headers(info: dict[str, Any], content_type: str | None = None) -> dict[str, str]:
    h = {"Host": f"127.0.0.1:{info['port']}", "Accept": "application/json"}
    if info.get("token"):
        h["Authorization"] = f"Bearer {info['token']}"
    if content_type:
        h["Content-Type"] = content_type
    return h


def _request(info: dict[str, Any], verb: str, path: str, body: bytes | None = None, content_type: str | None = None,
             timeout: float = 30.0) -> tuple[int, dict[str, Any]]:
    conn = _connection(info, CONNECT_TIMEOUT_S)
    try:
        conn.sock.settimeout(timeout)
        conn.request(verb, path, body=body, headers=_headers(info, content_type))
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        data = {"detail": raw[:200].decode("utf-8", "replace")}
    return resp.status, data if isinstance(data, dict) else {"value": data}


def _follow(info: dict[str, Any], path: str,
            listener: Callable[[str, dict[str, Any]], None] | None) -> tuple[str, dict[str, Any]]:
    """Read the search's event stream until its final event; pass the others to ``listener``."""
    conn = _connection(info, CONNECT_TIMEOUT_S)
    try:
        conn.sock.settimeout(None)  # a search may take minutes; the server sends keep-alives
        conn.request("GET", path, headers={**_headers(info), "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            return "error", {"status": resp.status, "detail": resp.read()[:500].decode("utf-8", "replace")}
        event, data = "message", ""
        while True:
            line = resp.readline()
            if not line:
                return "error", {"status": 502, "detail": "the server closed the stream before the search ended"}
            text = line.decode("utf-8").rstrip("\r\n")
            if text.startswith("event:"):
                event = text[6:].strip()
            elif text.startswith("data:"):
                data += text[5:].strip()
            elif text == "" and data:
                payload = json.loads(data)
                if event in {"result", "error", "cancelled"}:
                    return event, payload
                if listener is not None and event in {"step_start", "step_end", "call"}:
                    listener(event, payload)
                event, data = "message", ""
    finally:
        conn.close()
