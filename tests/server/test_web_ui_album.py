"""The web UI showing a real ``photocraft`` album search step by step, in a real headless Chromium.

The album is real: fourteen photos of the mini album's user u1001 (the zoo day, the Easter evening and
distractors on other days) with their dates, places, devices and captions, in caption mode (MiniLM). The
method is the real PhotoCraft (runtime, album tools, audit); only the chat model is the scripted backend,
which writes the turns a good agent would (find the anchor, read its date, filter that day, answer), so the
page's rendering of each turn is tested deterministically and fast.
"""

from __future__ import annotations

import json
from datetime import datetime
from importlib.resources import files
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.core.config import ChatModelConfig, Settings
from imagent.server import create_app
from testkit import wait_until

ALBUM = Path(str(files("imagent.eval") / "data" / "album_mini"))
FLAMINGO = "13942060112"
ZOO_DAY = ["13942060001", "13942060038", "13942060075", "13942060112"]


def call(name: str, **arguments) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


@pytest.fixture
def album_ws(tmp_path, caption_dual, minilm) -> Workspace:
    return _album_ws(tmp_path, caption_dual, minilm)


def _album_ws(tmp_path, caption_dual, minilm, rules=None, default="The final answer is: []",
              params=None) -> Workspace:
    from imagent.core.types import ImageRecord
    from imagent.index.embedding import gallery_from_records

    meta = [json.loads(line) for line in (ALBUM / "metadata" / "u1001.jsonl").read_text().splitlines()]
    captions = {json.loads(line)["photo_id"]: json.loads(line)["caption"]
                for line in (ALBUM / "captions" / "u1001.jsonl").read_text().splitlines()}
    records = []
    for row in meta[:14]:
        m, pid = row["metadata"], row["photo_id"]
        records.append(ImageRecord(id=pid, path=str(ALBUM / "images" / "u1001" / f"{pid}.jpg"),
                                   captions=[captions[pid]], caption_source="given",
                                   taken_time=datetime.fromisoformat(m["taken_time"]), latitude=m["latitude"],
                                   longitude=m["longitude"], address=m["address"], device=m["capturedevice"]))
    assert FLAMINGO in {r.id for r in records}
    gallery = gallery_from_records(str(tmp_path / "index"), records, caption_dual, minilm)
    rules = rules if rules is not None else [
        [r"\[REFLECTION", json.dumps({"anchor": {"note": "the flamingo photo", "ok": True},
                                      "constraint": {"note": "2014-04-20", "ok": True},
                                      "target": {"note": "birds", "ok": True},
                                      "completeness": {"note": "all four", "ok": True}, "remove": []})],
        [r"\[FilterMetadata\]", "The zoo birds of that day. The final answer is: " + json.dumps(ZOO_DAY)],
        [r"\[GetMetadata\]", "The flamingo was taken on 2014-04-20; keep that day.\n"
         + call("FilterMetadata", expression="time >= '2014-04-20' and time < '2014-04-21'", save_as="zoo_day")],
        [r"\[ImageSearch\]", f"{FLAMINGO} is the flamingo. Read its date.\n" + call("GetMetadata",
                                                                                   photo_ids=[FLAMINGO])],
        ["Query:", "Anchor: the pink flamingo. First find it.\n" + call("ImageSearch", query="pink flamingo",
                                                                         top_k=3)],
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": rules, "default": default}))
    settings = Settings(index=gallery.root, cache_dir=tmp_path / "cache", cache_calls=False,
                        models={"scripted": ChatModelConfig(backend="scripted", model=str(script))},
                        roles={"default": "scripted"},
                        methods={"photocraft": {"skills_path": str(tmp_path / "skills.jsonl"), **(params or {})}})
    return Workspace(settings)


def _photocraft_search(page, url: str, query: str) -> None:
    """Open the page at ``url`` and start a ``photocraft`` search for ``query``."""
    page.goto(url)
    page.wait_for_selector("#method option[value=photocraft]", state="attached")
    page.click("#advanced summary")
    page.fill("#query", query)
    page.select_option("#method", "photocraft")
    page.click("#search-button")


def test_page_shows_a_photocraft_album_search_turn_by_turn(album_ws, serve_app, page, tmp_path):
    _photocraft_search(page, serve_app(create_app(album_ws)), "The birds I photographed on the day I saw the pink "
                       "flamingo.")
    page.wait_for_selector("#answer-box:not([hidden]) #answer .result", timeout=60_000)

    # each turn: its reasoning, the tool with its arguments, and the photos it returned with date and place
    turns = page.locator("#trace .step.turn")
    assert turns.count() == 4
    first = page.locator("#trace .step.turn[data-step='turn.1']")
    assert "ImageSearch" in first.locator(".tool-call").inner_text()
    assert "pink flamingo" in first.inner_text() and "Anchor: the pink flamingo" in first.inner_text()
    wait_until(lambda: first.locator("img").count() == 3)
    wait_until(lambda: first.locator("img").first.evaluate("img => img.naturalWidth") > 0)  # real thumbnails
    assert "2014-04-20" in first.inner_text() and "Melbourne Zoo" in first.inner_text()
    second = page.locator("#trace .step.turn[data-step='turn.2']")
    assert "GetMetadata" in second.locator(".tool-call").inner_text() and FLAMINGO in second.inner_text()
    third = page.locator("#trace .step.turn[data-step='turn.3']")
    assert "FilterMetadata" in third.locator(".tool-call").inner_text() and "zoo_day" in third.inner_text()
    # the audit ran before the answer was accepted, and shows as its own step
    assert page.locator("#trace .step[data-step='memory.audit']").count() == 1

    # the answer set, apart from the ranking, with date and place on each card
    ids = page.locator("#answer .result").evaluate_all("els => els.map(e => e.dataset.id)")
    assert ids == ZOO_DAY
    assert "4 photos" in page.inner_text("#answer-count") and "2014-04-20" in page.inner_text("#answer")
    assert page.locator("#source-note").is_hidden()  # the agent's own answer: nothing to label
    page.screenshot(path=str(tmp_path / "album-search.png"), full_page=True)


def test_page_labels_an_answer_that_is_not_the_agents_own(tmp_path, caption_dual, minilm, serve_app,
                                                          page):
    """An agent that searches but never gives a usable answer: the never-empty rule still shows photos, and the page
    says they are a fallback, not the agent's answer."""
    ws = _album_ws(tmp_path, caption_dual, minilm, rules=[["Query:", call("ImageSearch", query="pink flamingo")]],
                   default="I am not sure yet.", params={"max_turns": 3})
    _photocraft_search(page, serve_app(create_app(ws)), "Something no rule of the script answers")
    page.wait_for_selector("#source-note:not([hidden])", timeout=60_000)
    note = page.inner_text("#source-note")
    assert note.startswith("Not the method's own answer: fallback best_candidates") and "best candidate" in note
    assert page.locator("#answer .result").count() >= 1  # never empty
