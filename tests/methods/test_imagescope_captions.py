"""Gallery captions where ImageScope and X^R read them: an index without captions is refused before any
model call (in a search and in `imagent eval`), ``allow_missing_captions`` runs and says so, partial
coverage is noted. Real stamps images and the real MiniLM; scripted chat models that fail on any call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.core.types import ImageRecord, Query
from imagent.index.embedding import gallery_from_records
from imagent.methods.base import MethodContext, get_method
from imagent.methods.captions import MissingCaptionsError, capped_fields, caption_coverage, check_captions
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Roles
from testkit import eval_app

FIXES = ("--caption-missing", "--captions FILE", "allow_missing_captions=true")


def uncaptioned(records: list[ImageRecord], keep: int = 0) -> list[ImageRecord]:
    """The records with their captions removed (file-name words as derived text), the first ``keep`` kept."""
    out = []
    for n, r in enumerate(records):
        words = Path(r.path).stem.replace("-", " ").replace("_", " ")
        out.append(ImageRecord(id=r.id, path=r.path, captions=list(r.captions) if n < keep else [],
                               caption_source="given" if n < keep else "", derived_text=words))
    return out


@pytest.fixture(scope="module")
def bare_gallery(tmp_path_factory, stamp_records, caption_dual, minilm):
    return gallery_from_records(str(tmp_path_factory.mktemp("bare")), uncaptioned(stamp_records[:40]), caption_dual,
                                minilm)


@pytest.fixture(scope="module")
def partial_gallery(tmp_path_factory, stamp_records, caption_dual, minilm):
    return gallery_from_records(str(tmp_path_factory.mktemp("partial")), uncaptioned(stamp_records[:40], keep=30),
                                caption_dual, minilm)


def context(gallery, caption_dual, minilm, model: ScriptedChatModel) -> MethodContext:
    return MethodContext(gallery=gallery, dual=caption_dual, text=minilm, roles=Roles.from_models({"default": model}))


def cir_query(gallery) -> Query:
    ref = gallery.record(gallery.ids[0])
    return Query("make it blue", reference=ref, exclude=[ref.id])


@pytest.mark.parametrize("method", ["imagescope", "xr"])
def test_no_captions_is_refused_before_any_model_call(bare_gallery, caption_dual, minilm, method):
    model = ScriptedChatModel(model_id="no-call")  # no rule: any call would raise
    m = get_method(method)(context(bare_gallery, caption_dual, minilm, model))
    with pytest.raises(MissingCaptionsError) as info:
        m.search(cir_query(bare_gallery), top_k=5)
    text = str(info.value)
    assert f"{method} reads gallery captions" in text and "none of the 40 images" in text
    assert all(fix in text for fix in FIXES)
    assert model.calls == []
    assert caption_coverage(bare_gallery) == (0, 40)


@pytest.mark.parametrize("method", ["imagescope", "xr"])
def test_allow_missing_captions_runs_and_says_so(bare_gallery, caption_dual, minilm, method, stamp_records):
    model = ScriptedChatModel(default="not json", model_id="any")
    cfg = {"allow_missing_captions": True, **({"stages": [1]} if method == "imagescope" else {
        "text_questions": False, "visual_questions": False})}
    result = get_method(method)(context(bare_gallery, caption_dual, minilm, model), cfg).search(
        cir_query(bare_gallery), top_k=5)
    checks = result.trace.steps[0]
    assert checks.name == "checks" and len(result.ranking) == 5
    assert any("allow_missing_captions" in n and "none of the 40 gallery images" in n for n in checks.notes)


@pytest.mark.parametrize("method", ["imagescope", "xr"])
def test_no_captions_but_pixel_labels_runs_on_the_descriptions_and_says_so(tmp_path, stamp_records, caption_dual,
                                                                           minilm, method):
    """A camera folder (or a benchmark with its captions withheld) that went through the pixel model: the method
    runs over the pixel descriptions, loudly (Open), instead of refusing; without labels it still refuses."""
    records = uncaptioned(stamp_records[:12])
    for r in records:
        r.labels = [{"name": "tabby cat", "p": 0.8, "index": 281}]
    gallery = gallery_from_records(str(tmp_path / "g"), records, caption_dual, minilm)
    model = ScriptedChatModel(default="not json", model_id="any")
    cfg = {"stages": [1]} if method == "imagescope" else {"text_questions": False, "visual_questions": False}
    result = get_method(method)(context(gallery, caption_dual, minilm, model), cfg).search(cir_query(gallery),
                                                                                            top_k=5)
    checks = result.trace.steps[0]
    assert checks.name == "checks" and len(result.ranking) == 5
    assert any(n.startswith("no captions: none of the 12") and "pixel model's descriptions" in n and "Open" in n
               for n in checks.notes), checks.notes
    assert result.warnings and any("pixel model's descriptions" in w for w in result.warnings)


def test_partial_coverage_is_noted_and_candidate_pools_are_checked(partial_gallery, caption_dual, minilm):
    model = ScriptedChatModel(default="not json", model_id="any")
    ctx = context(partial_gallery, caption_dual, minilm, model)
    method = get_method("xr")(ctx, {"text_questions": False, "visual_questions": False})
    result = method.search(cir_query(partial_gallery), top_k=5)
    assert result.trace.steps[0].notes == [
        "10 of 40 gallery images have no caption: the caption terms cos(C_t, C_a) and cos(C_v, C_a) of lines 6-9; "
        "the image terms (caption mode: image vectors are caption embeddings) saw empty text for them"]
    # A per-query pool (GeneCIS-style candidates) of uncaptioned images only is refused on its own.
    pool = partial_gallery.ids[30:35]
    with pytest.raises(MissingCaptionsError, match="none of the 5 images"):
        method.search(Query("make it blue", reference=partial_gallery.record(pool[0]),
                            candidates=[*pool[1:], partial_gallery.ids[36]]), top_k=3)


def test_check_captions_needs_a_use_and_caps_are_exact(bare_gallery):
    assert check_captions(bare_gallery, "m", [], allow=False) == []  # nothing reads captions: nothing to check
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3},
                                               "q": {"type": "array", "maxItems": 2, "items": {"type": "string"}}}}
    assert capped_fields({"a": "abc", "q": ["x", "y"]}, schema) == ["a (3 chars)", "q (2 items)"]
    assert capped_fields({"a": "ab", "q": ["x", "y"]}, schema, counts=frozenset({"q"})) == []


# --------------------------------------------------------------------------- through `imagent eval`


@pytest.mark.parametrize("method", ["xr", "imagescope"])
def test_imagent_eval_on_an_uncaptioned_index_stops_with_the_fixes(tmp_path, stamps_dir, method):
    root = tmp_path / "stamps"
    root.mkdir()
    rows = [json.loads(x) for x in (stamps_dir / "captions.jsonl").read_text().splitlines()[:12]]
    (root / "captions.jsonl").write_text("".join(
        json.dumps({"id": r["id"], "file": str(stamps_dir / r["file"]), "caption": ""}) + "\n" for r in rows))
    queries = [{"pairid": i, "task": "cir", "reference": rows[i]["id"], "caption": rows[6 + i]["caption"],
                "target_hard": rows[6 + i]["id"]} for i in range(3)]
    (tmp_path / "q.json").write_text(json.dumps(queries))
    run = tmp_path / "run"
    res = CliRunner().invoke(eval_app(), [
        "eval", "stamps", "--method", method, "--split", "cir", "--annotations", str(tmp_path / "q.json"),
        "--images-root", str(root), "--run-dir", str(run), "--set", "pixels.model=none"])  # nothing saw the pixels
    out = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"{method} reads gallery captions" in out and all(fix in out for fix in FIXES)
    # Stopped before any query ran.
    assert not (run / "results.jsonl").exists() or (run / "results.jsonl").read_text() == ""
