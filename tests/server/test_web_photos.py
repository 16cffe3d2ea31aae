"""The web UI's photo features (issue 23) in a real headless Chromium against a real server: the date range and
place box build a filter shown with the results, which satisfy it in time order; cards show the file name and
the place and open the full photo; "more like this" ranks by a card's photo; the footer credits GeoNames.

Real parts: the geotagged photo folder (EXIF GPS for Vienna and San Diego) indexed in caption mode (MiniLM)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.server import create_app


def _cards(page) -> list[dict]:
    return page.locator("#results .result").evaluate_all(
        "els => els.map(e => ({id: e.dataset.id, file: e.querySelector('.file').textContent, "
        "where: e.querySelector('.when-where').textContent, href: e.querySelector('a.open').href}))")


def _wait_for_new_results(page, old: list[dict], timeout_s: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')", timeout=timeout_s * 1000)
        cards = _cards(page)
        if cards != old:
            return cards
        assert time.monotonic() < deadline, "the results did not change"
        time.sleep(0.1)


def test_filters_cards_and_more_like_this_in_the_page(geo_photos, serve_app, page, tmp_path):
    ws = Workspace(Settings(index=geo_photos / "index", cache_dir=tmp_path / "cache"))
    page.goto(serve_app(create_app(ws)))
    page.wait_for_selector("#method option[value=caption]", state="attached")
    assert "GeoNames" in page.inner_text("footer")

    # the date range and the place box, no query text: the matching photos, in time order
    page.fill("#date-from", "2019-07-14")
    page.fill("#place", "San Diego")
    page.click("#search-button")
    page.wait_for_selector("#results .result")
    cards = _wait_for_new_results(page, [])
    assert len(cards) == 4 and all("San Diego" in c["where"] for c in cards)
    days = [c["where"][:10] for c in cards]
    assert days == sorted(days) and days[0] >= "2019-07-14"
    assert "time >= '2019-07-14' and place ~ 'San Diego'" in page.inner_text("#filter-shown")
    assert all(c["file"].startswith("IMG_") and c["file"].endswith(".jpg") for c in cards)
    # the card opens the photo in the same tab, shown from the checked file (a JPEG)
    page.locator("#results .result a.open").first.click()
    page.wait_for_selector("#photo-view:not([hidden]) #photo-title:has-text('IMG_')")
    assert page.url == cards[0]["href"]
    full = page.request.get(page.locator("#photo-img").evaluate("img => img.src"))
    assert full.status == 200 and full.headers["content-type"] == "image/jpeg"
    original = page.request.get(page.locator("#photo-original").evaluate("a => a.href"))
    assert original.status == 200 and original.headers["content-type"] == "image/jpeg"
    page.go_back()
    page.wait_for_selector("#search-view:not([hidden]) #results .result")
    assert _cards(page) == cards

    # text + the expression field + time order (under Advanced)
    page.click("#advanced summary")
    page.fill("#date-from", "")
    page.fill("#place", "")
    page.fill("#query", "animals")
    page.select_option("#method", "caption")
    page.fill("#where", "near('Vienna', 20)")
    page.select_option("#sort", "time")
    page.click("#search-button")
    cards = _wait_for_new_results(page, cards)
    assert len(cards) == 6 and all("Vienna" in c["where"] for c in cards)
    assert [c["where"][:16] for c in cards] == sorted(c["where"][:16] for c in cards)

    # more like this: ranks by the card's photo, which is left out of its own results
    page.fill("#where", "")
    page.select_option("#sort", "score")
    first = cards[0]["id"]
    page.locator(f"#results .result[data-id='{first}'] button.more-like").click()
    cards = _wait_for_new_results(page, cards)
    assert cards and first not in [c["id"] for c in cards] and "like" in page.inner_text("#trace-summary")

    # a bad expression: one clear message, the previous results kept
    page.fill("#where", "plac ~ 'x'")
    page.fill("#query", "animals")
    page.click("#search-button")
    page.wait_for_selector("#status.error")
    assert "unknown field 'plac'" in page.inner_text("#status")
    assert len(_cards(page)) == len(cards)
