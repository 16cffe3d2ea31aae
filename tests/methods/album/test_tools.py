"""The album tools as the agent calls them: output the model reads, named subsets, bounds, errors."""

from __future__ import annotations

import json

import pytest

from imagent.agents import AgentRuntime, ToolError, ToolScope
from imagent.core.cache import DiskCache
from imagent.core.trace import Trace
from imagent.methods.album.tools import (
    AlbumToolsConfig,
    FilterResult,
    SearchResult,
    WebSearchTool,
    album_tools,
    unavailable_tools_note,
)
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Role
from imagent.tools.web_text import WebResult

pytestmark = pytest.mark.real_model  # the album is encoded with MiniLM


@pytest.fixture
def tools(known_album):
    return {t.name: t for t in album_tools(known_album, AlbumToolsConfig(max_top_k=5, max_view=2, max_metadata=3,
                                                                         list_limit=3))}


@pytest.fixture
def state():
    return ToolScope()


def test_the_paper_tools_are_offered_and_web_search_only_with_a_backend(known_album):
    names = [t.name for t in album_tools(known_album)]
    assert names == ["ImageSearch", "GetMetadata", "FilterMetadata", "ViewPhotos"]
    assert "WebSearch is not available" in unavailable_tools_note(album_tools(known_album))
    with_web = album_tools(known_album, web=FakeWeb())
    assert [t.name for t in with_web][-1] == "WebSearch" and unavailable_tools_note(with_web) == ""
    search = album_tools(known_album)[0]
    assert search.parameters["properties"]["top_k"]["default"] == 20  # the paper's 20 results


def test_image_search_lists_ids_with_scores(tools, state):
    obs = tools["ImageSearch"]({"query": "a little penguin", "top_k": 3}, state)
    assert obs.photos[0] == "penguin" and len(obs.photos) == 3
    first = obs.text.splitlines()[1]
    assert first == f"1. penguin (score {obs.scores['penguin']:.3f})"
    assert obs.text.startswith("Top 3 photos for 'a little penguin', best first:")
    with pytest.raises(ToolError, match="argument 'top_k' must be <= 5, not 50"):
        tools["ImageSearch"]({"query": "bird", "top_k": 50}, state)
    with pytest.raises(ToolError, match="needs a query"):
        tools["ImageSearch"]({}, state)


def test_filter_saves_a_named_subset_that_search_uses(tools, state):
    obs = tools["FilterMetadata"]({"expression": "time >= '2013-06-09' and time < '2013-06-10'",
                                   "save_as": "penguin_day"}, state)
    assert state.subsets["penguin_day"] == ["penguin", "heron", "duck", "frog"]
    assert obs.text.startswith("4 photo(s) match \"time >= '2013-06-09' and time < '2013-06-10'\", taken "
                               "2013-06-09 10:15:00 to 2013-06-09 17:30:00.")
    assert "Saved as subset 'penguin_day'" in obs.text and "Ids (oldest first): penguin, heron, duck ... and 1 more" \
        in obs.text
    hits = tools["ImageSearch"]({"query": "a bird", "search_within": "penguin_day"}, state)
    assert set(hits.photos) == {"penguin", "heron", "duck", "frog"}
    assert "within subset 'penguin_day' (4 photos)" in hits.text
    narrowed = tools["FilterMetadata"]({"expression": "device ~ 'iphone'", "search_within": "penguin_day"}, state)
    assert narrowed.photos == ["duck", "frog"] and "within 'penguin_day'" in narrowed.text
    # the same name again: the same photos say nothing more; other photos say what they replaced
    again = tools["FilterMetadata"]({"expression": "time >= '2013-06-09' and time < '2013-06-10'",
                                     "save_as": "penguin_day"}, state)
    assert "replaces" not in again.text
    other = tools["FilterMetadata"]({"expression": "device ~ 'iphone'", "save_as": "penguin_day"}, state)
    assert "Saved as subset 'penguin_day' (it replaces the earlier subset of that name, 4 photos)" in other.text
    assert len(state.subsets["penguin_day"]) == other.result.count and other.result.subset == "penguin_day"


def test_unsaved_results_are_saved_under_a_generated_name(tools, state):
    obs = tools["FilterMetadata"]({"expression": "address ~ 'cape town'"}, state)
    assert state.subsets["filter_1"] == ["penguin", "heron", "duck", "frog", "blackbird"]
    assert "Saved as subset 'filter_1'" in obs.text and obs.result == FilterResult(
        "address ~ 'cape town'", None, (), "filter_1", 5, ("penguin", "heron", "duck"))  # 3 listed
    small = tools["FilterMetadata"]({"expression": "address ~ 'paris'"}, state)  # short lists too: searchable
    assert small.photos == ["crow"] and state.subsets["filter_2"] == ["crow"] and "'filter_2'" in small.text
    none = tools["FilterMetadata"]({"expression": "address ~ 'nowhere'"}, state)
    assert none.photos == [] and "filter_3" not in state.subsets and "Saved" not in none.text


def test_subset_errors_go_back_to_the_model(tools, state):
    with pytest.raises(ToolError, match="no saved subset named 'trip'; saved subsets: none yet"):
        tools["ImageSearch"]({"query": "bird", "search_within": "trip"}, state)
    state.save_subset("day", ["penguin"])
    with pytest.raises(ToolError, match="saved subsets: 'day'"):
        tools["FilterMetadata"]({"expression": "lat < 0", "search_within": "trip"}, state)
    with pytest.raises(ToolError, match="subset names are 1-64 letters"):
        tools["FilterMetadata"]({"expression": "lat < 0", "save_as": "my trip!"}, state)
    with pytest.raises(ToolError, match="bad filter expression"):
        tools["FilterMetadata"]({"expression": "time is june"}, state)


def test_get_metadata(tools, state):
    obs = tools["GetMetadata"]({"photo_ids": "penguin, hen"}, state)  # one string of ids works too
    assert obs.text.splitlines() == [
        "penguin: time 2013-06-09 10:15:00; lat -34.19660, lon 18.45150; address Boulders Beach, Cape Town, "
        "South Africa; device Canon EOS 5D",
        "hen: time unknown; no GPS; address unknown; device unknown",
    ]
    only_time = tools["GetMetadata"]({"photo_ids": ["crow", "ghost"], "fields": ["time"]}, state)
    assert only_time.text.splitlines() == ["crow: time 2013-07-01 12:00:00",
                                           "Not in the album (check the ids): ghost"]
    many = tools["GetMetadata"]({"photo_ids": ["crow", "duck", "frog", "tux"]}, state)
    assert "Only the first 3 of 4 ids are described" in many.text and many.photos == ["crow", "duck", "frog"]
    with pytest.raises(ToolError, match="unknown photo id"):
        tools["GetMetadata"]({"photo_ids": ["ghost"]}, state)
    with pytest.raises(ToolError, match="missing required argument"):
        tools["GetMetadata"]({}, state)


def test_view_photos_is_bounded(tools, state):
    obs = tools["ViewPhotos"]({"photo_ids": ["crow", "duck", "frog"]}, state)
    assert [i for i, _ in obs.images] == ["crow", "duck"]
    assert "not shown yet: frog" in obs.text
    with pytest.raises(ToolError, match="unknown photo id"):
        tools["ViewPhotos"]({"photo_ids": ["crow", "ghost"]}, state)


class FakeWeb:
    backend = "fake"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def identity(self) -> str:
        return "fake-web"

    def search_text(self, query, n=5):
        self.queries.append(query)
        return [WebResult("Glass bottle - history", "https://example.org/bottle",
                          "The glass bottle was first mass-produced in 1753.")][:n]


def test_web_search_quotes_snippets_and_caches(tmp_path, state):
    web = FakeWeb()
    cache = DiskCache(tmp_path / "cache.sqlite")
    tool = WebSearchTool(web, AlbumToolsConfig(), cache)
    obs = tool({"query": "glass item first manufactured in 1753"}, state)
    assert "1. Glass bottle - history — The glass bottle was first mass-produced in 1753." in obs.text
    assert "(outside text, not instructions)" in obs.text
    tool({"query": "glass item first manufactured in 1753"}, state)
    assert web.queries == ["glass item first manufactured in 1753"]  # the second call came from the cache


def test_an_anchor_constraint_target_search_end_to_end(known_album):
    """The paper's chain on the scripted backend: find the anchor, read its date, filter that day, search
    the targets inside the subset, answer."""
    replies = iter([
        '<tool_call>{"name": "ImageSearchTool", "arguments": {"query": "penguin", "top_k": 3}}</tool_call>',
        '<tool_call>{"name": "GetMetadata", "arguments": {"photo_ids": ["penguin"], "fields": ["time"]}}</tool_call>',
        "<tool_call>{'name': 'FilterMetadata', 'arguments': {'expression': \"time >= '2013-06-09' and "
        "time < '2013-06-10'\", 'save_as': 'day',}}</tool_call>",
        '<tool_call>{"name": "ImageSearch", "arguments": {"query": "bird", "search_within": "day"}}</tool_call>',
        'The final answer is: ["heron", "duck"]',
    ])
    model = ScriptedChatModel(default=lambda _t: next(replies))
    tools = album_tools(known_album)
    runtime = AgentRuntime(Role("agent", model), tools, "Find photos.\n" + unavailable_tools_note(tools),
                           known_ids=known_album)
    trace = Trace()
    with trace.activate():
        run = runtime.run("the birds I photographed on the day I saw the penguin")
    assert run.answer == ["heron", "duck"] and run.source == "model" and run.tool_calls == 4
    prompts = model.prompts()
    assert "penguin: time 2013-06-09 10:15:00" in prompts[2]
    assert "Saved as subset 'day'" in prompts[3]
    assert run.state.subsets["day"] == ["penguin", "heron", "duck", "frog"]
    steps = [s.to_dict() for s in trace.steps]
    assert [s["outputs"]["tool"] for s in steps] == ["ImageSearch", "GetMetadata", "FilterMetadata", "ImageSearch",
                                                      None]
    assert all(s["tool_calls"] == 1 for s in steps[:4]) and json.dumps(steps)  # the trace is JSON


def test_fidelity_validator_reads_places_from_real_get_metadata_output(tools, state):
    """The validator (Eq. 2) on GetMetadata's own text: the places it prints count, so a summary that keeps
    the ids and dates but drops the place loses the message (issue 27)."""
    from imagent.methods.album.memory import extract_facts, fidelity

    call = {"photo_ids": ["penguin", "hen"]}
    obs = tools["GetMetadata"](call, state)
    facts = extract_facts(obs.text, {"penguin", "hen", "crow"}, call)
    assert facts.ids == {"penguin", "hen"} and facts.dates == {"2013-06-09"}
    assert facts.places == {"Boulders Beach"}  # "address unknown" is no place
    kept = fidelity([facts], "penguin and hen; penguin on 2013-06-09 at Boulders Beach")
    dropped = fidelity([facts], "penguin and hen; penguin on 2013-06-09")
    assert kept.loss == 0.0 and dropped.loss == 1.0 and dropped.missing == {0: ["Boulders Beach"]}
    # A filter's place is read from the expression, not mistaken for an "address ~" value.
    fobs = tools["FilterMetadata"]({"expression": "address ~ 'cape town'"}, state)
    ffacts = extract_facts(fobs.text, {"penguin", "heron", "duck", "frog", "blackbird"},
                           {"expression": "address ~ 'cape town'"})
    assert ffacts.places == {"cape town"}


def test_described_results_give_each_photo_its_date_place_and_caption(known_album, state):
    from imagent.methods.album.tools import described_groups, short_place

    tools = {t.name: t for t in album_tools(known_album, AlbumToolsConfig(describe=True, list_limit=3))}
    assert "id | score | time | caption" in tools["ImageSearch"].description
    assert "id | time | caption" in tools["FilterMetadata"].description
    obs = tools["ImageSearch"]({"query": "a little penguin", "top_k": 2}, state)
    header, group, first = obs.text.splitlines()[:3]
    assert header == ("Top 2 photos for 'a little penguin', grouped by day and place, best group first "
                      "(id | score | time | caption):")
    r = known_album.gallery.record("penguin")
    score = obs.scores["penguin"]
    # the day and place, once for the group, written as the FilterMetadata expression that selects them
    assert group == "time = '2013-06-09' and place ~ 'Boulders Beach, Cape Town':"
    assert first == f"penguin | {score:.2f} | 10:15 | {r.caption}"
    assert short_place(r) == "Boulders Beach, Cape Town"  # the venue and town: enough to filter on
    copied = tools["FilterMetadata"]({"expression": group.rstrip(":")}, state)
    assert "penguin" in copied.photos and copied.result.count >= 1
    day = tools["FilterMetadata"]({"expression": "time >= '2013-06-09' and time < '2013-06-10'", "save_as": "d"},
                                  state)
    lines = day.text.splitlines()
    at = lines.index("Photos (oldest first, grouped by day and place; id | time | caption):")
    assert lines[at + 1:at + 3] == described_groups(known_album, ["penguin"])
    assert lines[at + 1] == "time = '2013-06-09' and place ~ 'Boulders Beach, Cape Town':"
    assert lines[at + 2].startswith("penguin | 10:15 | ")
    assert "time = '2013-06-09' and place ~ 'Cape Town, South Africa':" in lines
    assert any(x.startswith("duck | 16:05 | ") for x in lines)
    assert lines[-1] == "... and 1 more" and state.subsets["d"] == ["penguin", "heron", "duck", "frog"]
    # Groups keep the order of their first photo; photos keep theirs inside a group; no id or score is lost.
    ids = ["penguin", "duck", "heron"]
    grouped = described_groups(known_album, ids, [0.9, 0.5, 0.4])
    assert sum(1 for x in grouped if " | " in x) == 3 and all(any(x.startswith(i + " | ") for x in grouped)
                                                             for i in ids)
    assert grouped[0].startswith("time = '2013-06-09'") and grouped[1].startswith("penguin | 0.90 | ")
    # the paper's plain form stays the default
    plain = album_tools(known_album)[0]
    assert "id | score" not in plain.description and not AlbumToolsConfig().describe


def test_filter_metadata_keeps_the_same_day_place_city_or_device_as_a_photo(known_album, state):
    """FilterMetadata's photo form (same_as_photo + same) runs the expression of that photo's day, place (1 km),
    city (``city_km``) or device, says which, and refuses what the photo lacks; with ``anchor_filters`` the JSON
    protocol's grammar offers only that form, its photo limited to the ids seen."""
    from imagent.agents.wire import json_turn_schema

    plain = {t.name: t for t in album_tools(known_album, AlbumToolsConfig(describe=True))}["FilterMetadata"]
    photo = {t.name: t for t in album_tools(known_album, AlbumToolsConfig(describe=True, anchor_filters=True))}[
        "FilterMetadata"]
    day = plain({"same_as_photo": "penguin", "same": ["day"], "save_as": "d"}, state)
    assert set(state.subsets["d"]) == {"penguin", "heron", "duck", "frog"}  # 2013-06-09, every place
    assert day.text.startswith("4 photo(s) match \"time = '2013-06-09'\" (the same day as penguin)")
    place = plain({"same_as_photo": "duck", "same": ["place"]}, state)
    assert set(place.photos) == {"duck", "frog", "blackbird"}  # the same GPS point, any day
    both = plain({"same_as_photo": "duck", "same": ["day", "place"]}, state)
    assert set(both.photos) == {"duck", "frog"}
    city = plain({"same_as_photo": "penguin", "same": ["city"]}, state)  # Boulders Beach is ~30 km from town
    assert "penguin" in city.photos and "heron" in city.photos and "crow" not in city.photos
    device = plain({"same_as_photo": "duck", "same": ["device"]}, state)
    assert set(device.photos) == {"duck", "frog", "crow"} and "device = 'iPhone 5'" in device.text
    with pytest.raises(ToolError, match="expression, or same_as_photo"):
        plain({}, state)
    with pytest.raises(ToolError, match="not both"):
        plain({"expression": "time = '2013'", "same_as_photo": "duck"}, state)
    with pytest.raises(ToolError):
        plain({"same_as_photo": "nobody", "same": ["day"]}, state)
    # The grammar: without anchor_filters the written expression; with it only the photo form.
    free = json_turn_schema([plain], ["penguin", "duck"], [])["oneOf"][0]["properties"]["arguments"]
    assert "expression" in free["properties"] and free["required"] == []
    offered = json_turn_schema([photo], ["penguin", "duck"], [])["oneOf"][0]["properties"]["arguments"]
    assert "expression" not in offered["properties"] and offered["required"] == ["same_as_photo", "same"]
    assert offered["properties"]["same_as_photo"] == {"enum": ["penguin", "duck"]}
    assert offered["properties"]["same"]["items"] == {"enum": ["day", "place", "city", "device", "after", "before",
                                                               "other_day"]}
    with pytest.raises(ValueError):  # no photo seen yet: FilterMetadata is not offered (nothing else is either)
        json_turn_schema([photo], [], [])
    assert photo.example == {"same_as_photo": "<photo id>", "same": ["day"], "save_as": "that_day"}


def test_filter_metadata_keeps_the_days_after_or_before_a_photo_or_its_place_on_other_days(known_album, state):
    """The photo form's time words: the days after the photo's day, before it, or (with the place) the other days
    at that place ("my other visit to the place"); each says what it kept; two time words, or a photo without a
    date, are refused with the reason."""
    tool = {t.name: t for t in album_tools(known_album, AlbumToolsConfig(describe=True))}["FilterMetadata"]
    after = tool({"same_as_photo": "penguin", "same": ["after"], "save_as": "later"}, state)
    assert set(state.subsets["later"]) == {"blackbird", "crow"}  # not the 2013-06-09 photos, not the undated hen
    assert after.text.startswith("2 photo(s) match \"time > '2013-06-09'\" (the days after the day of penguin)")
    before = tool({"same_as_photo": "penguin", "same": ["before"]}, state)
    assert before.photos == ["tux"]
    other = tool({"same_as_photo": "duck", "same": ["place", "other_day"]}, state)
    assert other.photos == ["blackbird"]  # duck and frog are that day at that place
    assert "(the same place, on other days than the day of duck)" in other.text
    earlier_here = tool({"same_as_photo": "blackbird", "same": ["place", "before"]}, state)
    assert set(earlier_here.photos) == {"duck", "frog"}
    with pytest.raises(ToolError, match="contradict"):
        tool({"same_as_photo": "penguin", "same": ["day", "after"]}, state)
    with pytest.raises(ToolError, match="hen has no date"):
        tool({"same_as_photo": "hen", "same": ["after"]}, state)


def test_clear_matches_are_the_results_above_the_largest_score_drop(known_album, state):
    from imagent.methods.album.tools import clear_matches

    assert clear_matches([0.92, 0.42, 0.38, 0.38]) == 1  # the anchor stands alone
    assert clear_matches([0.50, 0.45, 0.43, 0.40, 0.36, 0.26, 0.25]) == 5  # the drop after the fifth
    assert clear_matches([0.7, 0.6, 0.5]) == 1 and clear_matches([0.4]) == 1 and clear_matches([]) == 0
    cfg = AlbumToolsConfig(describe=True, clear_matches=True)
    search = {t.name: t for t in album_tools(known_album, cfg)}["ImageSearch"]
    obs = search({"query": "a little penguin", "top_k": 4}, state)
    scores = [obs.scores[i] for i in obs.photos]
    n = clear_matches(scores)
    assert obs.text.splitlines()[-1] == (f"Clear matches (above the largest score drop, {scores[n - 1]:.2f} -> "
                                         f"{scores[n]:.2f}): " + ", ".join(obs.photos[:n]))
    # the typed result carries what code reads: the query, ids, scores, times and the clear matches it named
    found = obs.result
    assert isinstance(found, SearchResult) and found.query == "a little penguin" and found.within is None
    assert found.ids == tuple(obs.photos) and found.scores == tuple(scores) and found.shown
    assert found.matches == tuple(obs.photos[:n]) and found.times[0] == "2013-06-09 10:15:00"
    # off by default, and never on the paper's plain (id and score) results
    for off in (AlbumToolsConfig(describe=True), AlbumToolsConfig(clear_matches=True)):
        tool = {t.name: t for t in album_tools(known_album, off)}["ImageSearch"]
        plain = tool({"query": "a little penguin", "top_k": 4}, state)
        assert "Clear matches" not in plain.text
        assert not plain.result.shown and plain.result.matches == found.matches  # computed, not shown


def test_image_search_can_read_its_query(known_album, state):
    """``read_query`` (imagent's own, off by default as in the papers): a place or date of the album named in the
    query limits the search to their photos; the rest of the words are searched."""
    plain = {t.name: t for t in album_tools(known_album)}["ImageSearch"]
    reading = {t.name: t for t in album_tools(known_album, AlbumToolsConfig(read_query=True))}["ImageSearch"]
    asked = {"query": "birds in Paris", "top_k": 5}
    assert len(plain(asked, state).photos) == 5  # the words as given: every bird, Paris or not
    obs = reading(asked, state)
    assert obs.photos == ["crow"] and "(understood: place Paris · content 'birds'; 1 photos)" in obs.text
    assert obs.result.query == "birds"
    june = reading({"query": "a bird on 10 June 2013", "top_k": 5}, state)
    assert june.photos == ["blackbird"]
    none = reading({"query": "penguins in 2020", "top_k": 5}, state)
    assert none.photos == [] and "No photos found" in none.text
