"""Folder sources: EXIF metadata, filters, renames, manifests in CSV/JSON, captioning, record_for_file."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from imagent.core.config import IndexOptions
from imagent.core.hashing import short_id
from imagent.core.imageio import ImageLoadError
from imagent.core.types import MetadataConstraints
from imagent.index.builder import SourceError, build_index, record_for_file
from imagent.index.embedding import gallery_from_records
from imagent.index.gallery import SPACE_CAPTION_TEXT, Gallery, GalleryError
from imagent.index.parts import IndexParts
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Role

pytestmark = pytest.mark.real_model

PARIS = (48.858222, 2.2945)
LONDON = (51.500729, -0.124625)
SYDNEY = (-33.856784, 151.215297)


@pytest.fixture
def exif_folder(tmp_path, images) -> Path:
    d = tmp_path / "photos"
    images.jpeg(d / "paris.jpg", 1, images.exif(datetime(2019, 7, 14, 10, 0, 0), PARIS))
    images.jpeg(d / "trip" / "london.jpg", 2, images.exif(datetime(2020, 3, 1, 9, 30, 0), LONDON))
    images.jpeg(d / "trip" / "deep" / "sydney.JPEG", 3, images.exif(datetime(2021, 12, 31, 23, 0, 0), SYDNEY))
    images.jpeg(d / "no_gps.jpg", 4, images.exif(datetime(2020, 6, 1, 8, 0, 0)))
    images.jpeg(d / "nothing.jpg", 5)
    (d / "notes.txt").write_text("not scanned")
    images.jpeg(d / ".hidden" / "skip.jpg", 6)  # hidden folders are left out
    images.jpeg(d / "._resource.jpg", 7)  # hidden files too
    return d


def _ids_by_name(g: Gallery) -> dict[str, str]:
    return {Path(r.path).name: r.id for r in g.records()}


def test_folder_exif_metadata_and_filters(exif_folder, tmp_path, caption_dual, minilm):
    idx = tmp_path / "idx"
    report = build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (report.added, report.total, report.skipped) == (5, 5, [])
    g = Gallery(idx)
    by_name = _ids_by_name(g)
    assert set(by_name) == {"paris.jpg", "london.jpg", "sydney.JPEG", "no_gps.jpg", "nothing.jpg"}
    # ids are content hashes
    paris = g.record(by_name["paris.jpg"])
    assert paris.id == short_id(hashlib.sha256(Path(paris.path).read_bytes()).hexdigest())
    assert paris.taken_time == datetime(2019, 7, 14, 10, 0, 0)
    assert paris.latitude == pytest.approx(PARIS[0], abs=1e-5) and paris.longitude == pytest.approx(PARIS[1], abs=1e-5)
    syd = g.record(by_name["sydney.JPEG"])
    assert syd.latitude == pytest.approx(SYDNEY[0], abs=1e-5) and syd.longitude == pytest.approx(SYDNEY[1], abs=1e-5)
    london = g.record(by_name["london.jpg"])
    assert london.longitude == pytest.approx(LONDON[1], abs=1e-5) and london.longitude < 0
    no_gps = g.record(by_name["no_gps.jpg"])
    assert no_gps.taken_time == datetime(2020, 6, 1, 8) and no_gps.latitude is None
    nothing = g.record(by_name["nothing.jpg"])
    assert (nothing.taken_time, nothing.latitude, nothing.captions) == (None, None, [])

    q = minilm.encode_texts(["a photo"])[0]
    in_2020 = MetadataConstraints(time_from=datetime(2020, 1, 1), time_to=datetime(2020, 12, 31, 23, 59))
    got = g.search(q, SPACE_CAPTION_TEXT, 10, constraints=in_2020)
    assert set(got.ids) == {by_name["london.jpg"], by_name["no_gps.jpg"]}
    near_paris = MetadataConstraints(near_latitude=48.8566, near_longitude=2.3522, within_km=50)
    assert g.search(q, SPACE_CAPTION_TEXT, 10, constraints=near_paris).ids == [by_name["paris.jpg"]]
    europe = MetadataConstraints(near_latitude=48.8566, near_longitude=2.3522, within_km=500)
    assert set(g.search(q, SPACE_CAPTION_TEXT, 10, constraints=europe).ids) == {
        by_name["paris.jpg"], by_name["london.jpg"]}
    both = MetadataConstraints(time_from=datetime(2020, 1, 1), near_latitude=48.8566, near_longitude=2.3522,
                               within_km=500)
    assert g.search(q, SPACE_CAPTION_TEXT, 10, constraints=both).ids == [by_name["london.jpg"]]


def test_folder_rename_keeps_record_and_new_file(exif_folder, tmp_path, caption_dual, minilm, images):
    idx = tmp_path / "idx"
    build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    pid = _ids_by_name(Gallery(idx))["paris.jpg"]
    (exif_folder / "paris.jpg").rename(exif_folder / "trip" / "paris-renamed.jpg")
    images.jpeg(exif_folder / "new.png", 9)
    r = build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (r.added, r.removed, r.unchanged) == (2, 0, 4)  # the renamed file's record moves, none removed
    g = Gallery(idx)
    assert len(g) == 6 and g.record(pid).path.endswith("paris-renamed.jpg")
    assert g.record(pid).taken_time == datetime(2019, 7, 14, 10)
    assert build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions()).unchanged == 6

    # New content in a file: a new content-hash id replaces the old record (no orphan left behind).
    old_id = _ids_by_name(Gallery(idx))["nothing.jpg"]
    images.jpeg(exif_folder / "nothing.jpg", 20)
    r = build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (r.added, r.updated, r.removed, r.unchanged) == (0, 1, 0, 5)
    g = Gallery(idx)
    assert old_id not in g and len(g) == 6 and _ids_by_name(g)["nothing.jpg"] != old_id
    assert len(g.fingerprints()) == 6


def test_two_sources_share_an_index(exif_folder, stamps_copy, tmp_path, caption_dual, minilm):
    idx = tmp_path / "idx"
    lines = (stamps_copy / "captions.jsonl").read_text().splitlines()[:5]
    (stamps_copy / "five.jsonl").write_text("\n".join(lines) + "\n")
    build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    r = build_index(stamps_copy / "five.jsonl", idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (r.added, r.removed) == (5, 0)  # the folder's records are not this manifest's to remove
    assert len(Gallery(idx)) == 10
    r = build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (r.unchanged, r.removed) == (5, 0)
    assert len(Gallery(idx)) == 10


def test_csv_and_json_manifests(tmp_path, images, caption_dual, minilm):
    d = tmp_path / "set"
    images.jpeg(d / "img" / "a.jpg", 1, images.exif(datetime(2001, 1, 1), PARIS))
    images.jpeg(d / "img" / "b.jpg", 2)
    abs_c = images.jpeg(tmp_path / "elsewhere" / "c.jpg", 3)
    with open(d / "m.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "id", "captions", "taken_time", "latitude", "longitude", "address", "tags", "split"])
        w.writerow(["img/a.jpg", "A", "A dog.|A brown dog on grass.", "2022-05-06 07:08:09", "", "", "Rome",
                    "pet, dog", "test"])
        w.writerow(["img/b.jpg", "", "A cat.", "", "51.5", "-0.12", "", "", "train"])
        w.writerow([str(abs_c), "C", "", "", "", "", "", "", ""])
    r = build_index(d / "m.csv", tmp_path / "idx", IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (r.added, r.skipped) == (3, [])
    g = Gallery(tmp_path / "idx")
    a = g.record("A")
    assert a.captions == ["A dog.", "A brown dog on grass."] and a.tags == ["pet", "dog"]
    assert a.taken_time == datetime(2022, 5, 6, 7, 8, 9)  # the manifest overrides EXIF's 2001
    assert a.latitude == pytest.approx(PARIS[0], abs=1e-5)  # no manifest position: EXIF's is kept
    assert a.address == "Rome" and a.extra == {"split": "test"}
    b = next(rec for rec in g.records() if rec.path.endswith("b.jpg"))
    assert b.id == short_id(b.content_hash) and (b.latitude, b.longitude) == (51.5, -0.12)
    assert g.record("C").path == str(abs_c)

    rows = [{"file": "img/a.jpg", "id": 7, "captions": ["one", "two"], "tags": ["x"], "meta": {"k": [1, 2]},
             "taken_time": "2020-01-02T03:04:05Z"}]
    (d / "m.json").write_text(json.dumps({"images": rows}))
    r = build_index(d / "m.json", tmp_path / "idx2", IndexParts.of(caption_dual, minilm), IndexOptions())
    rec = Gallery(tmp_path / "idx2").record("7")
    assert rec.captions == ["one", "two"] and rec.extra == {"meta": {"k": [1, 2]}}
    assert rec.taken_time is not None and rec.taken_time.isoformat() == "2020-01-02T03:04:05+00:00"


def test_bad_sources(tmp_path, caption_dual, minilm):
    with pytest.raises(SourceError, match="no such file"):
        build_index(tmp_path / "nope", tmp_path / "idx", IndexParts.of(caption_dual, minilm))
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(SourceError, match="neither a folder nor a manifest"):
        build_index(tmp_path / "x.txt", tmp_path / "idx", IndexParts.of(caption_dual, minilm))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SourceError, match="not valid JSON"):
        build_index(tmp_path / "bad.json", tmp_path / "idx", IndexParts.of(caption_dual, minilm))
    (tmp_path / "obj.json").write_text('{"a": 1}')
    with pytest.raises(SourceError, match="JSON list"):
        build_index(tmp_path / "obj.json", tmp_path / "idx", IndexParts.of(caption_dual, minilm))


def test_other_encoder_is_refused(exif_folder, tmp_path, caption_dual, minilm):
    idx = tmp_path / "idx"
    build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())

    class Other:
        model_id = "other-model"
        dim = minilm.dim

        def encode_texts(self, texts):
            return np.ones((len(texts), self.dim), dtype=np.float32) / np.sqrt(self.dim)

    with pytest.raises(GalleryError, match="other-model"):
        build_index(exif_folder, idx, IndexParts.of(None, Other()), IndexOptions())
    assert len(Gallery(idx)) == 5  # untouched


def test_new_space_embeds_stored_records_in_it_only(exif_folder, tmp_path, caption_dual, minilm):
    idx = tmp_path / "idx"
    build_index(exif_folder, idx, IndexParts.of(None, minilm), IndexOptions())
    assert set(Gallery(idx).spaces()) == {SPACE_CAPTION_TEXT}
    before = Gallery(idx).vectors(SPACE_CAPTION_TEXT).copy()
    r = build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (r.updated, r.unchanged, r.backfilled) == (0, 5, 5)
    assert any("gains space(s) image, caption_dual" in w and "5 stored image(s)" in w for w in r.warnings)
    g = Gallery(idx)
    assert len(g.spaces()) == 3 and np.array_equal(g.vectors(SPACE_CAPTION_TEXT), before)
    assert np.allclose(g.vectors("image"), before, atol=1e-5)  # caption mode: the same MiniLM caption vectors
    assert build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions()).backfilled == 0


# --------------------------------------------------------------------------- captioning


def test_caption_missing_with_a_seeing_captioner(exif_folder, tmp_path, caption_dual, minilm):
    model = ScriptedChatModel(default="A small colourful postage stamp.\nExtra line.", sees_images=True)
    role = Role("captioner", model)
    idx = tmp_path / "idx"
    r = build_index(exif_folder, idx,
                    IndexParts.of(caption_dual, minilm, captioner=role),
                    IndexOptions(caption_missing=True, batch_size=2))
    assert r.captioned == 5 and r.warnings == []
    assert len(model.calls) == 5
    msgs, params = model.calls[0]
    assert params.max_tokens == IndexOptions().caption_max_tokens
    assert msgs[0].has_images() and "one factual sentence" in msgs[0].text
    g = Gallery(idx)
    rec = g.records()[0]
    assert rec.captions == ["A small colourful postage stamp."] and rec.caption_source == "captioner:scripted"
    assert rec.derived_text == ""  # a real caption replaces the name words
    q = minilm.encode_texts(["a postage stamp"])[0]
    assert g.scores(q, SPACE_CAPTION_TEXT).min() > 0.3  # captions were embedded
    again = build_index(exif_folder, idx,
                        IndexParts.of(caption_dual, minilm, captioner=role), IndexOptions(caption_missing=True))
    assert (again.unchanged, again.captioned, len(model.calls)) == (5, 0, 5)


def test_caption_missing_with_a_blind_captioner_warns_once(exif_folder, tmp_path, caption_dual, minilm):
    model = ScriptedChatModel(default="should not be called", sees_images=False, model_id="blind")
    r = build_index(exif_folder, tmp_path / "idx",
                    IndexParts.of(caption_dual, minilm, captioner=Role("captioner", model)),
                    IndexOptions(caption_missing=True))
    assert r.added == 5 and r.captioned == 0 and model.calls == []
    assert len(r.warnings) == 1 and "cannot see images" in r.warnings[0]


def test_captioner_failure_is_retried_next_run(exif_folder, tmp_path, caption_dual, minilm):
    from imagent.models.base import ChatError

    def boom(_text):
        raise ChatError("server down")

    role = Role("captioner", ScriptedChatModel(default=boom, sees_images=True))
    idx = tmp_path / "idx"
    opts = IndexOptions(caption_missing=True)
    r = build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm, captioner=role), opts)
    assert r.added == 5 and r.captioned == 0 and any("server down" in w for w in r.warnings)
    ok = Role("captioner", ScriptedChatModel(default="A stamp.", sees_images=True))
    r = build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm, captioner=ok), opts)
    assert (r.updated, r.captioned) == (5, 5)


# --------------------------------------------------------------------------- record_for_file


def test_record_for_file(exif_folder, tmp_path, caption_dual, minilm, images):
    idx = tmp_path / "idx"
    build_index(exif_folder, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    g = Gallery(idx)
    pid = _ids_by_name(g)["paris.jpg"]
    assert record_for_file(exif_folder / "paris.jpg", g) == g.record(pid)
    copy = tmp_path / "copy.jpg"
    shutil.copyfile(exif_folder / "paris.jpg", copy)
    assert record_for_file(copy, g).id == pid  # same content, found by hash
    new = images.jpeg(tmp_path / "new.jpg", 11, images.exif(datetime(2018, 1, 1), SYDNEY))
    rec = record_for_file(new, g)
    assert rec.id == short_id(rec.content_hash) and rec.id not in g
    assert rec.taken_time == datetime(2018, 1, 1) and rec.latitude == pytest.approx(SYDNEY[0], abs=1e-5)
    assert rec.captions == [] and rec.path == str(new)
    (tmp_path / "t.jpg").write_text("text")
    with pytest.raises(ImageLoadError, match=r"cannot use .*t\.jpg as an image: not an image"):
        record_for_file(tmp_path / "t.jpg", g)
    with pytest.raises(ValueError, match="file not found"):
        record_for_file(tmp_path / "missing.jpg", g)


def test_record_for_file_in_records_gallery(tmp_path, caption_dual, minilm, images, stamp_records):
    """A gallery built from records (no content hashes): a file gives a transient record."""
    g = gallery_from_records(str(tmp_path / "g"), stamp_records[:3], caption_dual, minilm)
    rec = record_for_file(stamp_records[0].path, g)
    assert rec.content_hash and rec.width
