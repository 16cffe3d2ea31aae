"""The web UI: its JSON API (in-process client) and the page itself in a real headless Chromium,
against a real server on 127.0.0.1, over the stamps gallery with the real offline models
(MiniLM in caption mode; Qwen 0.5B in-process for the LLM method)."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from imagent.api import Workspace  # noqa: E402
from imagent.core.config import Settings  # noqa: E402
from imagent.server import create_app  # noqa: E402
from testkit import free_port, wait_until  # noqa: E402


@pytest.fixture
def workspace(stamps_gallery, monkeypatch, offline_model_cache):
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(offline_model_cache))
    return Workspace(Settings(index=stamps_gallery.root, cache_dir=offline_model_cache))


@pytest.fixture
def client(workspace):
    return TestClient(create_app(workspace), base_url="http://127.0.0.1:8765")


def test_api_search_and_trace(client):
    info = client.get("/api/info").json()
    assert info["gallery"]["size"] == 627
    names = {m["name"] for m in info["methods"]}
    assert {"clip", "caption", "cirevl", "imagescope", "xr", "tacir"} <= names
    imagescope = next(m for m in info["methods"] if m["name"] == "imagescope")
    assert imagescope["defaults"]["tau"] == 0.15 and imagescope["defaults"]["k"] == 20

    res = client.post("/api/search", json={"text": "a penguin", "method": "caption", "top_k": 3})
    assert res.status_code == 200
    body = res.json()
    assert "penguin" in body["results"][0]["caption"].lower()
    assert [r["rank"] for r in body["results"]] == [1, 2, 3]
    assert body["trace"]["method"] == "caption" and body["trace"]["steps"][0]["name"] == "retrieve"

    # a composed query: the reference is left out of its own results unless kept
    ref = body["results"][0]["id"]
    cir = client.post("/api/search", json={"text": "a penguin", "method": "clip", "reference": ref, "top_k": 5})
    assert ref not in [r["id"] for r in cir.json()["results"]]
    kept = client.post("/api/search", json={"text": "a penguin", "method": "clip", "reference": ref, "top_k": 5,
                                            "keep_reference": True})
    assert ref in [r["id"] for r in kept.json()["results"]]

    # method parameters for one search
    weighted = client.post("/api/search", json={"text": "red", "method": "clip", "reference": ref,
                                                "params": {"text_weight": 1.0}, "top_k": 3})
    assert weighted.status_code == 200

    rec = client.get(f"/api/records/{ref}").json()
    assert rec["id"] == ref and rec["captions"]
    img = client.get(f"/api/images/{ref}")
    assert img.status_code == 200 and img.headers["content-type"] == "image/jpeg" and len(img.content) > 1000


def test_api_errors_are_clear(client):
    cases = [
        ({"text": "x", "method": "nope"}, 400, "unknown method"),
        ({"text": "x", "method": "caption", "params": {"bogus": 1}}, 400, "bogus"),
        ({"text": "x", "method": "imagescope", "params": {"tau": 2}}, 400, "tau"),
        # only gallery ids: a path would let a page read any file on the server
        ({"text": "x", "reference": "/etc/passwd"}, 400, "not an image id in the gallery"),
        ({"text": "x", "method": "xr"}, 400, "cir"),  # X^R needs a reference
    ]
    for body, status, words in cases:
        res = client.post("/api/search", json=body)
        assert res.status_code == status, (body, res.text)
        assert words in str(res.json()["detail"]), (body, res.text)
    assert client.post("/api/search", json={"text": ""}).status_code == 422
    assert client.get("/api/images/no-such-id").status_code == 404
    assert client.get("/api/records/no-such-id").status_code == 404
    assert client.get("/static/missing.js").status_code == 404


# ------------------------------------------------------------------ the page in a real browser


@pytest.fixture
def live_server(workspace, serve_app):
    return serve_app(create_app(workspace))


@pytest.mark.real_model
def test_page_runs_searches_and_shows_each_step(live_server, page, tmp_path):
    page.goto(live_server)
    page.wait_for_selector("#method option[value=imagescope]", state="attached")
    page.wait_for_selector("#gallery-info:has-text('627 photos')")
    page.click("#advanced summary")  # methods, parameters, reference and trace are under Advanced

    # a text query with the caption baseline
    page.fill("#query", "a penguin")
    page.select_option("#method", "caption")
    page.fill("#top-k", "5")
    page.click("#search-button")
    page.wait_for_selector("#results .result")
    first = page.locator("#results .result").first
    assert "penguin" in first.inner_text().lower()
    assert page.locator("#results .result").count() == 5
    # thumbnails are the real stamp images, decoded by the browser
    wait_until(lambda: page.locator("#results .result img.thumb").first.evaluate("img => img.naturalWidth") > 0)
    assert page.locator("#trace .step[data-step=retrieve]").count() == 1
    ref_id = first.get_attribute("data-id")

    # use it as the reference of a composed query with an LLM method (the real Qwen 0.5B)
    first.locator("button.use-reference").click()
    page.wait_for_selector("#reference-preview:not([hidden])")
    assert page.input_value("#reference") == ref_id
    page.fill("#query", "the same bird but swimming in water")
    page.select_option("#method", "cirevl")
    page.click("#search-button")
    page.wait_for_selector("#trace .step[data-step=edit_description]:not(.running)", timeout=120_000)
    page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')")
    trace_text = page.inner_text("#trace")
    assert "reference" in trace_text and "target_description" in trace_text
    assert re.search(r"\b1 model call\b|\d+ model calls", page.inner_text("#trace-summary"))  # in the right number
    ids = page.locator("#results .result").evaluate_all("els => els.map(e => e.dataset.id)")
    assert ids and ref_id not in ids
    page.screenshot(path=str(tmp_path / "web-ui.png"), full_page=True)

    # a bad parameter: one clear message on the page, the previous results kept
    page.click("#params-box summary")
    page.fill("#params", "bogus=1")
    page.click("#search-button")
    page.wait_for_selector("#status.error")
    assert "bogus" in page.inner_text("#status")
    assert page.locator("#results .result").count() == len(ids)



# ------------------------------------------------------------------ a long search, live, in the page


@pytest.fixture
def album_workspace(tmp_path, caption_dual, minilm, scripted_slow, make_png):
    """Five real PNGs with dates and places, every role on the scripted chat backend."""
    import json

    from imagent.core.config import ChatModelConfig
    from imagent.core.types import ImageRecord
    from imagent.index.embedding import gallery_from_records

    colors = [(200, 30, 30), (30, 160, 30), (30, 30, 200), (200, 200, 30), (120, 30, 160)]
    records = [ImageRecord(id=f"trip/day{i}.png", path=str(make_png(tmp_path / f"p{i}.png", c)),
                           captions=[f"photo {i}"], taken_time=datetime(2019, 6, 9 + i, 10, 0),
                           address="Paris" if i % 2 else None, latitude=48.85, longitude=2.35)
               for i, c in enumerate(colors)]
    gallery = gallery_from_records(str(tmp_path / "index"), records, caption_dual, minilm)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": "thinking"}))
    settings = Settings(index=gallery.root, cache_dir=tmp_path / "cache", cache_calls=False,
                        models={"scripted": ChatModelConfig(backend="scripted", model=str(script))},
                        roles={"default": "scripted"})
    return Workspace(settings)


def test_page_streams_a_long_search_cancels_it_and_takes_an_upload(album_workspace, serve_app, page, make_png,
                                                                      tmp_path):
    """A deliberately slow scripted method (``scripted_slow``: each turn sleeps, then calls the scripted
    backend): its steps appear while it runs, the old results dim, Cancel stops it on the server; agent
    turns show their photos with date and place; the answer set is shown apart; an uploaded reference
    previews and is used; a cleared reference loses its preview."""
    page.goto(serve_app(create_app(album_workspace)))
    page.wait_for_selector("#method option[value=scripted_slow]", state="attached")
    page.click("#advanced summary")
    page.fill("#query", "the photos of the second day")
    page.select_option("#method", "scripted_slow")
    page.click("#params-box summary")
    page.fill("#params", "steps=2\ndelay_s=0")
    page.click("#search-button")
    page.wait_for_selector("#answer-box:not([hidden]) #answer .result")
    assert page.locator("#answer .result").count() == 2 and "2 photos" in page.inner_text("#answer-count")
    assert page.locator("#results .result").count() == 5
    turn = page.locator("#trace .step.turn[data-step='turn.1']")
    assert "ImageSearch" in turn.locator(".tool-call").inner_text()
    page.wait_for_selector("#trace .step.turn .when-where:has-text('2019-06-10 10:00 · Paris')")
    assert "2019-06-09 10:00" in page.inner_text("#answer")  # answer cards carry date and place too

    # a long search: steps stream in while the old results stay, dimmed; Cancel stops it on the server
    page.fill("#params", "steps=40\ndelay_s=0.15")
    page.click("#search-button")
    # The first search's trace also has a turn.2: wait until the new search has replaced it (dimming the results).
    page.wait_for_selector("#results.stale")
    page.wait_for_selector("#trace .step[data-step='turn.2']")
    assert page.locator("#results.stale .result").count() == 5
    assert page.is_visible("#cancel-button")
    page.wait_for_selector("#status:has-text('step turn.')")
    assert "/ ~40 model calls" in page.inner_text("#status")
    page.click("#cancel-button")
    page.wait_for_selector("#status:has-text('cancelled')")
    ran = page.locator("#trace .step").count()
    assert 2 <= ran < 40
    assert page.locator("#results .result").count() == 5 and page.locator("#results.stale").count() == 0
    assert not page.is_visible("#cancel-button")
    time.sleep(0.5)
    assert len(album_workspace.chat_model("scripted").calls) <= 2 + ran  # nothing ran on after the cancel

    # a reference from disk: uploaded, previewed from the page's own copy, used by the next search
    photo = make_png(tmp_path / "from-disk.png", (10, 10, 10), (64, 48))
    page.set_input_files("#upload-input", str(photo))
    try:
        page.wait_for_selector("#reference-preview:not([hidden])", timeout=5000)
    except Exception:
        raise AssertionError(page.inner_text("#status")) from None
    assert "uploaded, 64×48" in page.inner_text("#reference-preview figcaption")
    page.fill("#params", "steps=1\ndelay_s=0")
    page.click("#search-button")
    page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')")
    assert "from-disk" not in page.inner_text("#results")
    # drag-and-drop onto the reference row uploads the same way
    dropped = list(make_png(tmp_path / "dropped.png", (250, 250, 0), (20, 10)).read_bytes())
    transfer = page.evaluate_handle("""(bytes) => { const dt = new DataTransfer();
        dt.items.add(new File([new Uint8Array(bytes)], "dropped.png", { type: "image/png" })); return dt; }""", dropped)
    page.dispatch_event("#reference-row", "drop", {"dataTransfer": transfer})
    page.wait_for_selector("#reference-preview figcaption:has-text('dropped.png (uploaded, 20×10)')")
    # an uploaded non-image is refused with the reason
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    page.set_input_files("#upload-input", str(bad))
    page.wait_for_selector("#status.error")
    assert "not a usable image" in page.inner_text("#status")

    # a gallery reference, then clear: its preview goes away (a CSS rule used to override `hidden`)
    page.locator("#results .result button.use-reference").first.click()
    page.wait_for_selector("#reference-preview:not([hidden])")
    assert page.is_visible("#reference-preview")
    page.click("#clear-reference")
    page.wait_for_selector("#reference-preview", state="hidden")
    assert page.input_value("#reference") == ""


def _serve(root, port, env, *extra):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "imagent.cli.main", "serve", "--index", str(root), "--port",
                             str(port), *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _cli(env, *args, timeout=180):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "imagent.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_imagent_serve_command(stamps_gallery, tmp_path, monkeypatch):
    """The command users run: the address is printed only once the server listens (a busy port or a missing
    index is one clear error and no address); a token guards it; it announces itself in the index folder,
    and `imagent search` on that index is answered by it."""
    import json
    import stat

    import httpx

    from imagent.server.discovery import discovery_path


    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGENT__") and k != "IMAGENT_CONFIG"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    root = stamps_gallery.root
    proc = _serve(root, port, env, "--token", "tok-123")
    try:
        line = proc.stdout.readline()  # blocks until the server says where it is
        assert f"http://127.0.0.1:{port}/?token=tok-123" in line, line + proc.stderr.read()[-2000:]
        # printed only once listening: the very first request succeeds, no retry needed
        auth = {"Authorization": "Bearer tok-123"}
        info = httpx.get(f"http://127.0.0.1:{port}/api/info", headers=auth, timeout=5).json()
        assert info["gallery"]["size"] == 627
        assert httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=5).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/api/info", headers={**auth, "Host": "evil.example"},
                         timeout=5).status_code == 400
        found = discovery_path(root)
        data = json.loads(found.read_text())
        assert data["port"] == port and data["pid"] == proc.pid and data["token"] == "tok-123"
        assert stat.S_IMODE(found.stat().st_mode) == 0o600  # it holds the token

        # a second server on the same port: one clear error, no address printed
        busy = _serve(root, port, env)
        out, err = busy.communicate(timeout=120)
        assert busy.returncode == 2 and "already in use" in err and "http://" not in out

        # `imagent search` on the served index is answered by the server (its models are loaded)
        served = _cli(env, "search", "a penguin", "--method", "caption", "--index", str(root), "--json", "-k", "3")
        assert served.returncode == 0, served.stderr[-2000:]
        assert "answered by imagent serve" in served.stderr
        rows = json.loads(served.stdout)["results"]
        assert "penguin" in rows[0]["caption"].lower() and len(rows) == 3
        # without --method: the method is chosen here (no model loaded) and the server answers
        auto = _cli(env, "search", "a penguin", "--index", str(root), "--json", "-k", "3")
        assert auto.returncode == 0 and "answered by imagent serve" in auto.stderr, auto.stderr[-2000:]
        assert "method: caption" in auto.stderr and json.loads(auto.stdout)["results"] == rows
        refused = _cli(env, "search", "x", "--method", "caption", "--index", str(root), "--set", "bogus=1")
        assert refused.returncode == 2 and "bogus" in refused.stderr
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode is not None and not discovery_path(root).exists()  # removed on exit

    # a discovery file left by a dead server is ignored: the search runs in-process
    discovery_path(root).write_text(json.dumps({"port": port, "pid": 2**22 + 12345, "host": "127.0.0.1"}))
    try:
        local = _cli(env, "search", "a penguin", "--method", "caption", "--index", str(root), "-k", "1")
        assert local.returncode == 0 and "answered by" not in local.stderr, local.stderr[-2000:]
    finally:
        discovery_path(root).unlink()

    bad = _cli(env, "serve", "--index", str(tmp_path / "none"), timeout=120)
    assert bad.returncode == 2 and "no gallery index" in bad.stderr and "http://" not in bad.stdout
