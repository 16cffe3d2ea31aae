"""The web UI: its JSON API (in-process client) and the page itself in a real headless Chromium,
against a real server on 127.0.0.1, over the stamps gallery with the real offline models
(MiniLM in caption mode; Qwen 0.5B in-process for the LLM method)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from imagent.api import Workspace  # noqa: E402
from imagent.core.config import Settings  # noqa: E402
from imagent.server import create_app  # noqa: E402


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def live_server(workspace):
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(workspace), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the web server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def chromium_path() -> str:
    path = os.environ.get("IMAGENT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium); CI installs it")
    return path


@pytest.fixture
def page():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium_path(), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page
        browser.close()
        assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.mark.real_model
def test_page_runs_searches_and_shows_each_step(live_server, page, tmp_path):
    page.goto(live_server)
    page.wait_for_selector("#method option[value=imagescope]", state="attached")
    assert "627 images" in page.inner_text("#gallery-info")

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
    page.wait_for_function("document.querySelector('#results .result img.thumb')?.naturalWidth > 0")
    assert page.locator("#trace .step[data-step=retrieve]").count() == 1
    ref_id = first.get_attribute("data-id")

    # use it as the reference of a composed query with an LLM method (the real Qwen 0.5B)
    first.locator("button.use-reference").click()
    page.wait_for_selector("#reference-preview:not([hidden])")
    assert page.input_value("#reference") == ref_id
    page.fill("#query", "the same bird but swimming in water")
    page.select_option("#method", "cirevl")
    page.click("#search-button")
    page.wait_for_selector("#trace .step[data-step=edit_description]", timeout=120_000)
    trace_text = page.inner_text("#trace")
    assert "reference" in trace_text and "target_description" in trace_text
    assert "model calls" in page.inner_text("#trace-summary")
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


def test_imagent_serve_command(stamps_gallery, tmp_path):
    """The command users run: a real server process on 127.0.0.1 answering the API; a wrong index is one line."""
    import subprocess
    import sys

    import httpx

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGENT__") and k != "IMAGENT_CONFIG"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    proc = subprocess.Popen([sys.executable, "-m", "imagent.cli.main", "serve", "--index", str(stamps_gallery.root),
                             "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "imagent serve did not answer"
            try:
                info = httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=2).json()
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert info["gallery"]["size"] == 627
        assert "<title>imagent</title>" in httpx.get(f"http://127.0.0.1:{port}/").text
    finally:
        proc.terminate()
        proc.communicate(timeout=30)

    bad = subprocess.run([sys.executable, "-m", "imagent.cli.main", "serve", "--index", str(tmp_path / "none")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no gallery index" in bad.stderr
