"""The text in photos on the web page, in a real headless Chromium: a quoted search finds the photo of the sign, whose
photo view lists the text read in it and draws its box over the photo on hover (issue 45, item 1).

The index is built by the real pipeline (the pixel model, MiniLM in caption mode, the OCR model) over 20 shipped
stamps and three photos of rendered signs (tests/testkit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.server import create_app
from testkit import signs_among_stamps

pytestmark = pytest.mark.real_model


@pytest.fixture
def text_ws(tmp_path) -> tuple[Workspace, dict[str, str]]:
    files = signs_among_stamps(tmp_path / "photos", stamps=20)
    ws = Workspace.from_config(sets=[f"index={tmp_path / 'index'}", f"cache_dir={tmp_path / 'cache'}",
                                     "cache_calls=false", "faces.mode=off"])
    ws.index(tmp_path / "photos")
    g = ws.gallery()
    by_name = {Path(g.record(i).path).name: i for i in g.ids}
    return ws, {name: by_name[name] for name in files}


def test_a_text_search_shows_the_photo_with_its_text(text_ws, serve_app, page, tmp_path):
    ws, ids = text_ws
    page.goto(serve_app(create_app(ws)))
    page.wait_for_selector("#gallery-info:has-text('23 photos')")
    page.fill("#query", '"Cafe Sol"')
    page.click("#search-button")
    page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')")
    page.wait_for_function("() => !document.querySelector('#results.stale')")
    first = page.locator("#results .result").first
    assert first.get_attribute("data-id") == ids["sign_cafe.jpg"]
    assert first.locator(".match").inner_text() == "match"

    first.locator("a.open").click()  # the photo view: its text, and the box drawn over the photo on hover
    page.wait_for_selector("#photo-details ol.photo-text li")
    assert page.locator("#photo-details dt", has_text="Text").count() == 1
    assert page.locator("#photo-details ol.photo-text li").all_inner_texts() == ["Cafe Sol"]
    boxes = page.locator("#photo-text-boxes polygon")
    assert boxes.count() == 1
    shown = "() => getComputedStyle(document.querySelector('#photo-text-boxes')).opacity === '{}'"
    page.mouse.move(0, 0)
    page.wait_for_function(shown.format(0))  # hidden until the pointer is on the photo
    page.hover("#photo-img")
    page.wait_for_function(shown.format(1))
    # the box sits on the sign: inside the photo's own rectangle, left of its middle (the plate is at 1/5 of the width)
    img = page.locator("#photo-img").bounding_box()
    box = page.locator("#photo-text-boxes polygon").bounding_box()
    svg = page.locator("#photo-text-boxes").bounding_box()
    assert svg["width"] <= img["width"] + 1 and svg["height"] <= img["height"] + 1
    assert svg["x"] <= box["x"] and box["x"] + box["width"] <= svg["x"] + svg["width"]
    assert box["x"] < svg["x"] + svg["width"] / 2 and box["width"] < svg["width"] / 2
    page.hover("#photo-details ol.photo-text li")  # a line picks out its own box
    assert boxes.first.get_attribute("class") == "picked"
    page.screenshot(path=str(tmp_path / "photo-text.png"), full_page=True)

    page.goto(page.url.split("/photo/")[0] + f"/photo/{ids['sign_sintra.jpg']}")  # opened directly too
    page.wait_for_selector("#photo-details ol.photo-text li")
    assert page.locator("#photo-details ol.photo-text li").all_inner_texts() == ["SINTRA"]
