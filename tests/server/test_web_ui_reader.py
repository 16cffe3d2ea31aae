"""The web search box reads its question: in a real headless Chromium, "photos of Barack in Kyoto" shows what it
understood as chips (person Barack, place Kyoto) over exactly his Kyoto photos, and removing a chip runs the search
again without that filter (the place read as a word: all of his photos). The library is real: two people named on
real faces (dlib), two trips written with EXIF GPS and dates (``testkit.TRIPS``), caption mode (MiniLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.server import create_app
from testkit import name_trip_people, trips_folder, wait_until

pytestmark = pytest.mark.real_model


@pytest.fixture
def trips_ws(tmp_path, caption_dual, minilm, geo_photo) -> Workspace:
    from imagent.index.builder import build_index
    from imagent.index.gallery import Gallery
    from imagent.index.parts import IndexParts

    folder = trips_folder(tmp_path / "photos", geo_photo)
    build_index(folder, tmp_path / "index", IndexParts.of(caption_dual, minilm))
    assert set(name_trip_people(Gallery(tmp_path / "index"))) == {"Barack", "Joe"}
    return Workspace(Settings(index=tmp_path / "index", cache_dir=tmp_path / "cache", cache_calls=False))


def _shown_files(page, ws) -> set[str]:
    g = ws.gallery()
    ids = page.locator("#results .result").evaluate_all("els => els.map(e => e.dataset.id)")
    return {Path(g.record(i).path).name for i in ids}


def test_the_search_box_shows_what_it_understood_and_a_chip_removed_searches_again(trips_ws, serve_app, page,
                                                                                  tmp_path):
    page.goto(serve_app(create_app(trips_ws)))
    page.wait_for_selector("#gallery-info:has-text('8 photos')")
    page.fill("#query", "photos of Barack in Kyoto")
    page.click("#search-button")
    page.wait_for_selector("#understood-box:not([hidden]) #understood li")
    page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')")
    chips = page.locator("#understood li")
    assert [c.strip() for c in chips.evaluate_all("els => els.map(e => e.querySelector('span').textContent)")] == [
        "person Barack", "place Kyoto"]
    assert _shown_files(page, trips_ws) == {"IMG_0001.jpg", "IMG_0002.jpg"}
    assert "Listed, no model" in page.inner_text("#route-note")
    page.screenshot(path=str(tmp_path / "understood.png"), full_page=True)

    # remove the place: the search runs again, Kyoto read as a word, Barack still a filter
    page.locator("#understood li[data-key='place:Kyoto'] button").click()
    wait_until(lambda: _shown_files(page, trips_ws) == {"IMG_0001.jpg", "IMG_0002.jpg", "IMG_0006.jpg"})
    page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')")
    labels = page.locator("#understood li span").evaluate_all("els => els.map(e => e.textContent)")
    assert labels == ["person Barack", "Kyoto"]  # the filter left, the word now searched
    assert "not=place%3AKyoto" in page.url
    # a new question reads its words afresh
    page.fill("#query", "photos of Joe in Lisbon")
    page.click("#search-button")
    wait_until(lambda: _shown_files(page, trips_ws) == {"IMG_0007.jpg"})
    wait_until(lambda: page.locator("#understood li span").evaluate_all("els => els.map(e => e.textContent)")
               == ["person Joe", "place Lisbon"])


def test_a_filter_that_matches_nothing_says_the_near_miss(trips_ws, serve_app, page):
    """Issue 47: `place = 'Kyoto'` where places are stored as "Kyoto, Japan" shows no photo and the hint the CLI
    prints (use place ~ 'Kyoto'), in a real browser; a filter that matches says nothing of the kind."""
    from urllib.parse import quote

    base = serve_app(create_app(trips_ws))
    page.goto(f"{base}/search?where={quote(chr(39).join(['place = ', 'Kyoto', '']))}")
    page.wait_for_selector("#match-note:not([hidden])")
    note = page.inner_text("#match-note")
    assert "place ~ 'Kyoto'" in note and "Kyoto, Japan" in note, note
    assert _shown_files(page, trips_ws) == set()
    page.goto(f"{base}/search?where={quote(chr(39).join(['place ~ ', 'Kyoto', '']))}")
    page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')")
    assert _shown_files(page, trips_ws) and page.locator("#match-note").is_hidden()
