"""The People page in a real headless Chromium against a real server (issue 37 item 4): the groups of faces found
by the real dlib models, with face thumbnails, the larger groups first and the rare ones last; a group named in the
page is named in the index (the API and ``imagent people --json`` show it) and the name filters the photos (the
chip ``person = 'NAME'`` gives exactly that person's photos, from the People page and from the photo view); a face
split off and its group merged back; a face removed; one group's page with its faces and photos; an index without
face data says how to get it; axe-core finds no serious violation; no internal photo id is shown.

Real parts: Barack Obama's three photos and Joe Biden's (public-domain White House photos in ``tests/data/faces``,
see its SOURCE.md), re-saved with EXIF dates and GPS, and scikit-image's coffee (no face), indexed once for the
module with faces found (dlib HOG, 5-point landmarks, ResNet descriptor) and MiniLM captions mode.

With ``IMAGENT_SCREENSHOTS=docs/images`` the test writes docs/images/people.png.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.server import create_app
from testkit import wait_until

from ..conftest import VIENNA, write_geo_photo
from .test_web_library import HEX_ID, screenshot, serious_violations

pytestmark = pytest.mark.real_model

FACES = Path(__file__).resolve().parents[1] / "data" / "faces"
OBAMA = ("obama.jpg", "obama2.jpg", "obama3.jpg")


@pytest.fixture(scope="module")
def faces_library(tmp_path_factory, caption_dual, minilm) -> Path:
    """``photos/``: Obama's three photos and Biden's with EXIF dates in 2023 and GPS in Vienna, and a photo without
    a face; ``index/``: indexed from the folder (faces found: the default for folders)."""
    import skimage.data
    from PIL import Image

    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    root = tmp_path_factory.mktemp("web-people")
    photos = root / "photos"
    for i, name in enumerate((*OBAMA, "biden.jpg")):
        write_geo_photo(FACES / name, photos / name, datetime(2023, 5, 10 + i, 9 + i, 30), VIENNA)
    photos.mkdir(exist_ok=True)
    Image.fromarray(skimage.data.coffee()).save(photos / "coffee.png")
    build_index(photos, root / "index", IndexParts.of(caption_dual, minilm))
    return root


def _files(base: str, ids) -> set[str]:
    return {Path(httpx.get(f"{base}/api/photos/{i}").json()["file"]).name for i in ids}


def _groups(base: str) -> list[dict]:
    return httpx.get(f"{base}/api/people").json()["people"]


def _card(pg, gid: int) -> str:
    return f"li.person[data-person='{gid}']"


def _say(pg) -> str:
    return pg.inner_text("#status")


def test_people_page_names_filters_splits_merges_and_removes(faces_library, serve_app, page, tmp_path):
    from typer.testing import CliRunner

    from imagent.cli.main import app as cli

    index = faces_library / "index"
    base = serve_app(create_app(Workspace(Settings(index=index, cache_dir=tmp_path / "cache", cache_calls=False))))
    groups = _groups(base)
    by_files = {g["id"]: _files(base, g["photo_ids"]) for g in groups}
    obama = next(g for g in groups if by_files[g["id"]] == set(OBAMA))
    biden = next(g for g in groups if by_files[g["id"]] == {"biden.jpg"})
    assert len(groups) == 2 and groups[0] is obama and biden["tiny"]

    # the People page at its own address: a card per group with its face thumbnails; the rare ones last
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{base}/people")
    page.wait_for_selector(f"#people-grid {_card(page, obama['id'])} img.face")
    assert page.get_attribute("#main-nav a[data-nav=people]", "aria-current") == "page"
    assert page.is_hidden("#people-empty") and page.is_hidden("#library-view")
    wait_until(lambda: page.locator(f"{_card(page, obama['id'])} img.face").evaluate_all(
        "els => els.length === 3 && els.every(i => i.complete && i.naturalWidth > 0)"))
    assert page.locator(f"#people-tiny {_card(page, biden['id'])} img.face").count() == 1
    assert page.inner_text(f"{_card(page, obama['id'])} .count") == "3 photos"
    assert page.inner_text("#people-count").startswith("2 groups · 0 named · 4 faces in 5 photos")
    assert page.get_attribute(f"{_card(page, obama['id'])} a.faces", "href") == f"/people/{obama['id']}"
    assert not HEX_ID.search(page.inner_text("#main"))

    # a taken name is refused and says why; the field is marked
    page.fill(f"{_card(page, biden['id'])} input.name-input", "Joe")
    page.press(f"{_card(page, biden['id'])} input.name-input", "Enter")
    wait_until(lambda: _say(page) == "named Joe")
    # naming a group in the page: Enter saves it in the index
    page.fill(f"{_card(page, obama['id'])} input.name-input", "Barack")
    page.press(f"{_card(page, obama['id'])} input.name-input", "Enter")
    wait_until(lambda: _say(page) == "named Barack")
    assert page.evaluate("() => document.activeElement.value") == "Barack"  # the focus stays in the field
    assert page.inner_text("#people-count").startswith("2 groups · 2 named")
    names = {g["id"]: g["name"] for g in _groups(base)}
    assert names == {obama["id"]: "Barack", biden["id"]: "Joe"}
    listed = CliRunner().invoke(cli, ["people", "--index", str(index), "--json"])
    assert listed.exit_code == 0, listed.output
    cli_names = {g["id"]: (g["name"], {Path(p["path"]).name for p in g["photos"]})
                 for g in json.loads(listed.stdout)["people"]}
    assert cli_names[obama["id"]] == ("Barack", set(OBAMA))
    page.evaluate("() => { document.activeElement.blur(); window.scrollTo(0, 0); }")
    screenshot(page, tmp_path, "people")
    page.fill(f"{_card(page, biden['id'])} input.name-input", "barack")
    page.click(f"{_card(page, biden['id'])} button[type=submit] >> text=Save")
    wait_until(lambda: "already named 'Barack'" in _say(page))
    assert page.get_attribute(f"{_card(page, biden['id'])} input.name-input", "aria-invalid") == "true"
    page.press(f"{_card(page, biden['id'])} input.name-input", "Escape")
    assert page.input_value(f"{_card(page, biden['id'])} input.name-input") == "Joe"
    assert serious_violations(page) == []

    # "Show photos": the search with the chip person = 'Barack' lists exactly his photos
    page.click(f"{_card(page, obama['id'])} button.show-photos")
    page.wait_for_selector("#search-view:not([hidden]) #results .result")
    assert page.url == f"{base}/search?person=Barack"
    assert page.inner_text("#chips").startswith("Person: Barack")
    assert "person = 'Barack'" in page.inner_text("#filter-shown")
    wait_until(lambda: page.locator("#results .result").count() == 3)
    shown = page.locator("#results .result").evaluate_all("els => els.map(e => e.dataset.id)")
    assert set(shown) == set(obama["photo_ids"])
    assert all(re.search(r"obama\d?\.jpg", t) for t in page.locator("#results .result .file").all_inner_texts())
    page.go_back()
    page.wait_for_selector(f"#people-view:not([hidden]) {_card(page, obama['id'])}")

    # one group's page: its faces and its photos in the library's grid (ISO dates, no ids)
    page.click(f"{_card(page, obama['id'])} a.faces")
    page.wait_for_url(f"{base}/people/{obama['id']}")
    page.wait_for_selector("#person-photos a.tile")
    assert page.inner_text("#person-title") == "Barack" and page.inner_text("#person-count") == "3 photos"
    assert page.locator("#person-faces li.face-item").count() == 3
    wait_until(lambda: page.locator("#person-photos a.tile").count() == 3)
    titles = page.locator("#person-photos a.tile").evaluate_all("els => els.map(e => e.title)")
    assert all(re.match(r"2023-05-1\d \d\d:30 · Vienna", t) for t in titles), titles
    assert not HEX_ID.search(page.inner_text("#main"))
    assert serious_violations(page) == []

    # the photo view shows him by name; the name there is a chip that finds exactly his photos
    page.locator("#person-photos a.tile").first.click()
    page.wait_for_selector("#photo-view:not([hidden]) #photo-details button.person")
    assert re.search(r"People\s+Barack", page.inner_text("#photo-details"))
    page.go_back()  # back to his page, then the chip from the photo view
    page.wait_for_selector("#person-view:not([hidden]) #person-photos a.tile")
    page.locator("#person-photos a.tile").nth(1).click()
    page.click("#photo-details button.person")
    wait_until(lambda: page.locator("#results .result").count() == 3 and "person=Barack" in page.url)
    assert set(page.locator("#results .result").evaluate_all("els => els.map(e => e.dataset.id)")) \
        == set(obama["photo_ids"])

    # split: one of his faces is "someone else": a group of its own; merged back from the People page
    page.goto(f"{base}/people/{obama['id']}")
    page.wait_for_selector("#person-faces li.face-item")
    page.locator("#person-faces button.split").first.click()
    wait_until(lambda: page.locator("#person-faces li.face-item").count() == 2)
    assert "a group of its own" in _say(page) and page.inner_text("#person-count") == "2 photos"
    apart = next(g for g in _groups(base) if g["id"] not in (obama["id"], biden["id"]))
    assert apart["faces"] == 1 and apart["name"] is None and apart["tiny"]
    page.click("#person-back")
    page.wait_for_selector(f"#people-tiny {_card(page, apart['id'])}")
    assert page.get_attribute(f"{_card(page, apart['id'])} a.faces", "aria-label") \
        == f"Unnamed (group {apart['id']}): 1 photo"
    page.click(f"{_card(page, apart['id'])} button.merge-open")
    merge_select = f"{_card(page, apart['id'])} .merge-form select"
    options = page.locator(f"{merge_select} option").all_inner_texts()
    assert options == ["Barack (2 photos)", "Joe (1 photo)"]
    page.select_option(merge_select, str(obama["id"]))
    page.click(f"{_card(page, apart['id'])} .merge-form button[type=submit]")
    wait_until(lambda: page.locator(_card(page, apart["id"])).count() == 0)
    assert "merged into Barack: 3 faces in 3 photos" in _say(page)
    assert page.inner_text(f"{_card(page, obama['id'])} .count") == "3 photos"
    after = _groups(base)
    assert [(g["id"], g["name"], g["faces"]) for g in after] == [(obama["id"], "Barack", 3), (biden["id"], "Joe", 1)]

    # someone unnamed in the photo view opens their group; "Not a face" deletes the face (and the group with it)
    page.fill(f"{_card(page, biden['id'])} input.name-input", "")
    page.press(f"{_card(page, biden['id'])} input.name-input", "Enter")
    wait_until(lambda: _say(page) == "the name Joe is taken off")
    biden_photo = biden["photo_ids"][0]
    page.goto(f"{base}/photo/{biden_photo}")
    page.click("#photo-details a.unnamed")
    page.wait_for_url(f"{base}/people/{biden['id']}")
    page.wait_for_selector("#person-faces li.face-item")
    assert page.inner_text("#person-title") == f"Unnamed (group {biden['id']})"
    page.once("dialog", lambda d: d.accept())
    page.click("#person-faces button.remove")
    page.wait_for_url(f"{base}/people")
    page.wait_for_selector(f"#people-grid {_card(page, obama['id'])}")
    assert page.locator(_card(page, biden["id"])).count() == 0 and page.is_hidden("#people-tiny-box")
    assert [g["id"] for g in _groups(base)] == [obama["id"]]
    page.goto(f"{base}/people/{biden['id']}")
    page.wait_for_selector("#person-title:has-text('No such person')")


def test_an_index_without_faces_says_how_to_get_them(stamps_gallery, serve_app, page, tmp_path):
    base = serve_app(create_app(Workspace(Settings(index=stamps_gallery.root, cache_dir=tmp_path / "cache"))))
    page.goto(base)
    page.wait_for_selector("#library-grid a.tile")
    page.click("#main-nav a[data-nav=people]")  # from the library by the header's link, in the same tab
    page.wait_for_selector("#people-view:not([hidden]) #people-empty:not([hidden])")
    assert page.url == f"{base}/people"
    text = page.inner_text("#people-empty")
    assert "No faces in this library yet" in text and "imagent index" in text
    assert page.locator("#people-view li.person").count() == 0 and page.inner_text("#people-count") == ""
    assert serious_violations(page) == []
    page.go_back()
    page.wait_for_selector("#library-view:not([hidden])")
