"""The web API probed as an attacker and a careless script would: path traversal (plain, encoded, absolute,
NUL bytes, a symlink swapped in after indexing), oversized and malformed bodies, wrong types, huge and
negative parameters, bad Host headers, missing or wrong tokens, unknown ids with slashes. The promise: no
500 and no file outside the index ever, a clear 4xx with a ``detail`` instead.

The gallery is built by the real indexer from real PNGs (MiniLM in caption mode); LLM roles are the
scripted backend, so a probe that does reach a method costs nothing. Hypothesis generates request bodies."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagent.api import Workspace
from imagent.core.config import ChatModelConfig, ServerOptions, Settings
from imagent.server import create_app

LOCAL = "http://127.0.0.1:8765"
SECRET = b"TOP-SECRET-CONTENT-0123456789"
PNG = {"Content-Type": "image/png"}  # uploads are sent as images


@pytest.fixture(scope="module")
def site(tmp_path_factory, caption_dual, minilm):
    """(photos folder, index root, secret file outside it, the indexed ids by file name)."""
    from PIL import Image

    from imagent.index.builder import build_index
    from imagent.index.gallery import Gallery
    from imagent.index.parts import IndexParts

    base = tmp_path_factory.mktemp("web-api")
    photos = base / "photos"
    (photos / "sub").mkdir(parents=True)
    for name, color in (("red.png", (200, 0, 0)), ("green.png", (0, 200, 0)), ("sub/blue.png", (0, 0, 200))):
        Image.new("RGB", (24, 16), color).save(photos / name)
    secret = base / "secret.png"  # named like an image, but not one, and outside the indexed folder
    secret.write_bytes(SECRET)
    build_index(photos, base / "index", IndexParts.of(caption_dual, minilm))
    ids = {os.path.relpath(r.path, photos): r.id for r in Gallery(base / "index").records()}
    return photos, base / "index", secret, ids


@pytest.fixture(scope="module")
def app(site, tmp_path_factory):
    _photos, index, _secret, _ids = site
    script = tmp_path_factory.mktemp("script") / "script.json"
    script.write_text(json.dumps({"default": "a red square"}))
    settings = Settings(index=index, cache_dir=tmp_path_factory.mktemp("cache"), cache_calls=False,
                        models={"scripted": ChatModelConfig(backend="scripted", model=str(script))},
                        roles={"default": "scripted"},
                        server=ServerOptions(max_json_bytes=16 * 1024, max_upload_bytes=64 * 1024))
    return create_app(Workspace(settings))


@pytest.fixture(scope="module")
def client(app):
    return TestClient(app, base_url=LOCAL, raise_server_exceptions=False)


def clear_4xx(res, *statuses: int) -> None:
    assert 400 <= res.status_code < 500, (res.request.url, res.status_code, res.text[:300])
    if statuses:
        assert res.status_code in statuses, (res.request.url, res.status_code, res.text[:300])
    assert SECRET not in res.content
    if res.headers.get("content-type", "").startswith("application/json"):
        assert res.json()["detail"]


TRAVERSALS = [
    "../secret.png", "..%2Fsecret.png", "..%2F..%2F..%2Fetc%2Fpasswd", "%2e%2e/%2e%2e/etc/passwd",
    "%2Fetc%2Fpasswd", "/etc/passwd", "//etc/passwd", "....//....//etc/passwd", "..\\..\\secret.png",
    "red.png%00.png", "%00", "x%00/../../etc/passwd", "%252e%252e%252fsecret.png", "~/.ssh/id_rsa",
    "file:///etc/passwd", "C:%5CWindows%5Cwin.ini", "a" * 5000, "%F0%9F%90%A7", "%FF%FE", "sub/blue.png",
]


@pytest.mark.parametrize("probe", TRAVERSALS)
def test_traversal_never_reaches_a_file(client, probe):
    for route in ("/api/images/", "/api/records/", "/static/"):
        res = client.get(route + probe)
        if res.status_code == 200:  # only a real gallery id or a shipped static file may answer
            assert route != "/api/images/" or res.content.startswith(b"\x89PNG")
            assert SECRET not in res.content and b"root:" not in res.content
            continue
        clear_4xx(res, 404, 400, 405)


def test_references_are_gallery_ids_only(client, site):
    _photos, _index, secret, _ids = site
    for ref in (str(secret), "../secret.png", "/etc/passwd", "red.png", "\x00", "a/../../b", "x" * 999):
        res = client.post("/api/search", json={"text": "red", "method": "clip", "reference": ref})
        clear_4xx(res, 400)
        assert "not an image id in the gallery" in res.json()["detail"]
    clear_4xx(client.post("/api/search", json={"text": "red", "reference": "x" * 5000}), 422)


def test_a_symlink_swapped_in_after_indexing_is_not_followed(client, site):
    photos, _index, secret, ids = site
    target = photos / "green.png"
    saved = target.read_bytes()
    stat = os.stat(target)
    assert client.get(f"/api/images/{ids['green.png']}").content == saved
    target.unlink()
    target.symlink_to(secret)
    try:
        clear_4xx(client.get(f"/api/images/{ids['green.png']}"), 409)
        # even with the indexed size and mtime forged onto the link's target, the content hash refuses it
        os.utime(secret, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        clear_4xx(client.get(f"/api/images/{ids['green.png']}"), 409)
    finally:
        target.unlink()
        target.write_bytes(saved)
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert client.get(f"/api/images/{ids['green.png']}").status_code == 200


def test_oversized_bodies(client):
    clear_4xx(client.post("/api/search", json={"text": "x", "params": {"p": "y" * 20000}}), 413)
    clear_4xx(client.post("/api/search", content=b"{" * 200_000, headers={"Content-Type": "application/json"}), 413)
    clear_4xx(client.post("/api/searches", content=b" " * 17_000, headers={"Content-Length": "17000"}), 413)
    clear_4xx(client.post("/api/uploads", content=b"\x89PNG\r\n\x1a\n" + b"\0" * 70_000, headers=PNG), 413)
    # a Content-Length that lies or is not a number
    clear_4xx(client.post("/api/search", content=b"{}", headers={"Content-Length": "99999999999"}), 413)
    clear_4xx(client.post("/api/search", content=b"{}", headers={"Content-Length": "abc"}), 400, 413)
    # a text field past its limit
    clear_4xx(client.post("/api/search", json={"text": "x" * 2001}), 422)


MALFORMED = [b"", b"{", b"[]", b"null", b'"text"', b"\xff\xfe\x00", b'{"text": "\\ud800"}', b"[" * 10_000,
             b'{"text": "a", "text": 1}', b'{"text": "a"} trailing', b"{'text': 'a'}", b"NaN"]


@pytest.mark.parametrize("body", MALFORMED)
def test_malformed_json(client, body):
    for route in ("/api/search", "/api/searches"):
        clear_4xx(client.post(route, content=body, headers={"Content-Type": "application/json"}))


WRONG = [
    {"text": 123}, {"text": None}, {"text": ["a"]}, {"text": "a", "top_k": "ten"}, {"text": "a", "top_k": 1.5},
    {"text": "a", "params": [1, 2]}, {"text": "a", "params": "k=3"}, {"text": "a", "method": None},
    {"text": "a", "method": {"$ne": 1}}, {"text": "a", "keep_reference": "maybe"}, {"text": "a", "reference": 7},
    {"text": "a", "method": "imagescope", "params": {"k": "abc"}}, {"text": "a", "method": "imagescope",
                                                                     "params": {"stages": "all"}},
    {"text": "a", "method": "imagescope", "params": {"tau": {"x": 1}}}, {"text": "a", "max_calls": "many"},
]
HUGE = [
    {"text": "a", "top_k": 10**12}, {"text": "a", "top_k": -1}, {"text": "a", "top_k": 0},
    {"text": "a", "max_calls": -1}, {"text": "a", "method": "xr", "reference": None, "params": {"k_prime": 10**9}},
    {"text": "a", "method": "imagescope", "params": {"k": -5}}, {"text": "a", "method": "imagescope",
                                                                 "params": {"k": 10**308}},
    {"text": "a", "method": "imagescope", "params": {"alpha": 1e308}},
    {"text": "a", "method": "imagescope", "params": {"concurrency": 2**63}},
    {"text": "a", "method": "tacir", "params": {"max_tokens": 10**9}},
    {"text": "a", "method": "clip", "params": {"text_weight": -1e9}},
]


@pytest.mark.parametrize("body", WRONG + HUGE)
def test_wrong_types_and_huge_or_negative_parameters(client, body):
    for route in ("/api/search", "/api/searches"):
        clear_4xx(client.post(route, json=body), 400, 422)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.dictionaries(
    st.sampled_from(["text", "method", "top_k", "reference", "params", "keep_reference", "max_calls",
                     "reference_upload", "extra"]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                 | st.text(max_size=30),
                 lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                 max_leaves=12),
    max_size=6))
def test_fuzzed_search_requests_never_500(client, body):
    if isinstance(body.get("method"), str):
        body["method"] = "caption"  # a real, model-free method: only the request handling is under test
    res = client.post("/api/search", json=body)
    assert res.status_code < 500, (body, res.status_code, res.text[:300])


BAD_HOSTS = ["evil.example", "evil.example:8765", "127.0.0.1.nip.io", "localhost.", "localhost:abc", "[::1",
             "", "127.0.0.1@evil.example", "LOCALHOST:99999x", "xn--80ak6aa92e.com", "0x7f000001", "2130706433"]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_bad_host_headers(app, host):
    c = TestClient(app, base_url=LOCAL, raise_server_exceptions=False)
    clear_4xx(c.get("/api/info", headers={"Host": host}), 400)


async def _raw_asgi(app, headers):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "method": "GET", "path": "/api/info", "raw_path": b"/api/info", "query_string": b"",
               "headers": headers, "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 8765),
               "client": ("127.0.0.1", 5), "root_path": ""}, receive, send)
    return sent[0]["status"]


def test_a_request_without_host_is_refused(app):
    import asyncio

    assert asyncio.run(_raw_asgi(app, [])) == 400
    assert asyncio.run(_raw_asgi(app, [(b"host", b"127.0.0.1:8765")])) == 200


def test_missing_or_wrong_token(site, app):
    _photos, index, _secret, ids = site
    guarded = create_app(Workspace(Settings(index=index)), token="right-token")
    c = TestClient(guarded, base_url=LOCAL, raise_server_exceptions=False)
    probes = [("GET", "/"), ("GET", "/api/info"), ("GET", f"/api/images/{ids['red.png']}"),
              ("POST", "/api/search"), ("POST", "/api/uploads"), ("GET", "/api/openapi.json")]
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic right-token"},
                    {"Authorization": "Bearer "}, {"Cookie": "imagent_token=wrong"}, {"Cookie": "imagent_token"},
                    {"Cookie": "\x7f\x00;;=="}, {"Authorization": "Bearer right-token-and-more"}):
        for verb, path in probes:
            clear_4xx(c.request(verb, path, headers=headers, json={"text": "x"} if verb == "POST" else None), 401)
    # the token in the query string only sets the cookie on the page itself
    clear_4xx(c.get("/api/info?token=right-token"), 401)
    assert c.get("/api/info", headers={"Authorization": "Bearer right-token"}).status_code == 200


def test_unknown_ids_with_slashes(client):
    for path in ("/api/records/a/b/c", "/api/images/a/b/c", "/api/images/a/../../b", "/api/records/%2F",
                 "/api/searches/a/b/events", "/api/searches/../info/events"):
        clear_4xx(client.get(path), 404)
    clear_4xx(client.post("/api/searches/a%2Fb/cancel"), 404)
    res = client.get("/api/images/no%2Fsuch%2Fid")
    clear_4xx(res, 404)
    assert "no/such/id" in res.json()["detail"]


def test_uploads_are_checked_as_images(client, site):
    photos, _index, _secret, _ids = site
    for body in (SECRET, b"GIF89a" + b"\0" * 10, b"%!PS-Adobe-3.0 EPSF-3.0\n", b"<svg xmlns='x'/>",
                 Path(photos / "red.png").read_bytes()[:40]):
        clear_4xx(client.post("/api/uploads", content=body, headers=PNG), 415)
    assert client.post("/api/uploads", content=Path(photos / "red.png").read_bytes(), headers=PNG).status_code == 201


def test_no_websocket_is_ever_opened(app):
    from starlette.websockets import WebSocketDisconnect

    c = TestClient(app, base_url=LOCAL)
    for path in ("/", "/api/searches/x/events", "/ws"):
        with pytest.raises(WebSocketDisconnect), c.websocket_connect(path, headers={"Host": "evil.example"}):
            pass
