"""Web image search backends against a real HTTP server on 127.0.0.1 (no internet).

The server plays both the search API and the image hosts, so every download check runs over real
HTTP: size caps (declared and streamed), content types, decoding, redirects, schemes, private hosts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagent.core.cache import DiskCache
from imagent.tools import CachedTool, ToolError, ToolRejected
from imagent.tools.web_search import BraveImageSearch, GoogleImageSearch


def google(server, **options):
    opts = {"base_url": server.base_url, "cx": "test-cx", "allow_private_hosts": True, **options}
    return GoogleImageSearch.from_options(opts)


def google_items(server, *paths, titles=None):
    items = []
    for i, p in enumerate(paths):
        items.append({"link": f"{server.base_url}{p}", "title": (titles or {}).get(p, f"result {i}"),
                      "displayLink": "example.org", "image": {"contextLink": f"https://example.org/page{i}"}})
    return json.dumps({"items": items}).encode()


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", "secret-google-key")
    monkeypatch.setenv("BRAVE_API_KEY", "secret-brave-key")


def test_google_search_downloads_and_verifies_top_result(http_server, img, keys):
    R = img.Reply
    png = img.png()
    items = google_items(http_server, "/a.png", titles={"/a.png": "A red vintage car"})
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"}, items)
    http_server.routes["/a.png"] = R(200, {"Content-Type": "image/png"}, png)
    results = google(http_server).search("red vintage car", 1)
    assert len(results) == 1
    r = results[0]
    assert r.data == png and r.mime == "image/png" and (r.width, r.height) == (16, 12)
    assert r.title == "A red vintage car"
    assert r.provenance.backend == "google" and r.provenance.source == f"{http_server.base_url}/a.png"
    assert r.provenance.page == "https://example.org/page0"
    # The API request carried the documented parameters.
    api = next(q for q in http_server.requests if q.path.startswith("/customsearch/v1"))
    for part in ("searchType=image", "cx=test-cx", "key=secret-google-key", "q=red+vintage+car"):
        assert part in api.path


@pytest.mark.parametrize("bad", ["oversized_declared", "oversized_streamed", "html", "fake_png", "svg"])
def test_refused_downloads_are_skipped_and_next_result_used(http_server, img, keys, bad):
    R = img.Reply
    big = img.png() + b"\0" * 5000
    bad_reply = {
        "oversized_declared": R(200, {"Content-Type": "image/png"}, big),
        "oversized_streamed": R(200, {"Content-Type": "image/png"}, big, no_length=True),
        "html": R(200, {"Content-Type": "text/html"}, b"<html><script>alert(1)</script></html>"),
        "fake_png": R(200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n but not really an image"),
        "svg": R(200, {"Content-Type": "image/svg+xml"}, b"<svg xmlns='http://www.w3.org/2000/svg'/>"),
    }[bad]
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"},
                                               google_items(http_server, "/bad", "/good.jpg"))
    http_server.routes["/bad"] = bad_reply
    http_server.routes["/good.jpg"] = R(200, {"Content-Type": "image/jpeg"}, img.jpeg())
    tool = google(http_server, max_bytes=4000)
    results = tool.search("q", 1)
    assert [r.provenance.source for r in results] == [f"{http_server.base_url}/good.jpg"]
    assert results[0].mime == "image/jpeg"
    # Only the bad one alone: the call is refused, with the reason.
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"},
                                               google_items(http_server, "/bad"))
    with pytest.raises(ToolRejected) as info:
        tool.search("q", 1)
    reason = str(info.value)
    expected = {"oversized_declared": "too large", "oversized_streamed": "too large", "html": "not an image",
                "fake_png": "not a usable image", "svg": "SVG"}[bad]
    assert expected in reason


def test_redirects_checked_and_limited(http_server, img, keys):
    R = img.Reply
    base = http_server.base_url
    http_server.routes["/hop1"] = R(302, {"Location": "/hop2"})
    http_server.routes["/hop2"] = R(302, {"Location": f"{base}/final.png"})
    http_server.routes["/final.png"] = R(200, {"Content-Type": "image/png"}, img.png())
    http_server.routes["/to-file"] = R(302, {"Location": "file:///etc/passwd"})
    http_server.routes["/loop"] = R(302, {"Location": "/loop"})
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"},
                                               google_items(http_server, "/hop1"))
    ok = google(http_server, max_redirects=2).search("q", 1)
    assert ok[0].provenance.source == f"{base}/final.png"
    with pytest.raises(ToolRejected, match="too many redirects"):
        google(http_server, max_redirects=1).search("q", 1)
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"},
                                               google_items(http_server, "/to-file"))
    with pytest.raises(ToolRejected, match="scheme 'file'"):
        google(http_server).search("q", 1)
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"},
                                               google_items(http_server, "/loop"))
    with pytest.raises(ToolRejected, match="too many redirects"):
        google(http_server, max_redirects=3).search("q", 1)
    assert http_server.hits("/loop") == 4  # the first request plus three followed redirects, then stop


def test_private_hosts_refused_by_default(http_server, img, keys):
    R = img.Reply
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"},
                                               google_items(http_server, "/a.png"))
    http_server.routes["/a.png"] = R(200, {"Content-Type": "image/png"}, img.png())
    with pytest.raises(ToolRejected, match="non-public address"):
        google(http_server, allow_private_hosts=False).search("q", 1)
    assert http_server.hits("/a.png") == 0  # refused before any byte was requested


def test_missing_key_and_api_errors_are_tool_errors_without_the_key(http_server, img, keys, monkeypatch):
    R = img.Reply
    http_server.routes["/customsearch/v1"] = R(403, {"Content-Type": "application/json"},
                                               b'{"error": "quota exceeded for key secret-google-key"}')
    with pytest.raises(ToolError) as info:
        google(http_server).search("q", 1)
    assert "HTTP 403" in str(info.value) and "secret-google-key" not in str(info.value)
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(ToolError, match=r"\$GOOGLE_API_KEY"):
        google(http_server).search("q", 1)
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "text/html"}, b"<html>oops</html>")
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    with pytest.raises(ToolError, match="JSON"):
        google(http_server).search("q", 1)


def test_brave_backend(http_server, img, keys):
    R = img.Reply
    body = {"type": "images", "results": [
        {"title": "Red car", "url": "https://example.org/p", "source": "example.org",
         "properties": {"url": f"{http_server.base_url}/car.png"}, "thumbnail": {"src": "ignored"}}]}
    http_server.routes["/res/v1/images/search"] = R(200, {"Content-Type": "application/json"},
                                                    json.dumps(body).encode())
    http_server.routes["/car.png"] = R(200, {"Content-Type": "image/png"}, img.png())
    tool = BraveImageSearch.from_options({"base_url": http_server.base_url, "allow_private_hosts": True})
    [r] = tool.search("red car", 1)
    assert r.title == "Red car" and r.provenance.page == "https://example.org/p"
    api = next(q for q in http_server.requests if q.path.startswith("/res/v1/images/search"))
    assert api.headers["x-subscription-token"] == "secret-brave-key"


def test_cached_web_search_calls_the_api_once_and_persists(http_server, img, keys, tmp_path):
    R = img.Reply
    http_server.routes["/customsearch/v1"] = R(200, {"Content-Type": "application/json"},
                                               google_items(http_server, "/a.png", titles={"/a.png": "<b>Red</b> car"}))
    http_server.routes["/a.png"] = R(200, {"Content-Type": "image/png"}, img.png())
    cache = DiskCache(tmp_path / "calls.sqlite")
    tool = CachedTool(google(http_server), cache, tmp_path / "tools", name="search")
    first = tool.search("red car", 1)[0]
    second = CachedTool(google(http_server), DiskCache(tmp_path / "calls.sqlite"), tmp_path / "tools").search(
        "red car", 1)[0]
    assert http_server.hits("/customsearch/v1") == 1 and http_server.hits("/a.png") == 1
    assert not first.cached and second.cached
    assert first.path == second.path and first.path.startswith(str(tmp_path / "tools"))
    assert Path(first.path).read_bytes() == img.png()
    assert second.text() == "b Red /b car"  # markup brackets never reach a prompt
