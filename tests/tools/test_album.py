"""The Album behind the agent tools: search (subsets, visual cues), metadata, filters, photos to view."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from imagent.index.gallery import SPACE_IMAGE, GalleryError
from imagent.tools.album import Album, format_time
from imagent.tools.base import ToolError
from imagent.tools.filter_lang import FilterError

pytestmark = pytest.mark.real_model  # MiniLM encodes the album and the queries


def test_search_ranks_by_meaning_with_scores(known_album):
    r = known_album.search("a little penguin", top_k=3)
    assert r.ids[0] == "penguin"
    assert len(r) == 3 and r.scores == sorted(r.scores, reverse=True)
    assert len(known_album.search("bird", top_k=100)) == len(known_album)  # capped by the album


def test_search_within_a_subset_only_returns_its_photos(known_album):
    day = known_album.filter("time = '2013-06-09'")
    r = known_album.search("a bird", top_k=10, within=day)
    assert set(r.ids) == set(day) == {"penguin", "heron", "duck", "frog"}
    assert known_album.search("a bird", top_k=10, within=[]).ids == []


def test_visual_cue_finds_look_alikes_and_not_itself(known_album):
    g = known_album.gallery
    vecs = np.asarray(g.vectors(SPACE_IMAGE))
    cue = vecs[g.row("penguin")]
    others = [i for i in g.ids if i != "penguin"]
    expected = max(others, key=lambda i: float(vecs[g.row(i)] @ cue))
    r = known_album.search("", top_k=3, visual_cue="penguin")
    assert "penguin" not in r.ids and r.ids[0] == expected
    both = known_album.search("a frog", top_k=7, visual_cue="penguin")
    assert "penguin" not in both.ids and len(both) == 7
    within = known_album.search("", top_k=5, visual_cue="penguin", within=["penguin", "heron", "crow"])
    assert set(within.ids) == {"heron", "crow"}


def test_search_errors(known_album):
    with pytest.raises(ToolError, match="needs a query"):
        known_album.search("  ")
    with pytest.raises(ToolError, match="unknown visual_cue photo id"):
        known_album.search("bird", visual_cue="nope")


def test_search_refuses_vectors_from_another_encoder(known_album, minilm):
    other = replace_model_id(known_album.dual, "some-other-model")
    album = Album(known_album.gallery, other, minilm)
    with pytest.raises(GalleryError, match="some-other-model"):
        album.search("bird")


def replace_model_id(encoder, model_id):
    class Renamed:
        dim = encoder.dim
        sees_pixels = encoder.sees_pixels

        def encode_texts(self, texts):
            return encoder.encode_texts(texts)

    r = Renamed()
    r.model_id = model_id
    return r


def test_metadata_fields_and_place(known_album):
    rows = known_album.metadata(["penguin", "hen"])
    assert rows[0] == {"id": "penguin", "time": "2013-06-09 10:15:00", "lat": -34.1966, "lon": 18.4515,
                       "address": "Boulders Beach, Cape Town, South Africa", "device": "Canon EOS 5D"}
    assert rows[1] == {"id": "hen", "time": None, "lat": None, "lon": None, "address": None, "device": None}
    assert known_album.metadata(["crow"], ["time"]) == [{"id": "crow", "time": "2013-07-01 12:00:00"}]
    assert known_album.metadata(["crow"], ["place"]) == [{"id": "crow", "lat": 48.8566, "lon": 2.3522,
                                                          "address": "Paris, France"}]
    with pytest.raises(ToolError, match="unknown metadata field"):
        known_album.metadata(["crow"], ["colour"])
    with pytest.raises(ToolError, match=r"unknown photo id.*nope"):
        known_album.metadata(["crow", "nope"])


def test_filter_returns_chronological_ids(known_album):
    assert known_album.filter("address ~ 'cape town'") == ["penguin", "heron", "duck", "frog", "blackbird"]
    assert known_album.filter("device ~ 'iphone' and time >= '2013-06-09' and time < '2013-06-10'") == [
        "duck", "frog"]
    assert known_album.filter("near(-34.197, 18.45, 1)") == ["penguin", "heron"]
    assert known_album.filter("device ~ 'canon'", within=["blackbird", "crow", "penguin"]) == ["penguin",
                                                                                               "blackbird"]
    with pytest.raises(FilterError):
        known_album.filter("time = ")


def test_view_gives_image_parts_tied_to_ids(known_album, tmp_path):
    images, missing = known_album.view(["crow", "penguin"])
    assert [i for i, _ in images] == ["crow", "penguin"] and missing == []
    assert images[0][1].record is known_album.gallery.record("crow")
    assert Path(images[0][1].resolved_path()).is_file()
    with pytest.raises(ToolError, match="unknown photo id"):
        known_album.view(["crow", "ghost"])


def test_view_of_a_photo_whose_file_is_gone_falls_back_to_its_surrogate(album_records, caption_dual, minilm,
                                                                          tmp_path):
    from imagent.index.embedding import gallery_from_records

    crow = replace(next(r for r in album_records if r.id == "crow"), path=str(tmp_path / "moved-away.jpg"))
    album = Album(gallery_from_records(str(tmp_path / "index"), [crow], caption_dual, minilm), caption_dual, minilm)
    images, missing = album.view(["crow"])
    assert images == [] and missing == [("crow", "A crow.; taken 2013-07-01 12:00:00; at Paris, France")]


def test_format_time(album_records):
    assert format_time(album_records[0]) == "2013-06-09 10:15:00"
    assert format_time(album_records[-1]) is None


def test_metadata_columns_come_from_sqlite_and_fall_back_when_stale(album_records, caption_dual, minilm, tmp_path):
    from imagent.index.embedding import gallery_from_records

    gallery = gallery_from_records(str(tmp_path / "index"), album_records[:3], caption_dual, minilm)
    assert gallery.metadata_columns(["address", "device"]) == [
        [r.address for r in album_records[:3]], [r.device for r in album_records[:3]]]
    with pytest.raises(ValueError, match="not record field names"):
        gallery.metadata_columns(["address') FROM records; --"])
    gallery_from_records(str(tmp_path / "index"), album_records[3:5], caption_dual, minilm)  # another writer
    assert gallery.metadata_columns(["address"]) is None  # this instance's ids are older than the database
    album = Album(gallery, caption_dual, minilm)
    assert album.filter("address ~ 'cape town'") == ["penguin", "heron", "duck"]  # from its own records
    assert Album(gallery, caption_dual, minilm).meta is album.meta  # built once per gallery
    gallery.reload()
    fresh = Album(gallery, caption_dual, minilm)
    assert fresh.meta is not album.meta and fresh.filter("address ~ 'cape town'") == [
        "penguin", "heron", "duck", "frog", "blackbird"]


def test_time_span_of_an_album_and_of_a_scoped_one(known_album):
    """The oldest and newest photo by the time column (vectorised); a scoped album (one DISBench user) keeps
    its own rows, in gallery order, and its own span; a photo without a time never counts."""
    first, last = known_album.time_span()
    assert (first.id, last.id) == ("tux", "crow") and known_album.rows is None
    scoped = known_album.scoped(["frog", "hen", "penguin", "ghost"])
    assert scoped.ids == ["penguin", "frog", "hen"] and list(scoped.rows) == [known_album.gallery.row(i)
                                                                          for i in scoped.ids]
    first, last = scoped.time_span()
    assert (first.id, last.id) == ("penguin", "frog")
    assert known_album.scoped(["hen"]).time_span() is None
