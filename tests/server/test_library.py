"""The photo app's JSON routes (imagent.server.library) over a real indexed folder of geotagged JPEGs (caption
mode, MiniLM): the library in pages newest first with its months and days, paging bounds, one photo with its
neighbours and folder, thumbnails made once and kept on disk (a second request decodes nothing; a file changed
since indexing is refused even when its thumbnail is cached), the route of a plain-words query, the favicon and
the page's own addresses."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.library import service as library_module
from imagent.server import create_app

from ..conftest import SAN_DIEGO, STAMPS, VIENNA, write_geo_photo


@pytest.fixture(scope="module")
def library(tmp_path_factory, caption_dual, minilm):
    """``photos/``: fourteen JPEGs over three months (two a day, Vienna and San Diego, some in a subfolder) and two
    PNGs without a date; ``index/``: the folder indexed in caption mode. Each test gets its own copy of both."""
    from PIL import Image

    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    root = tmp_path_factory.mktemp("library")
    rows = [json.loads(line) for line in (STAMPS / "captions.jsonl").read_text().splitlines()][:16]
    for i, r in enumerate(rows[:14]):
        sub = "trip" if i >= 10 else ""
        when = datetime(2021, 5 + i // 5, 1 + i // 2, 8 + i, 0)
        write_geo_photo(STAMPS / r["file"], root / "photos" / sub / f"IMG_{2000 + i}.jpg", when,
                        VIENNA if i % 3 else SAN_DIEGO)
    for i, r in enumerate(rows[14:]):
        with Image.open(STAMPS / r["file"]) as im:
            im.convert("RGB").save(root / "photos" / f"scan_{i}.png")
    build_index(root / "photos", root / "index", IndexParts.of(caption_dual, minilm))
    return root


@pytest.fixture
def lib_copy(library, tmp_path):
    """A copy of the photos and their index (the index's paths rewritten to the copy by indexing it again)."""
    shutil.copytree(library / "photos", tmp_path / "photos")
    shutil.copytree(library / "index", tmp_path / "index")
    return tmp_path


@pytest.fixture
def client(library, tmp_path):
    ws = Workspace(Settings(index=library / "index", cache_dir=tmp_path / "cache"))
    return TestClient(create_app(ws), base_url="http://127.0.0.1:8765")


def test_library_pages_newest_first_with_months_and_days(client):
    first = client.get("/api/library", params={"per_page": 5}).json()
    assert first["library"] == {"name": "photos", "size": 16, "undated": 2}  # the folder's name, not its path
    assert (first["total"], first["pages"], first["page"], len(first["photos"])) == (16, 4, 0, 5)
    pages = [client.get("/api/library", params={"page": n, "per_page": 5}).json() for n in range(4)]
    photos = [p for page in pages for p in page["photos"]]
    assert len({p["id"] for p in photos}) == 16
    taken = [p["taken"] for p in photos if p["taken"]]
    assert taken == sorted(taken, reverse=True) and len(taken) == 14
    assert [p["file"] for p in photos[-2:]] == ["scan_0.png", "scan_1.png"]  # no date: last
    assert photos[0]["file"] == "IMG_2013.jpg" and photos[0]["place"].startswith("Vienna")
    assert first["days"] == {"2021-07-07": 2, "2021-07-06": 2, "2021-06-05": 2}  # days shown, whole-day counts
    assert [(m["month"], m["count"], m["page"]) for m in first["months"]] == [
        ("2021-07", 4, 0), ("2021-06", 5, 0), ("2021-05", 5, 1)]
    # a filter lists its matches oldest first
    vienna = client.get("/api/library", params={"where": "place ~ 'Vienna'", "per_page": 200}).json()
    assert vienna["total"] == 9 and vienna["order"] == "oldest first"
    days = [p["taken"] for p in vienna["photos"]]
    assert days == sorted(days) and all(p["place"].startswith("Vienna") for p in vienna["photos"])


@pytest.mark.parametrize("params, words", [
    ({"page": "-1"}, "whole number"), ({"page": "abc"}, "whole number"), ({"page": "1.5"}, "whole number"),
    ({"page": "4"}, "past the last page (3)"), ({"page": "9" * 30}, "past the last page"),
    ({"page": "١"}, "whole number"),  # an Arabic-Indic digit is a digit to Python, not a page number
    ({"per_page": "0"}, "per_page"), ({"per_page": "201"}, "per_page"), ({"per_page": "-5"}, "per_page"),
    ({"per_page": "x"}, "per_page"), ({"where": "plac ~ 'x'"}, "unknown field 'plac'"),
])
def test_paging_bounds_are_400s(client, params, words):
    res = client.get("/api/library", params={"per_page": "5", **params})
    assert res.status_code == 400, res.text
    assert words in res.json()["detail"]


def test_an_empty_filter_has_one_empty_page(client):
    res = client.get("/api/library", params={"where": "place ~ 'Atlantis'"}).json()
    assert (res["total"], res["pages"], res["photos"]) == (0, 0, [])
    assert client.get("/api/library", params={"where": "place ~ 'Atlantis'", "page": 1}).status_code == 400


def test_a_photo_with_its_neighbours_and_folder(client):
    order = [p["id"] for p in client.get("/api/library", params={"per_page": 200}).json()["photos"]]
    mid = client.get(f"/api/photos/{order[3]}").json()
    assert (mid["previous"], mid["next"], mid["position"], mid["total"]) == (order[2], order[4], 3, 16)
    assert mid["file"].startswith("IMG_") and mid["folder"] in ("photos", "photos/trip")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", mid["taken"])
    assert mid["place"] and mid["latitude"] and mid["longitude"] and mid["width"] and mid["height"]
    trip = [client.get(f"/api/photos/{i}").json() for i in order[:6]]
    assert {"photos/trip"} <= {p["folder"] for p in trip}
    assert client.get(f"/api/photos/{order[0]}").json()["previous"] is None
    assert client.get(f"/api/photos/{order[-1]}").json()["next"] is None
    assert client.get("/api/photos/no-such-photo").status_code == 404


def test_thumbnails_are_made_once_and_kept_on_disk(lib_copy, tmp_path, monkeypatch):
    ws = Workspace(Settings(index=lib_copy / "index", cache_dir=tmp_path / "cache"))
    client = TestClient(create_app(ws), base_url="http://127.0.0.1:8765")
    made: list[int] = []
    real = library_module.render_thumbnail
    monkeypatch.setattr(library_module, "render_thumbnail",
                        lambda data, size, max_pixels: made.append(size) or real(data, size, max_pixels))
    photo = client.get("/api/library").json()["photos"][0]
    first = client.get(f"/api/thumbnails/320/{photo['id']}")
    assert first.status_code == 200 and first.headers["content-type"] == "image/jpeg"
    from PIL import Image

    with Image.open(__import__("io").BytesIO(first.content)) as im:
        assert max(im.size) <= 320 and im.format == "JPEG"
    again = client.get(f"/api/thumbnails/320/{photo['id']}")
    assert again.content == first.content and made == [320]  # served from disk, not decoded again
    rec = ws.gallery().record(photo["id"])
    cached = lib_copy / "index" / "thumbnails" / "320" / rec.content_hash[:2] / f"{rec.content_hash}.jpg"
    assert cached.read_bytes() == first.content
    # a second server process over the same index finds it on disk too
    other = TestClient(create_app(Workspace(Settings(index=lib_copy / "index", cache_dir=tmp_path / "c2"))),
                       base_url="http://127.0.0.1:8765")
    assert other.get(f"/api/thumbnails/320/{photo['id']}").content == first.content and made == [320]
    big = client.get(f"/api/thumbnails/1600/{photo['id']}")
    assert big.status_code == 200 and made == [320, 1600]

    # sizes outside the list, unknown ids, ids that look like paths
    assert client.get(f"/api/thumbnails/321/{photo['id']}").status_code == 400
    assert client.get(f"/api/thumbnails/abc/{photo['id']}").status_code == 400
    assert client.get("/api/thumbnails/320/no-such-id").status_code == 404
    assert client.get("/api/thumbnails/320/..%2F..%2Fetc%2Fpasswd").status_code == 404

    # the file changed since indexing: refused, cached thumbnail or not, until it is indexed again
    path = rec.path
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-10] + b"0123456789")
    for size in (320, 1600):
        res = client.get(f"/api/thumbnails/{size}/{photo['id']}")
        assert res.status_code == 409 and "re-run imagent index" in res.json()["detail"]
    other_photo = client.get("/api/library").json()["photos"][1]
    os.replace(ws.gallery().record(other_photo["id"]).path, tmp_path / "moved.jpg")
    assert client.get(f"/api/thumbnails/320/{other_photo['id']}").status_code == 404


def test_a_thumbnail_swapped_for_a_symlink_is_refused(lib_copy, tmp_path):
    ws = Workspace(Settings(index=lib_copy / "index", cache_dir=tmp_path / "cache"))
    client = TestClient(create_app(ws), base_url="http://127.0.0.1:8765")
    photo = client.get("/api/library").json()["photos"][2]
    path = ws.gallery().record(photo["id"]).path
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the page")
    os.unlink(path)
    os.symlink(secret, path)
    assert client.get(f"/api/thumbnails/320/{photo['id']}").status_code == 409


def test_route_favicon_and_page_addresses(client):
    r = client.get("/api/route", params={"text": "the birds from the day I saw the penguin"}).json()
    assert r["kind"] == "album" and r["signals"]
    assert r["method"] == "album" or "not installed" in r["fallback"]
    r = client.get("/api/route", params={"text": "a penguin"}).json()
    assert (r["method"], r["kind"], r["fallback"]) == ("caption", "content", "")
    assert client.get("/api/route", params={"text": "x" * 2001}).status_code == 422
    ico = client.get("/favicon.ico")
    assert ico.status_code == 200 and ico.headers["content-type"] == "image/x-icon" and ico.content[:4] == b"\0\0\1\0"
    for path in ("/photo/abc", "/photo/a/b.jpg", "/search?q=birds"):
        page = client.get(path)
        assert page.status_code == 200 and "library.js" in page.text, path
        assert "script-src 'self'" in page.headers["content-security-policy"]
