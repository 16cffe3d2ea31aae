"""Captions as part of the index's identity (issue 12): caption_source, captioner model + prompt in the
fingerprint, prompt files, importing captions with --captions, caption coverage; and derived text for
images without captions (issue 15)."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from imagent.core.config import ConfigError, IndexOptions
from imagent.index.builder import SourceError, build_index
from imagent.index.captioning import load_caption_prompt, parse_caption_reply, shipped_prompts
from imagent.index.derived import derive_text, name_words
from imagent.index.embedding import LazyEncoder
from imagent.index.gallery import SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery
from imagent.index.parts import IndexParts
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.encoders import CaptionDualEncoder
from imagent.models.roles import Role


@pytest.fixture
def folder(tmp_path, images) -> Path:
    d = tmp_path / "photos"
    images.jpeg(d / "animals__birds__penguin.jpg", 1)
    barcelona = (41.3851, 2.1734)
    images.jpeg(d / "Holiday Spain 2013" / "IMG_0042.jpg", 2, images.exif(datetime(2013, 6, 14, 10, 0), barcelona))
    images.jpeg(d / "myDogRex-3.jpg", 3)
    images.jpeg(d / "DSC_0001.jpg", 4)
    return d


def _captioner(model_id: str, text: str = "A caption.") -> tuple[Role, ScriptedChatModel]:
    model = ScriptedChatModel(default=text, sees_images=True, model_id=model_id)
    return Role("captioner", model), model


def test_caption_prompts_are_files_and_selectable(tmp_path):
    assert {"default", "fashioniq", "oscar"} <= set(shipped_prompts())
    fiq = load_caption_prompt("fashioniq").text.lower()
    assert all(w in fiq for w in ("colour", "design", "style"))
    custom = tmp_path / "mine.txt"
    custom.write_text("Say what you see.\n")
    p = load_caption_prompt(str(custom))
    assert p.text == "Say what you see." and p.digest != load_caption_prompt("default").digest
    with pytest.raises(ConfigError, match=r"unknown caption prompt 'nope'.*fashioniq"):
        load_caption_prompt("nope")
    assert parse_caption_reply('```json\n{"caption": "A red  dress."}\n```') == "A red dress."  # OSCAR's format
    assert parse_caption_reply('"A cat on a mat."\nmore') == "A cat on a mat."


def test_captioner_model_and_prompt_are_part_of_the_fingerprint(folder, tmp_path, tiny):
    dual = CaptionDualEncoder(tiny)
    idx = tmp_path / "idx"
    on = IndexOptions(caption_missing=True)
    role_a, model_a = _captioner("vlm-a", "A photo.")
    r = build_index(folder, idx, IndexParts.of(dual, tiny, captioner=role_a), on)
    assert r.captioned == 4 and len(model_a.calls) == 4
    assert {rec.caption_source for rec in Gallery(idx).records()} == {"captioner:vlm-a"}
    # same settings: nothing to do
    r = build_index(folder, idx, IndexParts.of(dual, tiny, captioner=role_a), on)
    assert (r.unchanged, r.captioned, len(model_a.calls)) == (4, 0, 4)
    # a run that does not caption keeps the captions
    r = build_index(folder, idx, IndexParts.of(dual, tiny), IndexOptions())
    assert r.unchanged == 4 and Gallery(idx).caption_coverage() == (4, 4)
    # another prompt: captioned again
    r = build_index(folder, idx,
                    IndexParts.of(dual, tiny, captioner=role_a), on.model_copy(update={"caption_prompt": "fashioniq"}))
    assert (r.updated, r.captioned, len(model_a.calls)) == (4, 4, 8)
    assert "colour" in model_a.calls[-1][0][0].text
    # another model: captioned again, and the records say by whom
    role_b, model_b = _captioner("vlm-b", "Another photo.")
    r = build_index(folder, idx,
                    IndexParts.of(dual, tiny, captioner=role_b), on.model_copy(update={"caption_prompt": "fashioniq"}))
    assert (r.updated, r.captioned, len(model_b.calls)) == (4, 4, 4)
    g = Gallery(idx)
    assert {rec.caption_source for rec in g.records()} == {"captioner:vlm-b"}
    assert {rec.caption for rec in g.records()} == {"Another photo."}


def test_import_captions_then_caption_only_the_rest(folder, tmp_path, tiny):
    dual = CaptionDualEncoder(tiny)
    idx = tmp_path / "idx"
    build_index(folder, idx, IndexParts.of(dual, tiny))
    g = Gallery(idx)
    assert g.caption_coverage() == (0, 4)
    penguin = next(r for r in g.records() if r.path.endswith("penguin.jpg"))
    caps = tmp_path / "caps.jsonl"
    caps.write_text("\n".join(json.dumps(r) for r in [
        {"file": "photos/animals__birds__penguin.jpg", "caption": "A penguin on ice."},
        {"id": g.records()[1].id, "caption": "A beach in Spain."},
        {"file": "photos/missing.jpg", "caption": "nothing"},
        {"file": "photos/DSC_0001.jpg"},
    ]) + "\n")
    role, model = _captioner("vlm", "Made by a model.")
    r = build_index(folder, idx,
                    IndexParts.of(dual, tiny, captioner=role), IndexOptions(caption_missing=True), captions=caps)
    assert r.imported == 2 and r.captioned == 2 and len(model.calls) == 2  # the imported two are not captioned
    reasons = sorted(reason for _, reason in r.skipped)
    assert reasons == ["line 3: photos/missing.jpg is not in the index", "line 4: no caption"]
    g = Gallery(idx)
    rec = g.record(penguin.id)
    assert rec.captions == ["A penguin on ice."] and rec.caption_source == "given"
    assert g.caption_coverage() == (4, 4)
    # the caption spaces hold the imported caption's vector
    np.testing.assert_allclose(g.vectors(SPACE_CAPTION_TEXT)[g.row(penguin.id)],
                               tiny.encode_texts(["A penguin on ice."])[0], rtol=1e-6)
    np.testing.assert_allclose(g.vectors(SPACE_IMAGE)[g.row(penguin.id)],
                               tiny.encode_texts(["A penguin on ice."])[0], rtol=1e-6)  # caption mode
    # a later captioning run with another model never replaces given captions
    role2, _ = _captioner("vlm-2", "Other.")
    r = build_index(folder, idx, IndexParts.of(dual, tiny, captioner=role2), IndexOptions(caption_missing=True))
    assert r.captioned == 2 and Gallery(idx).record(penguin.id).caption_source == "given"
    # CSV, matched by a name relative to the indexed folder
    with open(tmp_path / "caps.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "caption"])
        w.writerow(["myDogRex-3.jpg", "A dog named Rex."])
    r = build_index(folder, idx, IndexParts.of(dual, tiny), captions=tmp_path / "caps.csv")
    assert r.imported == 1
    assert any(x.caption == "A dog named Rex." for x in Gallery(idx).records())
    with pytest.raises(SourceError, match="no such caption file"):
        build_index(folder, idx, IndexParts.of(dual, tiny), captions=tmp_path / "nope.jsonl")


def test_derived_text_from_names_dates_and_places():
    assert name_words("animals__birds__penguin") == ["animals", "birds", "penguin"]
    assert name_words("myDogRex-3") == ["my", "dog", "rex"]
    assert name_words("IMG_20130614_104512") == []
    assert name_words("DSC_0001") == [] and name_words("a1b2c3d4e5f6a7b8") == []
    text = derive_text("/p/Holiday Spain 2013/IMG_0042.jpg", "/p", datetime(2013, 6, 14), None, 41.3851, 2.1734)
    assert text == "holiday spain 2013; 14 June 2013; at 41.385 N, 2.173 E"  # the day is kept (issue 23)
    assert derive_text("/p/trip/beach.jpg", "/p", None, "Barcelona, Spain") == "trip beach; at Barcelona, Spain"
    assert derive_text("/p/IMG_1.jpg", "/p") == ""


def test_uncaptioned_images_are_embedded_by_derived_text(folder, tmp_path, tiny):
    dual = CaptionDualEncoder(tiny)
    r = build_index(folder, tmp_path / "idx", IndexParts.of(dual, tiny))
    g = Gallery(tmp_path / "idx")
    by_name = {Path(rec.path).name: rec for rec in g.records()}
    assert by_name["animals__birds__penguin.jpg"].derived_text == "animals birds penguin"
    assert by_name["animals__birds__penguin.jpg"].caption_source == "" and not by_name["IMG_0042.jpg"].has_caption
    # the EXIF GPS is named offline (GeoNames): the place, not the coordinates, is what people search for
    assert by_name["IMG_0042.jpg"].derived_text == "holiday spain 2013; 14 June 2013; at Barcelona, Catalonia, Spain"
    assert by_name["DSC_0001.jpg"].derived_text == ""
    vec = g.vectors(SPACE_CAPTION_TEXT)
    np.testing.assert_allclose(vec[g.row(by_name["animals__birds__penguin.jpg"].id)],
                               tiny.encode_texts(["animals birds penguin"])[0], rtol=1e-6)
    assert not vec[g.row(by_name["DSC_0001.jpg"].id)].any()  # nothing known: a zero vector
    assert (r.without_caption, r.derived, r.with_caption) == (4, 3, 0)
    note = r.caption_note()
    assert note.startswith("4 images have no caption: search uses words from their file names and folders")
    assert "--caption-missing" in note and "sees pixels" in note


def test_no_op_reindex_never_loads_the_encoders(folder, tmp_path, tiny):
    loads: list[str] = []

    def lazy(name, make):
        return LazyEncoder(lambda: loads.append(name) or make(), model_id=make().model_id, sees_pixels=False)

    text = lazy("text", lambda: tiny)
    dual = lazy("dual", lambda: CaptionDualEncoder(tiny))
    build_index(folder, tmp_path / "idx", IndexParts.of(dual, text))
    assert loads == ["dual"]  # caption_text is the caption dual's text model: one encoding, the text embedder unloaded
    loads.clear()
    text2, dual2 = lazy("text", lambda: tiny), lazy("dual", lambda: CaptionDualEncoder(tiny))
    r = build_index(folder, tmp_path / "idx", IndexParts.of(dual2, text2))
    assert r.unchanged == 4 and loads == []  # nothing new: no model loaded
    # a wrongly predicted id is still refused before anything is written
    bad = LazyEncoder(lambda: tiny, model_id="other-model")
    with pytest.raises(Exception, match="other-model"):
        build_index(folder, tmp_path / "idx", IndexParts.of(dual2, bad))
