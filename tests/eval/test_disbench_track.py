"""DISBench tracks derived from what a run's search used (decision 9), for each kind of index: caption-mode
encoder, pixel encoder with and without captions, a captioner's captions, ``caption_missing``, a blind agent, a
text-space method; and the report stating the track with its reason and what ImageSeeker is here."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from imagent.core.config import EncoderConfig, IndexOptions
from imagent.eval.datasets import load_benchmark
from imagent.eval.datasets.disbench import IMAGESEEKER_NOTE, derive_track
from imagent.index.builder import build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts
from imagent.methods.base import MethodContext, get_method
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Roles

ALBUM = Path(str(files("imagent.eval") / "data" / "album_mini"))


def _index(root: Path, dual, text, track: str) -> Gallery:
    rows = load_benchmark("disbench", images_root=ALBUM, track=track).gallery_manifest()
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    build_index(manifest, root / "index", IndexParts.of(dual, text), IndexOptions())
    return Gallery(root / "index")


@pytest.fixture(scope="module")
def pixel_dual(tmp_path_factory, tiny_clip_kit):
    """A tiny random CLIP: an encoder that sees pixels (no real CLIP weights can be had here)."""
    from imagent.models.registry import build_dual_encoder

    folder = tiny_clip_kit.save(tmp_path_factory.mktemp("tiny-clip"), 0)
    return build_dual_encoder(EncoderConfig(backend="hf", model=str(folder), batch_size=16))


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, pixel_dual, caption_dual, minilm):
    """The mini album indexed four ways: {caption-mode, pixel} encoder x {with, without} the captions sidecar."""
    out = {}
    for enc_name, dual in (("caption", caption_dual), ("pixel", pixel_dual)):
        for track in ("open", "standard"):
            out[enc_name, track] = (_index(tmp_path_factory.mktemp(f"{enc_name}-{track}"), dual, minilm, track), dual)
    return out


def method(indexes, minilm, kind, track, name="photocraft", vision=True, **params):
    gallery, dual = indexes[kind, track]
    model = ScriptedChatModel(default="x", sees_images=vision)
    ctx = MethodContext(gallery=gallery, dual=dual, text=minilm, roles=Roles.from_models({"default": model}))
    return get_method(name)(ctx, params)


def test_standard_only_for_a_pixel_encoder_without_captions_and_a_seeing_agent(indexes, minilm):
    usage = derive_track(method(indexes, minilm, "pixel", "standard"))
    assert usage["track"] == "Standard" and usage["reasons"] == [] and list(usage["spaces"]) == ["image"]
    assert derive_track(method(indexes, minilm, "pixel", "standard", "imageseeker"))["track"] == "Standard"
    assert derive_track(method(indexes, minilm, "pixel", "standard", "clip"))["track"] == "Standard"


def test_caption_mode_encoder_is_open_even_without_a_sidecar(indexes, minilm):
    usage = derive_track(method(indexes, minilm, "caption", "standard"))
    assert usage["track"] == "Open"
    assert any("'image' is embedded by caption:" in r and "not pixels" in r for r in usage["reasons"])
    assert not any("have captions" in r for r in usage["reasons"])  # no sidecar: no captions in this index


def test_captions_put_a_pixel_run_in_the_open_track(indexes, minilm):
    usage = derive_track(method(indexes, minilm, "pixel", "open"))
    assert usage["track"] == "Open"
    gallery = indexes["pixel", "open"][0]
    n = len(gallery)
    assert usage["reasons"] == [f"{n} of {n} photos of the index have captions (0 written by a captioner, {n} given)"]


def test_captioner_captions_and_caption_missing_are_open(indexes, minilm, tmp_path):
    usage = derive_track(method(indexes, minilm, "pixel", "standard"), caption_missing=True)
    assert usage["track"] == "Open" and "caption_missing" in usage["reasons"][0]
    m = method(indexes, minilm, "pixel", "standard")
    rec = m.ctx.gallery.record(m.ctx.gallery.ids[0])
    rec.captions, rec.caption_source = ["A bird."], "captioner:some-vlm"  # as a captioner would have left it
    try:
        assert "1 written by a captioner" in derive_track(m)["reasons"][0]
    finally:
        rec.captions, rec.caption_source = [], ""


def test_a_blind_agent_reading_derived_text_is_open(indexes, minilm):
    usage = derive_track(method(indexes, minilm, "pixel", "standard", vision=False))
    assert usage["track"] == "Open"
    assert [r.split(":")[0] for r in usage["reasons"]] == ["the agent role's model cannot see pixels",
                                                           "the memory role's model cannot see pixels"]
    seeker = derive_track(method(indexes, minilm, "pixel", "standard", "imageseeker", vision=False))
    assert [r.split(":")[0] for r in seeker["reasons"]] == ["the agent role's model cannot see pixels"]


def test_a_text_space_or_an_unstated_search_is_open(indexes, minilm):
    usage = derive_track(method(indexes, minilm, "pixel", "standard", "caption"))
    assert usage["track"] == "Open" and "'caption_text' holds text embeddings" in usage["reasons"][0]
    usage = derive_track(method(indexes, minilm, "pixel", "standard", "imagescope", allow_missing_captions=True))
    assert usage["track"] == "Open" and "'caption_dual' holds text embeddings" in usage["reasons"][0]
    usage = derive_track(method(indexes, minilm, "pixel", "standard", "tacir"))
    assert usage["track"] == "Open" and "does not state which vector spaces" in usage["reasons"][0]


def test_describe_run_states_the_derived_track_and_its_reason():
    bench = load_benchmark("disbench", images_root=ALBUM, track="standard")
    open_usage = {"track": "Open", "reasons": ["its search space 'image' is embedded by caption:x"],
                  "method": "imageseeker"}
    info = bench.describe_run(open_usage)
    assert info["track"] == "Open" and info["track_reason"] == open_usage["reasons"][0]
    assert info["track_requested"].startswith("Standard (track=standard)")
    assert info["imageseeker"] == IMAGESEEKER_NOTE and "reconstruction" in IMAGESEEKER_NOTE
    assert "imageseeker" not in bench.describe_run({**open_usage, "method": "photocraft"})  # another method's run
    std = bench.describe_run({"track": "Standard", "reasons": []})
    assert std["track"] == "Standard" and "only image embeddings" in std["track_reason"]
    asked_open = load_benchmark("disbench", images_root=ALBUM, track="open").describe_run(
        {"track": "Standard", "reasons": []})
    assert asked_open["track"] == "Open" and "track=open" in asked_open["track_reason"]
    assert bench.describe_run(None)["track"].startswith("unknown")
