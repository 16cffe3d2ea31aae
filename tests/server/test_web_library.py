"""The photo app in a real headless Chromium against a real server (issue 40): the home page is the library (a grid
of thumbnails by day, no typing needed), paging loads more, a click opens the photo view in the same tab with its
date and place, back returns to the grid, the arrow keys move through it; one search box in plain words (an
album-style query goes to the ``album`` method, or says it fell back), filter chips narrow the results, "more"
pages them; no card shows an internal id; axe-core finds no serious accessibility violation in any view.

Real parts: seventy geotagged JPEGs (stamps re-saved with EXIF dates over three months and GPS in Vienna, San Diego
and Cape Town) with their captions imported, indexed in caption mode (MiniLM). The ``album`` method here is a test
double registered for one test (the real one is imagent's own planner): what is tested is the route to it.

With ``IMAGENT_SCREENSHOTS=docs/images`` the test writes the README's screenshots there (library, photo, search).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking, Result
from imagent.methods.base import METHODS, Method
from imagent.server import create_app
from testkit import wait_until

from ..conftest import SAN_DIEGO, STAMPS, VIENNA, write_geo_photo

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"
CAPE_TOWN = (-33.9249, 18.4241)
HEX_ID = re.compile(r"\b[0-9a-f]{16}\b")
PHOTOS = 70


@pytest.fixture(scope="module")
def photo_library(tmp_path_factory, caption_dual, minilm):
    """``photos/``: 70 camera-named JPEGs, four a day every fourth day from 2022-03-14 to 2022-05-21 (two that last
    day), each day in one of three cities (Vienna, San Diego, Cape Town in turn); ``index/``: indexed with the stamps'
    captions (``--captions``). The one penguin is on 2022-04-23."""
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    root = tmp_path_factory.mktemp("photo-library")
    rows = [json.loads(line) for line in (STAMPS / "captions.jsonl").read_text().splitlines()]
    birds = [r for r in rows if r["category"].startswith("animals/birds")]
    others = [r for r in rows if r["category"].startswith(("animals/mammals", "food"))]
    penguin = next(r for r in birds if r["id"] == "animals__birds__penguin")
    birds = [r for r in birds if not re.search(r"pengu|pengw|tux", r["id"])]  # one penguin only
    picks = birds[:25] + others[:PHOTOS - 26]
    picks.insert(40, penguin)
    caption_rows = []
    for i, r in enumerate(picks):
        day = i // 4
        when = datetime(2022, 3, 14, 9, 0) + timedelta(days=day * 4, hours=2 * (i % 4))
        city = (VIENNA, SAN_DIEGO, CAPE_TOWN)[day % 3]
        name = f"IMG_{4000 + i}.jpg"
        write_geo_photo(STAMPS / r["file"], root / "photos" / f"{when:%Y-%m}" / name, when, city)
        caption_rows.append({"file": f"{when:%Y-%m}/{name}", "caption": r["caption"]})
    captions = root / "photos" / "captions.jsonl"
    captions.write_text("\n".join(json.dumps(c) for c in caption_rows) + "\n")
    build_index(root / "photos", root / "index", IndexParts.of(caption_dual, minilm), captions=captions)
    return root


@pytest.fixture
def app_url(photo_library, serve_app, tmp_path):
    ws = Workspace(Settings(index=photo_library / "index", cache_dir=tmp_path / "cache"))
    return serve_app(create_app(ws))


def screenshot(pg, tmp_path, name: str) -> None:
    folder = Path(os.environ.get("IMAGENT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(folder / f"{name}.png"))


def serious_violations(pg) -> list[dict]:
    """axe-core's violations of impact serious or critical on the page as it is now. The script is served to the
    page from its own origin by the test (the page's CSP allows only same-origin scripts, and stays as it is)."""
    source = AXE.read_bytes()
    assert hashlib.sha256(source).hexdigest() == AXE_SHA256, "tests/server/vendor/axe-core/axe.min.js changed"
    if not pg.evaluate("() => typeof window.axe !== 'undefined'"):
        pg.route("**/__test__/axe.min.js", lambda route: route.fulfill(body=source,
                                                                         content_type="application/javascript"))
        pg.add_script_tag(url="/__test__/axe.min.js")
    found = pg.evaluate("""async () => {
        const r = await axe.run(document, { resultTypes: ["violations"] });
        return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
                                          nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
    }""")
    return [v for v in found if v["impact"] in ("serious", "critical")]


def tiles(pg) -> list[str]:
    return pg.locator("#library-grid a.tile").evaluate_all("els => els.map(e => e.dataset.id)")


def test_library_is_the_home_page_with_paging_photo_view_and_back(app_url, page, tmp_path):
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(app_url)
    # the library, without typing anything: thumbnails by day, newest first
    page.wait_for_selector("#library-grid a.tile img")
    assert page.is_visible("#library-view") and page.is_hidden("#search-view")
    wait_until(lambda: page.locator("#library-grid a.tile img").first.evaluate("img => img.naturalWidth") > 0)
    assert len(tiles(page)) == 60 and page.inner_text("#library-count") == f"{PHOTOS} photos"
    assert page.inner_text("#gallery-info") == "photos · 70 photos"  # the library's name, no server path
    days = page.locator("#library-grid section.day").evaluate_all("els => els.map(e => e.dataset.day)")
    assert days == sorted(days, reverse=True) and days[0] == "2022-05-21" and len(days) >= 15
    assert page.inner_text("#library-grid section.day h3 >> nth=0") == "2022-05-21 · 2 photos · Cape Town"
    months = page.locator("#jump option").evaluate_all("els => els.map(e => e.value).filter(Boolean)")
    assert months == ["2022-05", "2022-04", "2022-03"]
    assert not HEX_ID.search(page.inner_text("#main"))
    alts = page.locator("#library-grid img").evaluate_all("els => els.map(e => e.alt)")
    assert all(a and not HEX_ID.search(a) and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", a) for a in alts)
    # axe-core runs and would see a photo without alt text (put in for a moment)
    page.evaluate("""() => { const i = document.createElement('img'); i.id = 'no-alt'; i.src = '/favicon.ico';
                             document.getElementById('main').prepend(i); }""")
    assert "image-alt" in [v["id"] for v in serious_violations(page)]
    page.evaluate("() => document.getElementById('no-alt').remove()")
    assert serious_violations(page) == []
    screenshot(page, tmp_path, "library")

    # paging: the next page joins the grid
    page.click("#library-more")
    wait_until(lambda: len(tiles(page)) == PHOTOS)
    assert page.is_hidden("#library-more")
    ids = tiles(page)
    assert len(set(ids)) == PHOTOS

    # the month jump scrolls to the month
    page.select_option("#jump", "2022-03")
    wait_until(lambda: page.evaluate("() => document.activeElement.closest('section.day')?.dataset.day || ''")
               .startswith("2022-03"))

    # keyboard: arrows move between photos, Enter opens one
    page.locator("#library-grid a.tile").first.focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => document.activeElement.dataset.id") == ids[1]
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Enter")
    page.wait_for_selector("#photo-view:not([hidden]) #photo-title:has-text('IMG_')")
    assert page.url == f"{app_url}/photo/{ids[0]}" and len(page.context.pages) == 1
    page.go_back()
    page.wait_for_selector("#library-view:not([hidden])")

    # a click opens the photo in the same tab: large, with its date, time, place, coordinates and file
    third = page.locator("#library-grid a.tile").nth(2)
    third.click()
    page.wait_for_selector("#photo-view:not([hidden]) #photo-title:has-text('IMG_')")
    assert page.url == f"{app_url}/photo/{ids[2]}" and len(page.context.pages) == 1
    assert page.is_hidden("#library-view")
    facts = page.inner_text("#photo-details")
    assert re.search(r"Date\s+2022-05-\d\d", facts) and re.search(r"Time\s+\d\d:\d\d", facts)
    assert re.search(r"Place\s+(San Diego|Vienna|Cape Town)", facts) and "Coordinates" in facts
    assert re.search(r"File\s+IMG_40\d\d\.jpg", facts) and re.search(r"Folder\s+photos/2022-05", facts)
    wait_until(lambda: page.locator("#photo-img").evaluate("img => img.naturalWidth") > 0)
    assert serious_violations(page) == []
    screenshot(page, tmp_path, "photo")
    # next / previous (and the arrow keys) move through the grid it came from; back still returns to the grid
    page.click("#photo-next")
    page.wait_for_url(f"{app_url}/photo/{ids[3]}")
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(f"{app_url}/photo/{ids[2]}")
    page.go_back()
    page.wait_for_selector("#library-view:not([hidden]) #library-grid a.tile")
    assert page.url == f"{app_url}/" and tiles(page) == ids  # the grid as it was, not loaded again
    # the photo's own address, opened directly (shared), shows it; back to the library from there
    page.goto(f"{app_url}/photo/{ids[5]}")
    page.wait_for_selector("#photo-view:not([hidden]) #photo-title:has-text('IMG_')")
    assert "Place" in page.inner_text("#photo-details")
    page.click("#photo-back")
    page.wait_for_selector("#library-view:not([hidden]) #library-grid a.tile")
    page.goto(f"{app_url}/photo/no-such-photo")
    page.wait_for_selector("#photo-title:has-text('Photo not found')")


class AnchorDayDouble(Method):
    """NOT the album method: a test double registered as ``album`` so the route to it can be tested before (and
    apart from) imagent's own planner. It finds the anchor by caption and answers with the photos of its day."""

    name = "album"
    tasks: ClassVar[frozenset[str]] = frozenset({"tir"})
    description = "test double: the photos of the anchor's day"

    def run(self, query: Query, top_k: int, trace: Trace) -> Result:
        g = self.ctx.gallery
        with trace.step("anchor") as step:
            vec = self.ctx.encode([query.text], "caption_text")[0]
            anchor = g.search(vec, "caption_text", 1).ids[0]
            day = g.record(anchor).taken_time.date()
            same = [i for i in g.ids if g.record(i).taken_time and g.record(i).taken_time.date() == day]
            step.outputs.update({"anchor": anchor, "photos": same})
        return Result(ranking=Ranking(same, [1.0] * len(same)), trace=trace, answer_set=same)


def cards(pg) -> list[dict]:
    return pg.locator("#results .result").evaluate_all(
        "els => els.map(e => ({id: e.dataset.id, text: e.innerText, score: !!e.querySelector('.score'), "
        "match: e.querySelector('.match') ? e.querySelector('.match').textContent : null}))")


def wait_for_results(pg, before: str) -> None:
    """Until a search newer than the status line ``before`` has finished."""
    deadline = time.monotonic() + 60
    while True:
        status = pg.inner_text("#status")
        if status != before and re.search(r"\d+ results? in ", status):  # "1 result in 0.2 s" too
            return
        assert "error" not in status, status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def submit(pg, field: str, value: str) -> None:
    """Type ``value`` into ``field``, press Enter, and wait for that search's results."""
    pg.evaluate("() => { document.getElementById('status').textContent = ''; }")  # two searches may say the same
    pg.fill(field, value)
    pg.press(field, "Enter")
    wait_for_results(pg, "")


def search_for(pg, text: str) -> None:
    submit(pg, "#query", text)


@pytest.fixture
def labelled_cards(monkeypatch):
    """Cards with labels and people, as the index gives them once it has them (pixel labels, faces): the page's
    handling of them is tested here, apart from those parts."""
    from dataclasses import replace

    import imagent.library.service as service
    from imagent.library.types import Label, PersonRef

    plain = service.photo_card
    monkeypatch.setattr(service, "photo_card", lambda rec, *args: replace(
        plain(rec, *args), labels=[Label("bird", 0.91)], people=[PersonRef("p1", "Anna"), PersonRef("p2", "")]))


def test_plain_words_search_routes_chips_and_more(labelled_cards, app_url, page, tmp_path,
                                                  monkeypatch):
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(app_url)
    page.wait_for_selector("#library-grid a.tile")

    # an album-style query without the album method: content search, and the page says so
    monkeypatch.delitem(METHODS, "album", raising=False)
    search_for(page, "the birds from the day I saw the penguin")
    assert "/search?q=the+birds+from+the+day+I+saw+the+penguin" in page.url
    note = page.inner_text("#route-note")
    assert "'album' method is not installed" in note and "the day i saw" in note
    assert page.is_hidden("#trace-panel")  # the trace is under Advanced

    # with the album method: the same words go to it
    monkeypatch.setitem(METHODS, "album", AnchorDayDouble)
    search_for(page, "the birds from the day I saw the penguin")
    assert page.inner_text("#route-note").startswith("An album search (album)")
    page.wait_for_selector("#answer-box:not([hidden]) #answer .result")
    answer = page.locator("#answer .result").evaluate_all("els => els.map(e => e.innerText)")
    assert answer and all("2022-04-" in a for a in answer) and any("penguin" in a.lower() for a in answer)
    page.click("#advanced summary")
    assert page.inner_text("#trace-summary").startswith("album:")
    page.click("#advanced summary")

    # a content query: its matches and nothing after them, no raw score on a card, file names (never ids)
    search_for(page, "a penguin")
    assert page.inner_text("#route-note").startswith("Searched with caption: 70 of 70 photos have captions")
    matches = cards(page) + page.locator("#possible .result").evaluate_all("els => els.map(e => ({id: e.dataset.id}))")
    assert 0 < len(matches) < 20 and "penguin" in cards(page)[0]["text"].lower()
    assert not any(c["score"] for c in cards(page)) and {c["match"] for c in cards(page)} == {"match"}
    assert page.is_hidden("#results-more")
    # results per page asked for: that many, each with its level, and "more" pages them
    page.click("#advanced summary")
    page.fill("#top-k", "60")
    page.click("#advanced summary")
    search_for(page, "a penguin")
    found = cards(page)
    assert len(found) == 60 and "penguin" in found[0]["text"].lower() and not any(c["score"] for c in found)
    assert found[-1]["match"] == "no match" and [c["id"] for c in found][:len(matches)] == [c["id"] for c in matches]
    assert all(re.search(r"IMG_40\d\d\.jpg", c["text"]) and not HEX_ID.search(c["text"]) for c in found)
    assert page.is_visible("#results-more")
    page.click("#results-more")
    wait_until(lambda: len(cards(page)) == PHOTOS)
    assert [c["id"] for c in cards(page)][:60] == [c["id"] for c in found]
    assert serious_violations(page) == []
    page.evaluate("() => window.scrollTo(0, 0)")
    screenshot(page, tmp_path, "search")

    # a place chip narrows the same words to San Diego; its × widens them again
    submit(page, "#place", "San Diego")
    narrowed = cards(page)
    assert 0 < len(narrowed) < PHOTOS and all("San Diego" in c["text"] for c in narrowed)
    assert page.inner_text("#chips").startswith("Place: San Diego")
    assert "place ~ 'San Diego'" in page.inner_text("#filter-shown")
    # a date chip on top: both hold
    submit(page, "#date-from", "2022-04-15")
    both = cards(page)
    assert 0 < len(both) < len(narrowed) and {c["id"] for c in both} <= {c["id"] for c in narrowed}
    assert all(re.search(r"2022-0(4-(1[5-9]|2\d|30)|5-\d\d)", c["text"]) for c in both)
    page.evaluate("() => { document.getElementById('status').textContent = ''; }")
    page.click("#chips button[aria-label='Remove the filter Place: San Diego']")
    wait_for_results(page, "")
    assert len(both) < len(cards(page)) and page.input_value("#place") == ""

    # the filters alone (no words): their photos in time order, with no score
    page.fill("#place", "Vienna")
    submit(page, "#query", "")
    listed = cards(page)
    assert listed and not any(c["score"] for c in listed) and all("Vienna" in c["text"] for c in listed)
    stamps = [re.search(r"2022-\d\d-\d\d \d\d:\d\d", c["text"]).group(0) for c in listed]
    assert stamps == sorted(stamps) and stamps[0] >= "2022-04-15"
    assert serious_violations(page) == []

    # a result opens in the same tab; back returns to the results as they were
    page.locator("#results .result a.open").first.click()
    page.wait_for_selector("#photo-view:not([hidden]) #photo-title:has-text('IMG_')")
    page.go_back()
    page.wait_for_selector("#search-view:not([hidden]) #results .result")
    assert cards(page) == listed and page.input_value("#place") == "Vienna"
    # back again: the earlier search's address shows it again
    page.go_back()
    page.wait_for_selector("#search-view:not([hidden])")
    assert "/search?q=a+penguin" in page.url
    # and the library is one click away
    page.click("#main-nav a[data-nav=library]")
    page.wait_for_selector("#library-view:not([hidden]) #library-grid a.tile")

    # labels and people (when the index has them) are shown with the photo; each makes a filter chip
    asked: list[str] = []
    page.on("request", lambda r: asked.append(__import__("urllib.parse").parse.unquote_plus(r.url)))
    page.fill("#query", "")
    page.locator("#library-grid a.tile").first.click()
    page.wait_for_selector("#photo-view:not([hidden]) #photo-title:has-text('IMG_')")
    facts = page.inner_text("#photo-details")
    assert re.search(r"Labels\s+bird \(91%\)", facts) and re.search(r"People\s+Anna\s+someone unnamed", facts)
    page.click("#photo-details button.label")
    page.wait_for_selector("#search-view:not([hidden])")
    wait_until(lambda: any("/api/library?where=" in u and "label ~ 'bird'" in u for u in asked))
    assert "Label: bird" in page.inner_text("#chips") and "label=bird" in page.url
    page.go_back()  # to the photo: the person makes a second chip, both hold
    page.wait_for_selector("#photo-view:not([hidden]) #photo-title:has-text('IMG_')")
    page.click("#photo-details button.person")
    wait_until(lambda: any("label ~ 'bird' and person = 'Anna'" in u for u in asked))
    assert "Person: Anna" in page.inner_text("#chips")
