"""The web server trusts nothing (issue 11 item 6): Host allow-list, token, body size limits, parameter
bounds and the per-search call cap, files re-checked before they are served, ids with ``/``, security
headers on every response, working OpenAPI docs. Over the real stamps gallery (MiniLM) or small
galleries built by the real indexer; LLM roles are the scripted backend."""

from __future__ import annotations

import os
import shutil

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from imagent.api import Workspace  # noqa: E402
from imagent.core.config import ServerOptions, Settings  # noqa: E402
from imagent.core.types import ImageRecord  # noqa: E402
from imagent.server import create_app  # noqa: E402
from imagent.server.limits import ParamLimitError, check_params  # noqa: E402

LOCAL = "http://127.0.0.1:8765"
PNG = {"Content-Type": "image/png"}  # uploads are sent as images


@pytest.fixture
def app(scripted_workspace):
    return create_app(scripted_workspace)


@pytest.fixture
def client(app):
    return TestClient(app, base_url=LOCAL)


# ------------------------------------------------------------------ Host and token


def test_only_loopback_hosts_are_answered_by_default(app):
    for base in ("http://127.0.0.1:8765", "http://localhost:9", "http://[::1]:8765", "http://LOCALHOST"):
        assert TestClient(app, base_url=base).get("/api/info").status_code == 200, base
    for base in ("http://evil.example", "http://evil.example:8765", "http://127.0.0.1.evil.example",
                 "http://localhost.evil.example"):
        res = TestClient(app, base_url=base).get("/api/info")
        assert res.status_code == 400, base
        assert "--allow-host" in res.json()["detail"]
    # a DNS-rebinding page reads nothing: not the page, not an image, not a record
    rebound = TestClient(app, base_url="http://attacker.example:8765")
    assert rebound.get("/").status_code == 400
    assert rebound.get("/api/images/x").status_code == 400


def test_configured_hosts(scripted_workspace):
    scripted_workspace.settings.server.allowed_hosts = ["photos.lan", "nas.local:8080"]
    app = create_app(scripted_workspace, allowed_hosts=["box"])
    assert TestClient(app, base_url="http://photos.lan:1234").get("/api/info").status_code == 200
    assert TestClient(app, base_url="http://box").get("/api/info").status_code == 200
    assert TestClient(app, base_url="http://nas.local:8080").get("/api/info").status_code == 200
    assert TestClient(app, base_url="http://nas.local:8081").get("/api/info").status_code == 400


def test_token_is_required_and_the_page_keeps_working_after_the_first_visit(scripted_workspace):
    app = create_app(scripted_workspace, token="s3cret-token")
    c = TestClient(app, base_url=LOCAL)
    for path in ("/", "/api/info", "/api/images/x", "/api/openapi.json"):
        assert c.get(path).status_code == 401, path
    assert c.get("/api/info", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/api/info", headers={"Cookie": "imagent_token=wrong"}).status_code == 401
    assert c.get("/?token=wrong").status_code == 401
    assert c.get("/api/info", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200

    first = c.get("/?token=s3cret-token", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/"  # the token leaves the address bar
    cookie = first.headers["set-cookie"]
    assert "imagent_token=s3cret-token" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    # the client now holds the cookie: the page and its API calls work without the token in the URL
    assert "<title>imagent</title>" in c.get("/").text
    assert c.get("/api/info").status_code == 200
    assert c.post("/api/search", json={"text": "a penguin", "method": "caption", "top_k": 2}).status_code == 200


# ------------------------------------------------------------------ headers, docs


def test_every_response_has_nosniff_and_a_restrictive_csp(client):
    responses = [client.get("/"), client.get("/static/app.js"), client.get("/api/info"),
                 client.get("/api/records/nope"), client.post("/api/search", json={"text": ""}),
                 TestClient(client.app, base_url="http://evil.example").get("/")]
    for res in responses:
        assert res.headers["x-content-type-options"] == "nosniff", res.url
        csp = res.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp


def test_openapi_and_docs_work(client):
    spec = client.get("/api/openapi.json")
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    assert {"/api/search", "/api/searches", "/api/uploads", "/api/images/{image_id}"} <= set(paths)
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and "/api/openapi.json" in docs.text
    # the docs page's own inline script is allowed by its hash, nothing else inline
    assert "'sha256-" in docs.headers["content-security-policy"]
    assert "unsafe-inline" not in docs.headers["content-security-policy"]


# ------------------------------------------------------------------ body size, parameters, call cap


def test_request_bodies_are_capped(scripted_workspace):
    scripted_workspace.settings.server = ServerOptions(max_json_bytes=4096, max_upload_bytes=8192)
    c = TestClient(create_app(scripted_workspace), base_url=LOCAL)
    big = {"text": "x", "params": {"pad": "y" * 5000}}
    res = c.post("/api/search", json=big)
    assert res.status_code == 413 and "4096" in res.json()["detail"]

    def chunks():  # no Content-Length: counted while it arrives
        for _ in range(10):
            yield b" " * 1000

    res = c.post("/api/search", content=chunks(), headers={"Content-Type": "application/json"})
    assert res.status_code == 413
    assert c.post("/api/uploads", content=b"\x89PNG" + b"0" * 9000, headers=PNG).status_code == 413
    assert c.post("/api/search", json={"text": "a penguin", "method": "caption"}).status_code == 200


@pytest.mark.parametrize(("method", "params", "words"), [
    ("xr", {"k_prime": 100000}, "k_prime: at most 1000"),
    ("imagescope", {"k": 10**6}, "k: at most 200"),
    ("imagescope", {"alpha": 500}, "alpha: at most 20"),
    ("imagescope", {"concurrency": 10**4}, "concurrency: at most 16"),
    ("imagescope", {"stages": list(range(100))}, "at most 64 items"),
    ("cirevl", {"max_tokens": 10**7}, "max_tokens: at most 4096"),
    ("scripted_slow", {"delay_s": 1e9}, "delay_s: at most 100"),
])
def test_method_parameters_have_upper_bounds(client, method, params, words):
    body = {"text": "x", "method": method, "params": params, "reference": None}
    res = client.post("/api/search", json=body)
    assert res.status_code == 400, res.text
    assert words in res.json()["detail"]
    assert client.post("/api/searches", json=body).status_code == 400


def test_non_finite_numbers_are_refused(client):
    res = client.post("/api/search", content=b'{"text": "x", "method": "scripted_slow", "params": {"delay_s": NaN}}',
                      headers={"Content-Type": "application/json"})
    assert res.status_code == 400 and "finite" in res.json()["detail"]


def test_bounds_are_derived_for_fields_without_a_cap():
    from pydantic import BaseModel, Field

    class Cfg(BaseModel):
        rounds: int = Field(5, ge=1)   # no upper bound: 10 x the default, at least 100
        width: float = 300.0           # 10 x 300
        tau: float = Field(0.5, le=1)  # its own bound stands
        offset: int = -2               # negative default: may go negative
        count: int = 3                 # no lower bound, non-negative default: may not go negative

    check_params(Cfg, {"rounds": 100, "width": 3000.0, "tau": 0.9, "offset": -50, "count": 0})
    for bad in ({"rounds": 101}, {"width": 3001.0}, {"count": -1}):
        with pytest.raises(ParamLimitError):
            check_params(Cfg, bad)


def test_each_web_search_is_capped_in_model_calls(scripted_workspace):
    scripted_workspace.settings.server = ServerOptions(max_calls_per_search=2)
    c = TestClient(create_app(scripted_workspace), base_url=LOCAL)
    res = c.post("/api/search", json={"text": "x", "method": "scripted_slow", "params": {"steps": 5, "delay_s": 0}})
    model = scripted_workspace.chat_model("scripted")
    assert len(model.calls) == 2  # the third call was never made
    assert res.status_code in {200, 502} and ("cap" in res.text or res.json()["trace"]["model_calls"] == 2)
    # a request may lower the cap, never raise it
    model.calls.clear()
    c.post("/api/search", json={"text": "x", "method": "scripted_slow", "params": {"steps": 5, "delay_s": 0},
                                "max_calls": 1})
    assert len(model.calls) == 1
    model.calls.clear()
    c.post("/api/search", json={"text": "x", "method": "scripted_slow", "params": {"steps": 5, "delay_s": 0},
                                "max_calls": 50})
    assert len(model.calls) == 2


# ------------------------------------------------------------------ files and ids


@pytest.fixture
def slash_gallery(tmp_path, caption_dual, minilm, make_png):
    from imagent.index.embedding import gallery_from_records

    png = make_png(tmp_path / "red.png")
    records = [ImageRecord(id="album/2019/red.png", path=str(png), captions=["a red square"]),
               ImageRecord(id="plain", path=str(make_png(tmp_path / "blue.png", (0, 0, 200))), captions=["blue"])]
    return gallery_from_records(str(tmp_path / "index"), records, caption_dual, minilm)


def test_ids_with_slashes_are_fetchable(slash_gallery, tmp_path):
    ws = Workspace(Settings(index=slash_gallery.root, cache_dir=tmp_path / "cache"))
    c = TestClient(create_app(ws), base_url=LOCAL)
    rec = c.get("/api/records/album/2019/red.png")
    assert rec.status_code == 200 and rec.json()["id"] == "album/2019/red.png"
    for url in ("/api/images/album/2019/red.png", "/api/images/album%2F2019%2Fred.png"):
        img = c.get(url)
        assert img.status_code == 200 and img.content.startswith(b"\x89PNG"), url
    assert c.get("/api/images/album/2019").status_code == 404


@pytest.fixture
def folder_gallery(tmp_path, caption_dual, minilm, make_png):
    """Two photos indexed from a folder by the real indexer (size, mtime and content hash recorded)."""
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    photos = tmp_path / "photos"
    photos.mkdir()
    make_png(photos / "red.png")
    make_png(photos / "green.png", (0, 180, 0))
    build_index(photos, tmp_path / "index", IndexParts.of(caption_dual, minilm))
    from imagent.index.gallery import Gallery

    return Gallery(tmp_path / "index"), photos


def test_files_are_rechecked_before_they_are_served(folder_gallery, tmp_path):
    gallery, photos = folder_gallery
    ws = Workspace(Settings(index=gallery.root, cache_dir=tmp_path / "cache"))
    c = TestClient(create_app(ws), base_url=LOCAL)
    by_name = {os.path.basename(r.path): r.id for r in gallery.records()}
    red, green = by_name["red.png"], by_name["green.png"]
    original = (photos / "red.png").read_bytes()
    assert c.get(f"/api/images/{red}").content == original

    # a symlink swapped in after indexing, pointing out of the gallery: refused, the secret not sent
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"PRIVATE KEY " * 10)
    (photos / "red.png").unlink()
    (photos / "red.png").symlink_to(secret)
    res = c.get(f"/api/images/{red}")
    assert res.status_code == 409 and b"PRIVATE" not in res.content and "re-run imagent index" in res.json()["detail"]

    # a link to a copy of another image, and a rewritten file of the same size: refused too
    (photos / "red.png").unlink()
    shutil.copy(photos / "green.png", tmp_path / "elsewhere.png")
    (photos / "red.png").symlink_to(tmp_path / "elsewhere.png")
    assert c.get(f"/api/images/{red}").status_code == 409
    (photos / "red.png").unlink()
    (photos / "red.png").write_bytes(bytes(len(original)))
    st = os.stat(photos / "green.png")
    assert c.get(f"/api/images/{red}").status_code == 409

    # a FIFO does not block the server; a missing file is a 404
    (photos / "red.png").unlink()
    os.mkfifo(photos / "red.png")
    assert c.get(f"/api/images/{red}").status_code == 409
    (photos / "red.png").unlink()
    assert c.get(f"/api/images/{red}").status_code == 404
    # the untouched file is still served
    assert os.stat(photos / "green.png").st_mtime_ns == st.st_mtime_ns
    assert c.get(f"/api/images/{green}").status_code == 200


def test_serve_generates_a_token_beyond_loopback(monkeypatch):
    import socket

    from imagent.server.security import server_access

    monkeypatch.delenv("H3_TEST_TOKEN", raising=False)
    token, hosts, url = server_access("127.0.0.1", 8765, None, [], "H3_TEST_TOKEN")
    assert token is None and hosts == [] and url == "http://127.0.0.1:8765/"
    token, hosts, url = server_access("0.0.0.0", 8765, None, ["nas"], "H3_TEST_TOKEN")
    assert token and len(token) >= 24 and url == f"http://127.0.0.1:8765/?token={token}"
    assert "nas" in hosts and socket.gethostname() in hosts
    assert server_access("0.0.0.0", 8765, None, [], "H3_TEST_TOKEN")[0] != token  # a new one each start
    token, hosts, _ = server_access("192.168.1.5", 80, None, [], "H3_TEST_TOKEN")
    assert token and hosts == ["192.168.1.5"]
    monkeypatch.setenv("H3_TEST_TOKEN", "from-env")
    assert server_access("127.0.0.1", 8765, None, [], "H3_TEST_TOKEN")[0] == "from-env"
    assert server_access("127.0.0.1", 8765, "flag", [], "H3_TEST_TOKEN")[0] == "flag"
