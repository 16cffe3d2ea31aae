"""Text in photos, the search side (issue 45, item 1), on records whose text lines are given: the filter ``text``,
quoted phrases in the query reader, a plain-words search lifted by the words read in photos, the album's text clue,
the pixel description. The OCR model itself and an index built by ``imagent index`` are tested in
tests/index/test_text_in_photos.py; here the text is given, so each rule is checked on its own."""

from __future__ import annotations

import pytest

from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, MatchCut, Query, Ranking, Result
from testkit import CaptionModeEncoder, TinyEmbedder

BOX = [[0.1, 0.1], [0.5, 0.1], [0.5, 0.2], [0.1, 0.2]]


def line(text: str, confidence: float = 0.9) -> dict:
    return {"text": text, "box": BOX, "confidence": confidence}


TEXTS = {"cafe": ["Café SOL", "open 9-18"], "solar": ["SOLAR panels"], "garage": ["GARAGESALE"],
         "sintra": ["SINTRA"], "cafe2": ["Cafe Lua"]}


def records(n_plain: int = 25) -> list[ImageRecord]:
    out = [ImageRecord(id=k, path=f"/photos/{k}.jpg", text_lines=[line(t) for t in v]) for k, v in TEXTS.items()]
    return out + [ImageRecord(id=f"p{n:02d}", path=f"/photos/p{n:02d}.jpg") for n in range(n_plain)]


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    from imagent.index.embedding import gallery_from_records

    root = tmp_path_factory.mktemp("text-index")
    return gallery_from_records(str(root), records(), CaptionModeEncoder(), TinyEmbedder())


def test_text_lines_round_trip_through_the_index(gallery):
    rec = gallery.record("cafe")
    assert [x["text"] for x in rec.text_lines] == ["Café SOL", "open 9-18"] and rec.text_lines[0]["box"] == BOX
    assert rec.text == "Café SOL\nopen 9-18"
    assert gallery.record("p00").text_lines == [] and "text_lines" not in gallery.record("p00").to_dict()
    assert ImageRecord.from_dict(rec.to_dict()) == rec


def test_the_text_filter(gallery):
    from imagent.tools.album import Album
    from imagent.tools.filter_lang import FilterError

    album = Album(gallery)
    f = lambda expr: sorted(album.filter(expr))  # noqa: E731
    assert f("text ~ 'sol'") == ["cafe", "solar"]  # inside a word too, any case
    assert f("text ~ 'CAFE sol'") == ["cafe"]  # without accents; spaces single
    assert f("text ~ 'café'") == ["cafe", "cafe2"]
    assert f("text = 'sol'") == ["cafe"]  # a whole word
    assert f("text = 'cafe sol'") == ["cafe"] and f("text = 'sol cafe'") == []  # in order
    assert f("text = 'sol open'") == ["cafe"]  # in reading order, across lines
    assert f("text ~ 'garage sale'") == ["garage"] and f("text = 'sale'") == ["garage"]  # a glued run cut apart
    assert f("text != 'sol'") == ["cafe2", "garage", "sintra", "solar"]  # photos with text only
    assert len(f("not text ~ 'sol'")) == len(gallery) - 2
    assert f("ocr ~ 'sintra' or text ~ 'lua'") == ["cafe2", "sintra"]
    for bad, why in (("text ~ ''", "needs something to look for"), ("text = '  '", "letters or digits"),
                     ("text ~ '?!'", "letters or digits"), ("text < 'a'", "does not take")):
        with pytest.raises(FilterError, match=why):
            album.filter(bad)


def test_an_empty_text_filter_says_why(gallery, tmp_path):
    from imagent.index.embedding import gallery_from_records
    from imagent.tools.photo_search import empty_hint

    assert "use text ~ 'sal'" in empty_hint(gallery, "text = 'sal'")
    assert empty_hint(gallery, "text ~ 'kyoto'") is None
    bare = gallery_from_records(str(tmp_path / "bare"), [ImageRecord(id="a", path="/a.jpg")], CaptionModeEncoder(),
                                TinyEmbedder())
    assert "no photo in this library has text read from it" in empty_hint(bare, "text ~ 'sol'")


def test_quoted_phrases_are_text_clues_never_links():
    from imagent.tools.query_reader import read_query

    r = read_query('the ticket to "Kyoto" in May', people=["May"])
    assert r.texts == ["Kyoto"] and r.content == "ticket Kyoto"
    assert [u.label for u in r.understood] == ["time May"]  # "Kyoto" in quotes is not a place, "May" outside is a date
    assert [(s.kind, s.value) for s in r.spans if s.kind == "text"] == [("text", "Kyoto")]
    assert 'text "Kyoto"' in r.describe() and r.to_dict()["texts"] == ["Kyoto"]
    r = read_query("“EXIT” and \"Cafe Sol\"")
    assert r.texts == ["EXIT", "Cafe Sol"] and r.content == "EXIT Cafe Sol"
    assert read_query('a "" b').texts == []


def _result(ids: list[str], scores: list[float], cut: MatchCut | None) -> Result:
    return Result(Ranking(ids, scores, cut), Trace(), spaces=["image"])


def test_quoted_words_rank_first_and_strong(gallery):
    from imagent.index.result_rows import result_rows
    from imagent.tools.query_reader import read_query
    from imagent.tools.text_search import with_text

    cut = MatchCut(strong=0.5, possible=0.4, median=0.1, spread=0.05, photos=len(gallery))
    ids = [f"p{n:02d}" for n in range(10)]
    base = _result(ids, [0.6 - 0.02 * n for n in range(10)], cut)
    out = with_text(base, gallery, Query(text="x"), read_query('"cafe sol"'), 10)
    assert out.ranking.ids[0] == "cafe" and cut.level(out.ranking.scores[0]) == "strong"
    assert out.ranking.ids[1:] == ids[:9] and out.ranking.scores == sorted(out.ranking.scores, reverse=True)
    assert out.text_matches["cafe"]["quoted"] and out.text_matches["cafe"]["content_score"] is None
    row = next(r for r in result_rows(out, gallery) if r["id"] == "cafe")
    assert row["matched_by"] == "text" and row["text"] == ["Café SOL", "open 9-18"]
    step = out.trace.steps[-1].to_dict()
    assert step["outputs"]["added"] == ["cafe"] and step["outputs"]["quoted"] == 1
    # the filter holds: a photo outside it is never added
    from imagent.tools.photo_search import apply_filter

    q = apply_filter(Query(text="x"), gallery, "text ~ 'lua'")
    assert "cafe" not in with_text(base, gallery, q, read_query('"cafe sol"'), 10).ranking.ids


def test_plain_words_lift_the_photos_whose_text_holds_them(gallery):
    from imagent.index.result_rows import result_rows
    from imagent.tools.query_reader import read_query
    from imagent.tools.text_search import with_text

    cut = MatchCut(strong=0.35, possible=0.275, median=0.1, spread=0.05, photos=len(gallery))
    ids = ["sintra", *[f"p{n:02d}" for n in range(8)]]
    base = _result(ids, [0.3, 0.29, 0.28, 0.2, 0.15, 0.1, 0.1, 0.1, 0.1], cut)
    out = with_text(base, gallery, Query(text="x"), read_query("the sign for Sintra"), 5)
    # "sign", "sintra": no text holds "sign", so "sintra" is all the text evidence -> lifted 6 spreads (the default)
    assert out.ranking.ids[0] == "sintra" and out.ranking.scores[0] == pytest.approx(0.3 + 6 * 0.05)
    assert out.ranking.ids[1:] == ["p00", "p01", "p02", "p03"]
    row = result_rows(out, gallery)[0]
    # its content was a possible match already: text and content matched it
    assert row["matched_by"] == "text+pixels" and row["match"] == "strong"  # (the stand-in's image space: "pixels")
    # every word: a photo the method did not rank comes in at the median, lifted to a strong match
    out = with_text(_result(ids[1:], base.ranking.scores[1:], cut), gallery, Query(text="x"), read_query("sintra"), 5)
    assert out.ranking.ids[0] == "sintra" and out.ranking.scores[0] == pytest.approx(0.1 + 6 * 0.05)
    assert result_rows(out, gallery)[0]["matched_by"] == "text"
    # boost 0: only quotes match text
    from imagent.core.config import OcrOptions

    same = with_text(base, gallery, Query(text="x"), read_query("sintra"), 9, OcrOptions(search_boost_z=0))
    assert same.ranking.ids == base.ranking.ids and not same.text_matches


def test_answer_sets_and_libraries_without_text_are_left_alone(gallery, tmp_path):
    from imagent.index.embedding import gallery_from_records
    from imagent.tools.query_reader import read_query
    from imagent.tools.text_search import with_text

    answer = Result(Ranking(["p00"], [1.0]), Trace(), answer_set=["p00"])
    assert with_text(answer, gallery, Query(text="x"), read_query('"sintra"'), 5) is answer
    bare = gallery_from_records(str(tmp_path / "bare"), [ImageRecord(id="a", path="/a.jpg")], CaptionModeEncoder(),
                                TinyEmbedder())
    out = with_text(_result(["a"], [0.2], None), bare, Query(text="x"), read_query('"sintra"'), 5)
    assert out.ranking.ids == ["a"] and "no photo in this library has text" in out.warnings[0]


def test_the_share_of_the_words_is_over_the_words_texts_hold_weighted_by_rarity(gallery):
    from imagent.tools.album import Album

    texts = Album(gallery).meta.text
    rows = {i: gallery.row(i) for i in ("cafe", "cafe2", "sintra", "p00")}
    share = texts.share(["restaurant", "sol"])  # "restaurant": in no text
    assert share[rows["cafe"]] == 1 and share[rows["cafe2"]] == 0 and share[rows["p00"]] == 0
    share = texts.share(["cafe", "sol"])  # "cafe" in two texts, "sol" in one: sol weighs more
    assert share[rows["cafe"]] == 1 and 0 < share[rows["cafe2"]] < 0.5
    assert not texts.share(["kyoto"]).any() and not texts.share([]).any()


def test_the_album_tools_take_text_as_a_clue(gallery):
    from imagent.tools.album import Album

    # No photo has a caption or derived words: every photo scores alike, only the text tells them apart.
    dual = CaptionModeEncoder()
    dual.model_id = gallery.spaces()["image"].model_id
    plain = Album(gallery, dual, TinyEmbedder())
    clued = Album(gallery, dual, TinyEmbedder(), text_clues=True)
    assert clued.search("the day I photographed the sign for Sintra", top_k=1).ids == ["sintra"]
    assert plain.search("the day I photographed the sign for Sintra", top_k=1).ids != ["sintra"]
    scoped = clued.scoped(["p00", "p01", "sintra"])
    assert scoped.search("sign for Sintra", top_k=1).ids == ["sintra"] and scoped.text_clues
    assert clued.filter("text ~ 'sintra'") == ["sintra"] and clued.has_text
    meta = {r["id"]: r for r in clued.metadata(["sintra", "p00"])}
    assert meta["sintra"]["text"] == ["SINTRA"] and "text" not in meta["p00"]


def test_a_pixel_description_gives_the_text(gallery):
    from imagent.core.config import PixelOptions
    from imagent.index.describe import pixel_description, text_in_photo

    rec = ImageRecord(id="x", path="/x.jpg", labels=[{"name": "street sign", "p": 0.9, "index": 919}],
                      text_lines=[line("SINTRA"), line("Palacio " + "x" * 100)])
    assert text_in_photo(rec)[0] == "SINTRA" and len(text_in_photo(rec)[1]) == 80
    text = pixel_description(rec, [], PixelOptions())
    assert text.startswith("Seen by the pixel model (not a caption): street sign") and 'text in the photo: "SINTRA"' \
        in text
    assert text_in_photo(ImageRecord(id="y", path="/y.jpg")) == []
