"""Background searches streamed as server-sent events, cancel, uploads of reference images (issue 15
items 4 and 6, issue 13 item 7's answer set). The long search is the test-only ``scripted_slow``
method: its turns sleep and call the scripted chat backend, so timing and outcome are deterministic."""

from __future__ import annotations

import io
import json
import time

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from imagent.core.config import ServerOptions  # noqa: E402
from imagent.server import create_app  # noqa: E402

LOCAL = "http://127.0.0.1:8765"
PNG = {"Content-Type": "image/png"}  # uploads are sent as images


@pytest.fixture
def client(scripted_workspace):
    return TestClient(create_app(scripted_workspace), base_url=LOCAL)


def events(client, url, headers=None, until=None):
    """(id, event, data) of a search's stream until its final event; ``until(event, data)`` may act on
    each event as it arrives (e.g. press cancel)."""
    out = []
    with client.stream("GET", url, headers=headers or {}) as res:
        assert res.status_code == 200 and res.headers["content-type"].startswith("text/event-stream")
        ident, name, data = None, None, None
        for line in res.iter_lines():
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and name is not None:
                out.append((ident, name, data))
                if until is not None:
                    until(name, data)
                if name in {"result", "error", "cancelled"}:
                    break
                ident, name, data = None, None, None
    return out


def start(client, **body):
    res = client.post("/api/searches", json={"text": "a penguin", "method": "scripted_slow", **body})
    assert res.status_code == 202, res.text
    return res.json()


def test_steps_stream_as_they_happen_then_the_result(client):
    job = start(client, params={"steps": 3, "delay_s": 0.05}, top_k=4)
    assert job["estimate"] == 3 and job["max_calls"] == 2000
    got = events(client, job["events"])
    names = [(e, d.get("name")) for _, e, d in got if e in {"step_start", "step_end"}]
    assert names == [("step_start", "turn.1"), ("step_end", "turn.1"), ("step_start", "turn.2"),
                     ("step_end", "turn.2"), ("step_start", "turn.3"), ("step_end", "turn.3")]
    assert got[0][1] == "started" and [i for i, _, _ in got] == list(range(len(got)))
    calls = [d for _, e, d in got if e == "call"]
    assert len(calls) == 3 and all(c["step"].startswith("turn.") for c in calls)
    # each call arrives inside its step, before the step ends
    order = [e if e != "call" else f"call:{d['step']}" for _, e, d in got]
    assert order.index("call:turn.2") < order.index("step_end", order.index("call:turn.1") + 2)
    turn = next(d for _, e, d in got if e == "step_end")
    assert turn["outputs"]["tool"] == "ImageSearch" and len(turn["outputs"]["photos"]) == 3
    final = got[-1]
    assert final[1] == "result"
    result = final[2]
    assert len(result["results"]) == 4 and result["trace"]["model_calls"] == 3
    assert result["answer_set"] == [r["id"] for r in result["results"][:2]]
    assert [a["id"] for a in result["answer"]] == result["answer_set"] and "caption" in result["answer"][0]

    # a reconnecting EventSource sends Last-Event-ID and gets only what it missed
    replay = events(client, job["events"], headers={"Last-Event-ID": "3"})
    assert [i for i, _, _ in replay] == list(range(4, len(got)))


def test_cancel_stops_the_search_on_the_server(client, scripted_workspace):
    job = start(client, params={"steps": 60, "delay_s": 0.05})
    model = scripted_workspace.chat_model("scripted")
    pressed = []

    def cancel_after_first_turn(name, data):
        if name == "step_end" and not pressed:
            pressed.append(client.post(f"/api/searches/{job['id']}/cancel").json())
            pressed.append(len(model.calls))

    got = events(client, job["events"], until=cancel_after_first_turn)
    assert pressed and pressed[0]["cancelled"] is True
    assert got[-1][1] == "cancelled" and got[-1][2]["detail"] == "search cancelled"
    turns = [d["name"] for _, e, d in got if e == "step_start"]
    assert len(turns) < 20  # stopped at the next step, not after 60
    time.sleep(0.3)
    assert len(model.calls) <= pressed[1] + 1  # at most the turn in flight made its call
    assert client.post(f"/api/searches/{job['id']}/cancel").json()["done"] is True


def test_errors_and_unknown_searches(client, scripted_workspace):
    assert client.get("/api/searches/nope/events").status_code == 404
    assert client.post("/api/searches/nope/cancel").status_code == 404
    assert client.get("/api/searches/a/b/events").status_code == 404
    bad = client.post("/api/searches", json={"text": "x", "method": "nope"})
    assert bad.status_code == 400 and "unknown method" in bad.json()["detail"]
    # a failure inside the search arrives as one error event with a clear message
    scripted_workspace.chat_model("scripted").default = None
    scripted_workspace.chat_model("scripted").rules = []
    job = start(client, params={"steps": 2, "delay_s": 0})
    final = events(client, job["events"])[-1]
    assert final[1] == "error" and final[2]["status"] == 502 and "no rule matches" in final[2]["detail"]


def test_running_searches_are_limited(scripted_workspace):
    scripted_workspace.settings.server = ServerOptions(max_running_searches=1)
    c = TestClient(create_app(scripted_workspace), base_url=LOCAL)
    job = start(c, params={"steps": 40, "delay_s": 0.05})
    res = c.post("/api/searches", json={"text": "x", "method": "scripted_slow"})
    assert res.status_code == 429 and "running" in res.json()["detail"]
    c.post(f"/api/searches/{job['id']}/cancel")
    assert events(c, job["events"])[-1][1] == "cancelled"
    assert c.post("/api/searches", json={"text": "x", "method": "caption"}).status_code == 202


# ------------------------------------------------------------------ uploads


def png_bytes(color=(10, 120, 200), size=(40, 30)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def test_an_uploaded_reference_is_verified_used_and_never_served(client, scripted_workspace):
    res = client.post("/api/uploads", content=png_bytes(), headers=PNG)
    assert res.status_code == 201, res.text
    up = res.json()
    assert up["width"] == 40 and up["height"] == 30 and up["gallery_id"] is None
    job = start(client, params={"steps": 1, "delay_s": 0}, reference_upload=up["upload_id"])
    final = events(client, job["events"])[-1]
    assert final[1] == "result"
    ref = final[2]["trace"]["query"]["reference"]
    assert ref["id"] and ref["id"] not in {r["id"] for r in final[2]["results"]}
    # the upload is nowhere to be fetched: not as an image, not by its upload id
    assert client.get(f"/api/images/{ref['id']}").status_code == 404
    assert client.get(f"/api/uploads/{up['upload_id']}").status_code in {404, 405}
    store = client.app.app.state.uploads if hasattr(client.app, "app") else None
    if store is not None:
        files = list(store.root.iterdir())
        assert len(files) == 1 and oct(files[0].stat().st_mode & 0o777) == "0o600"
        assert oct(store.root.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize(("body", "words"), [
    (b"", "empty"),
    (b"hello, not an image", "not a usable image"),
    (png_bytes()[:60], "not a usable image"),  # truncated
    (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "not a usable image"),  # PostScript is never parsed
])
def test_bad_uploads_are_refused(client, body, words):
    res = client.post("/api/uploads", content=body, headers=PNG)
    assert res.status_code == 415 and words in res.json()["detail"]


def test_unknown_or_expired_uploads(scripted_workspace):
    scripted_workspace.settings.server = ServerOptions(upload_ttl_s=0.05)
    c = TestClient(create_app(scripted_workspace), base_url=LOCAL)
    up = c.post("/api/uploads", content=png_bytes(), headers=PNG).json()
    time.sleep(0.1)
    res = c.post("/api/search", json={"text": "x", "method": "scripted_slow", "reference_upload": up["upload_id"]})
    assert res.status_code == 400 and "expired" in res.json()["detail"]
    res = c.post("/api/search", json={"text": "x", "reference": "a", "reference_upload": "b"})
    assert res.status_code == 400


def test_the_upload_folder_exists_only_while_uploads_can_be_kept(scripted_workspace):
    import gc

    from imagent.server.uploads import UploadStore

    idle = UploadStore(60.0, 10_000)
    assert idle._root is None  # an app that never takes an upload makes no folder
    store = UploadStore(60.0, 10_000)
    store.add(png_bytes())
    root = store.root
    assert len(list(root.iterdir())) == 1
    store.close()
    assert not root.exists()
    forgotten = UploadStore(60.0, 10_000)  # a server stopped without its shutdown hook
    forgotten.add(png_bytes())
    root = forgotten.root
    del forgotten
    gc.collect()
    assert not root.exists()
