"""The web search stops where the matches stop: in a real headless Chromium over 40 stamps with their captions
(MiniLM, caption mode), a search with one true match shows that one photo and nothing after it, one with five shows
five, one with none says so; no card shows a raw score; with "results per page" set every result asked for is
shown with its level (as ``imagent search --top-k``)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.server import create_app

pytestmark = pytest.mark.real_model

EURO_COINS = [f"symbols__money__euro__coins__{n}" for n in ("001", "002", "005", "010", "020")]
OTHERS = ["clothes__t_shirt", "food__fruit__kiwi", "food__fruit__sliced_lime", "food__pizza",
          "household__dishes__glass",
          "sports__basketball", "town__cartoon__gate", "town__cartoon__wishing_well", "town__flags__greenflag",
          "town__houses__cartoon__circus", "town__houses__cartoon__fort", "town__houses__cartoon__pinkhome",
          "town__roadsigns__dead_end_sign", "vehicles__construction__cartoon__terex", "vehicles__flight__planes__747",
          "vehicles__locomotive__cartoon__boxcar", "vehicles__locomotive__cartoon__caboose",
          "vehicles__masstransit__cartoon__double_decker_bus", "food__fruit__cartoon__lemon", "clothes__clothespin_old",
          "household__home_compost_bin", "sports__cartoon__football_helmet_front", "town__flags__checkeredflag",
          "town__houses__cartoon__stables"]


@pytest.fixture
def levels_ws(tmp_path, stamp_records, caption_dual, minilm) -> Workspace:
    from imagent.index.embedding import gallery_from_records

    keep = {*EURO_COINS, "animals__birds__pink_flamingo", *OTHERS}
    gallery_from_records(str(tmp_path / "index"), [r for r in stamp_records if r.id in keep], caption_dual, minilm)
    return Workspace(Settings(index=tmp_path / "index", cache_dir=tmp_path / "cache", cache_calls=False))


def _search(page, text: str) -> None:
    page.evaluate("() => { document.querySelector('#status').textContent = ''; }")  # the last search's line gone
    page.fill("#query", text)
    page.click("#search-button")
    page.wait_for_selector("#status:text-matches('[0-9]+ results? in ')")
    page.wait_for_function("() => !document.querySelector('#results.stale')")


def _ids(page, where: str) -> list[str]:
    return page.locator(f"{where} .result").evaluate_all("els => els.map(e => e.dataset.id)")


def test_a_search_shows_its_matches_and_nothing_after_them(levels_ws, serve_app, page, tmp_path):
    page.goto(serve_app(create_app(levels_ws)))
    page.wait_for_selector("#gallery-info:has-text('30 photos')")

    _search(page, "a pink flamingo")  # one true match: one strong result, the rest absent
    assert _ids(page, "#results") == ["animals__birds__pink_flamingo"]
    assert page.is_hidden("#possible-box") and _ids(page, "#possible") == []
    assert "did not match" in page.inner_text("#match-note")
    assert page.inner_text("#results .result .match") == "match"
    assert page.locator(".result .score").count() == 0  # no raw cosine on a card
    assert "1 match" in page.inner_text("#search-count")
    assert page.is_hidden("#results-more")
    page.screenshot(path=str(tmp_path / "one-match.png"), full_page=True)

    _search(page, "a euro coin")  # five
    assert sorted(_ids(page, "#results")) == sorted(EURO_COINS)

    _search(page, "a receipt from a supermarket")  # none: said, nothing listed
    assert _ids(page, "#results") == [] and _ids(page, "#possible") == []
    assert "No photo matches" in page.inner_text("#match-note")

    # a number of results asked for: that many, each with its level
    page.click("#advanced summary")
    page.fill("#top-k", "4")
    _search(page, "a pink flamingo")
    assert len(_ids(page, "#results")) == 4 and _ids(page, "#results")[0] == "animals__birds__pink_flamingo"
    levels = page.locator("#results .result .match").evaluate_all("els => els.map(e => e.textContent)")
    assert levels == ["match", "no match", "no match", "no match"]
