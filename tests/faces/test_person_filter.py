"""The filter field ``person``: parsing, and its evaluation over an album's rows (no model: the rows and names of
:class:`imagent.index.people.PeopleIndex` are given; the real faces are in test_people_index.py)."""

from __future__ import annotations

import numpy as np
import pytest

from imagent.index.people import PeopleIndex, check_name
from imagent.tools.filter_lang import AlbumMeta, Compare, FilterError, parse_filter


def test_person_parses_with_its_operators_and_aliases():
    assert parse_filter("person = 'Anna'") == Compare("person", "=", "anna")
    assert parse_filter("people ~ 'ann'") == Compare("person", "~", "ann")
    assert parse_filter("person = 7") == Compare("person", "=", "7")
    with pytest.raises(FilterError, match="person does not take '<'"):
        parse_filter("person < 'Anna'")
    with pytest.raises(FilterError, match="fields are time, address, device, lat, lon, person"):
        parse_filter("who = 'Anna'")


def _album() -> AlbumMeta:
    """Five photos: 0 Anna, 1 Anna and Ben, 2 Ben, 3 an unnamed group 9, 4 nobody."""
    meta = AlbumMeta(np.full(5, np.nan), np.full(5, np.nan), np.full(5, np.nan), [None] * 5, [None] * 5)
    people = PeopleIndex(5, {1: "Anna", 2: "Ben", 9: None},
                         {1: np.array([0, 1]), 2: np.array([1, 2]), 9: np.array([3])},
                         {"p0": [1], "p1": [1, 2], "p2": [2], "p3": [9]}, has_data=True)
    meta.people = lambda: people
    return meta


@pytest.mark.parametrize(("expr", "rows"), [
    ("person = 'Anna'", [0, 1]),
    ("person = 'anna'", [0, 1]),
    ("person = 'Anna' and person = 'Ben'", [1]),
    ("person = 'Anna' or person = 9", [0, 1, 3]),
    ("person = '#9'", [3]),
    ("person ~ 'N'", [0, 1, 2]),
    ("person != 'Anna'", [2, 3]),
    ("not person = 'Anna'", [2, 3, 4]),
])
def test_person_selects_rows(expr, rows):
    assert np.flatnonzero(_album().evaluate(parse_filter(expr))).tolist() == rows


def test_person_errors_name_what_exists():
    meta = _album()
    with pytest.raises(FilterError, match=r"no one is named 'anne' in this index; named people: 'Anna', 'Ben'"):
        meta.evaluate(parse_filter("person = 'Anne'"))
    with pytest.raises(FilterError, match="no group 4"):
        meta.evaluate(parse_filter("person = 4"))
    assert not _album().evaluate(parse_filter("person ~ 'zed'")).any()  # part of a name: no match is no error
    bare = AlbumMeta(np.full(2, np.nan), np.full(2, np.nan), np.full(2, np.nan), [None] * 2, [None] * 2)
    with pytest.raises(FilterError, match="no face data"):
        bare.evaluate(parse_filter("person = 'Anna'"))
    empty = PeopleIndex(2, {}, {}, {}, has_data=False)
    bare.people = lambda: empty
    with pytest.raises(FilterError, match="has no face data"):
        bare.evaluate(parse_filter("person = 'Anna'"))


def test_people_of_a_photo_named_first():
    people = _album().people()
    assert people.people_of("p1") == [{"id": 1, "name": "Anna"}, {"id": 2, "name": "Ben"}]
    assert people.labels_of("p3") == ["#9"] and people.people_of("p4") == []


def test_names_are_checked():
    assert check_name("  Anna   Maria ") == "Anna Maria"
    for bad, why in (("", "empty"), ("x" * 101, "at most 100"), ("#12", "group number"), ("a\x00b", "printable")):
        with pytest.raises(ValueError, match=why):
            check_name(bad)


def test_missing_face_models_are_said_and_indexing_goes_on(tmp_path, monkeypatch, minilm, caption_dual):
    """Without dlib (a base install): "auto" reports it and indexes; "on" refuses with the install hint."""
    from PIL import Image

    from imagent.core.config import FaceOptions
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts
    from imagent.models import faces

    monkeypatch.setattr(faces, "available", lambda: f"dlib is not installed; {faces.INSTALL_HINT}")
    folder = tmp_path / "photos"
    folder.mkdir()
    Image.new("RGB", (64, 48), "red").save(folder / "red.png")
    report = build_index(folder, tmp_path / "index", IndexParts.of(caption_dual, minilm))
    assert report.added == 1 and report.faces.status == "unavailable"
    assert "imagent[offline]" in report.faces.summary() and 'faces.mode = "off"' in report.faces.summary()
    Image.new("RGB", (64, 48), "blue").save(folder / "blue.png")
    with pytest.raises(faces.FaceModelError, match="dlib is not installed"):
        build_index(folder, tmp_path / "index", IndexParts.of(caption_dual, minilm, faces=FaceOptions(mode="on")))
