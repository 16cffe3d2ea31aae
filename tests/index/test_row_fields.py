"""A manifest row's values are ImageRecord's own fields (one field list): every value a row gives lands in the
record under the same name, a name that is not a record field is refused, and rows hash as they did before, so an
index built earlier sees its manifest rows unchanged."""

from __future__ import annotations

import json
from datetime import datetime
from types import SimpleNamespace

import pytest

from imagent.core.cache import stable_key
from imagent.index import sources
from imagent.index.records import make_record
from imagent.index.sources import RECORD_FIELDS, RowFields, read_source

ROW = {"file": "a.jpg", "id": "p1", "caption": "a red car", "captions": ["a car", "a red car"],
       "taken_time": "2019-07-14 10:00:00", "latitude": "48.2", "longitude": 16.37, "address": "Vienna",
       "tags": "car, red", "device": "Canon EOS 5D", "album": "holiday"}


def _items(tmp_path, rows):
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_source(tmp_path / "m.jsonl").items


def _probe() -> SimpleNamespace:
    return SimpleNamespace(content_hash="ab" * 32, taken_time=datetime(2001, 1, 1), latitude=1.0, longitude=2.0,
                           info=SimpleNamespace(width=30, height=20), device="Phone")


def test_a_rows_values_are_record_fields_and_land_in_the_record(tmp_path):
    assert set(sources.COLUMNS) | {"captions", "latitude", "longitude", "extra"} <= RECORD_FIELDS
    item = _items(tmp_path, [ROW])[0]
    given = item.row.given
    assert set(given) <= RECORD_FIELDS and set(given) == {"id", "captions", "taken_time", "latitude", "longitude",
                                                          "address", "tags", "extra"}
    rec = make_record(item, _probe())
    for name, value in given.items():
        assert getattr(rec, name) == value, name
    assert rec.captions == ["a red car", "a car"] and rec.tags == ["car", "red"] and rec.latitude == 48.2
    assert rec.extra == {"device": "Canon EOS 5D", "album": "holiday"} and rec.device == "Canon EOS 5D"
    assert rec.caption_source == "given" and (rec.width, rec.height) == (30, 20)
    with pytest.raises(ValueError, match="not ImageRecord fields"):
        RowFields({"colour": "red"})


def test_what_a_row_does_not_give_comes_from_the_file(tmp_path):
    item = _items(tmp_path, [{"file": "b.jpg"}])[0]
    rec = make_record(item, _probe())
    assert rec.id == "ab" * 8 and rec.taken_time == datetime(2001, 1, 1) and (rec.latitude, rec.longitude) == (1, 2)
    assert rec.captions == [] and rec.caption_source == "" and rec.device == "Phone" and rec.derived_text


def test_rows_hash_as_they_did_before_the_shared_field_list(tmp_path):
    """The digest is part of each input's fingerprint in an index: the formula of the old RowFields dataclass."""
    full, bare = _items(tmp_path, [ROW, {"file": "b.jpg"}])
    t = datetime(2019, 7, 14, 10)
    extra = {"device": "Canon EOS 5D", "album": "holiday"}
    old_full = stable_key("p1", ["a red car", "a car"], t.isoformat(), 48.2, 16.37, "Vienna", ["car", "red"], extra,
                          True, True)
    old_bare = stable_key(None, [], None, None, None, None, [], {}, False, False)
    assert full.row.digest() == old_full and bare.row.digest() == old_bare
    # a field given beyond those is hashed after them: another value, another digest
    more = RowFields({**full.row.given, "width": 640})
    assert more.digest() not in (old_full, old_bare)
