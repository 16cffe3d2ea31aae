"""The web app's first-hour edges and hostile names (issue 47) in a real headless Chromium against a real server:
thumbnails keep the photo's shape (a wide police car is letterboxed, never cropped to "OLICE"), the "more like this"
page shows the photo its results are like, one match is "1 result", and a photo whose file name is not UTF-8 is
listed, shown and searched (its name through one safe text form) instead of breaking the library with a 400.

Real parts: stamps photos re-saved with EXIF dates and GPS, a wide and a tall photo (and, in a library of its own, one
file named with Latin-1 bytes), indexed in caption mode with the real MiniLM."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.server import create_app
from testkit import wait_until

from ..conftest import STAMPS, VIENNA, write_geo_photo

CAPE_TOWN = (-33.9249, 18.4241)
LATIN1 = os.fsdecode(b"caf\xe9.jpg")  # not UTF-8: os.listdir gives it surrogate escapes


def _bird_photos() -> list[Path]:
    rows = [json.loads(line) for line in (STAMPS / "captions.jsonl").read_text().splitlines()]
    return [STAMPS / r["file"] for r in rows if r["category"].startswith("animals/birds")][:4]


@pytest.fixture(scope="module")
def odd_library(tmp_path_factory, caption_dual, minilm) -> Path:
    """``photos/``: three stamps (Vienna), a 4:1 "police car" (Vienna) and a 1:4 tower (Cape Town, the only one
    there); ``index/``."""
    from PIL import Image, ImageDraw

    from imagent.core.config import FaceOptions
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    root = tmp_path_factory.mktemp("odd-library")
    photos = root / "photos"
    for i, src in enumerate(_bird_photos()[:3]):
        write_geo_photo(src, photos / f"IMG_{5000 + i}.jpg", datetime(2024, 3, 1 + i, 10), VIENNA)
    wide = Image.new("RGB", (1600, 400), (250, 250, 250))
    ImageDraw.Draw(wide).rectangle((0, 0, 60, 400), fill=(20, 20, 200))  # the "P" at the very edge
    wide.save(root / "wide.png")
    write_geo_photo(root / "wide.png", photos / "police_car.jpg", datetime(2024, 3, 5, 12), VIENNA)
    Image.new("RGB", (300, 1200), (90, 140, 60)).save(root / "tall.png")
    write_geo_photo(root / "tall.png", photos / "tower.jpg", datetime(2024, 3, 6, 12), CAPE_TOWN)
    build_index(photos, root / "index", IndexParts.of(caption_dual, minilm, faces=FaceOptions(mode="off")))
    return root


@pytest.fixture
def app_url(odd_library, serve_app, tmp_path):
    return serve_app(create_app(Workspace(Settings(index=odd_library / "index", cache_dir=tmp_path / "cache"))))


def _ids(base: str) -> dict[str, str]:
    photos = httpx.get(f"{base}/api/library", params={"per_page": 200}).json()["photos"]
    return {p["file"]: p["id"] for p in photos}


def test_a_file_name_that_is_not_utf8_is_listed_shown_and_searched(tmp_path, caption_dual, minilm):
    from imagent.core.config import FaceOptions
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    birds = _bird_photos()
    write_geo_photo(birds[0], tmp_path / "photos" / "IMG_5000.jpg", datetime(2024, 3, 1, 10), VIENNA)
    write_geo_photo(birds[3], tmp_path / "photos" / LATIN1, datetime(2024, 3, 7, 9), CAPE_TOWN)
    parts = IndexParts.of(caption_dual, minilm, faces=FaceOptions(mode="off"))
    build_index(tmp_path / "photos", tmp_path / "index", parts)
    client = TestClient(create_app(Workspace(Settings(index=tmp_path / "index", cache_dir=tmp_path / "c"))),
                        base_url="http://127.0.0.1")
    library = client.get("/api/library", params={"per_page": 200})
    assert library.status_code == 200, library.text
    cafe = next(p for p in library.json()["photos"] if p["file"] == "caf\\xe9.jpg")  # one safe text form
    assert cafe["path"].endswith("/photos/caf\\xe9.jpg")
    photo = client.get(f"/api/photos/{cafe['id']}")
    assert photo.status_code == 200 and photo.json()["file"] == "caf\\xe9.jpg"
    record = client.get(f"/api/records/{cafe['id']}")
    assert record.status_code == 200 and record.json()["path"].endswith("caf\\xe9.jpg")
    assert client.get(f"/api/images/{cafe['id']}").content[:2] == b"\xff\xd8"  # the very file, opened by its bytes
    assert client.get(f"/api/thumbnails/320/{cafe['id']}").status_code == 200
    found = client.post("/api/search", json={"where": "place ~ 'Cape Town'"})
    assert found.status_code == 200, found.text
    assert [r["path"].rsplit("/", 1)[-1] for r in found.json()["results"]] == ["caf\\xe9.jpg"]
    ranked = client.post("/api/search", json={"text": "a bird", "method": "caption", "top_k": 10})
    assert ranked.status_code == 200 and cafe["id"] in [r["id"] for r in ranked.json()["results"]]
    assert client.get("/api/info").json()["gallery"]["size"] == 2


def test_thumbnails_keep_the_photos_shape(app_url, page):
    page.set_viewport_size({"width": 1200, "height": 900})
    page.goto(app_url)
    page.wait_for_selector("#library-grid a.tile img")
    wait_until(lambda: page.locator("#library-grid a.tile img").evaluate_all(
        "els => els.length === 5 && els.every(i => i.complete && i.naturalWidth > 0)"))
    shapes = page.locator("#library-grid a.tile img").evaluate_all("""els => els.map(i => {
        const r = i.getBoundingClientRect();
        return {alt: i.alt, fit: getComputedStyle(i).objectFit, box: r.width / r.height,
                natural: i.naturalWidth / i.naturalHeight};
    })""")
    assert {round(s["natural"], 2) for s in shapes} >= {4.0, 0.25}  # the thumbnails themselves keep the shape
    cropped = [s for s in shapes if s["fit"] in ("cover", "fill") and abs(s["box"] - s["natural"]) > 0.02]
    assert not cropped, f"thumbnails cropped or stretched to their cell: {cropped}"


def test_more_like_this_shows_its_photo_and_one_match_is_one_result(app_url, page):
    ids = _ids(app_url)
    page.goto(f"{app_url}/search?like={ids['police_car.jpg']}")
    page.wait_for_selector("#like-box:not([hidden]) #like-img")
    wait_until(lambda: page.inner_text("#like-name") == "police_car.jpg")
    assert page.get_attribute("#like-link", "href").endswith(f"/photo/{ids['police_car.jpg']}")
    assert ids["police_car.jpg"] in page.get_attribute("#like-img", "src")
    assert "2024-03-05" in page.inner_text("#like-when")
    page.wait_for_selector("#results .result")
    assert ids["police_car.jpg"] not in page.locator("#results .result").evaluate_all("e => e.map(x => x.dataset.id)")
    assert page.title().startswith("More like this")

    page.goto(f"{app_url}/search?" + urlencode({"where": "place ~ 'Cape Town'"}))
    page.wait_for_selector("#status:has-text(' in ')")
    assert page.is_hidden("#like-box")
    assert page.inner_text("#status").startswith("1 result in ")
    assert page.inner_text("#search-count") == "1 of 1 photo"
