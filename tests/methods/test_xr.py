"""X^R with the scripted backend: RRF arithmetic, the re-rank formula, ablation switches, call counts,
answer parsing. A hand-made 4-image gallery with chosen vectors makes every score checkable by hand;
the call counts run on the 627 real stamps (caption mode, real MiniLM)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from pydantic import ValidationError

from imagent.core.types import ImageRecord, Query
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_IMAGE, Gallery
from imagent.index.scoring import ranks_from_scores, reciprocal_rank_fusion, stable_order
from imagent.methods.base import MethodContext, get_method
from imagent.methods.xr import XRConfig, coarse_scores, rerank_order, rerank_scores, similarity_scores
from imagent.models.roles import Roles

# --------------------------------------------------------------------------- a hand-made gallery

# cos with C_t is the first coordinate, cos with C_v the second (C_t = e1, C_v = e2).
#            caption C_a      image I_a     -> S_t = x_c + x_i, S_v = y_c + y_i
HAND = {
    "a": ((0.9, 0.1), (0.8, 0.2)),  # S_t 1.7  S_v 0.3
    "b": ((0.5, 0.6), (0.6, 0.7)),  # S_t 1.1  S_v 1.3
    "c": ((0.2, 0.9), (0.3, 0.8)),  # S_t 0.5  S_v 1.7
    "d": ((0.4, 0.4), (0.5, 0.3)),  # S_t 0.9  S_v 0.7
}
NAMES = {"a": "alpha", "b": "bravo", "c": "charlie", "d": "delta"}
C_T, C_V = "imagined by text", "imagined by vision"


class FakeDual:
    """A dual encoder that maps the two imagined captions to e1 and e2."""

    model_id = "fake-dual"
    dim = 4
    sees_pixels = False

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        table = {C_T: [1, 0, 0, 0], C_V: [0, 1, 0, 0]}
        return np.array([table[t] for t in texts], dtype=np.float32)

    def encode_images(self, records):  # pragma: no cover - the index is built by hand
        raise AssertionError("not used")


def _unit(x: float, y: float, slot: int) -> np.ndarray:
    v = np.zeros(4, dtype=np.float32)
    v[0], v[1] = x, y
    v[slot] = math.sqrt(1.0 - x * x - y * y)
    return v


@pytest.fixture(scope="module")
def hand_gallery(tmp_path_factory) -> Gallery:
    g = Gallery(tmp_path_factory.mktemp("xr-hand"), create=True)
    with g.transaction() as c:
        g.ensure_space(c, SPACE_IMAGE, FakeDual.model_id, 4)
        g.ensure_space(c, SPACE_CAPTION_DUAL, FakeDual.model_id, 4)
        for key, (cap, img) in HAND.items():
            rec = ImageRecord(id=key, path=f"/nonexistent/{key}.jpg", captions=[NAMES[key]])
            g.upsert(c, rec, f"record:{key}", key,
                     {SPACE_CAPTION_DUAL: _unit(*cap, 2), SPACE_IMAGE: _unit(*img, 3)})
    g.write_snapshot()
    return g


QUESTIONS = {"questions": [{"question": "Q1 the sun shines", "answer": True},
                           {"question": "Q2 it rains", "answer": "False"},  # a string "False" must stay False
                           {"question": "Q3 the sky is blue", "answer": "true"}]}


def verifier_reply(text: str) -> str:
    """charlie answers all three right, bravo all wrong, alpha unanswerably, delta right."""
    q = re.search(r"Statement: (Q\d)", text).group(1)
    truth = {"Q1": "True", "Q2": "False.", "Q3": "TRUE"}
    wrong = {"Q1": "False", "Q2": "True", "Q3": "false, it is grey"}
    if "charlie" in text or "delta" in text:
        return truth[q]
    if "bravo" in text:
        return wrong[q]
    return "Maybe, hard to say."


def hand_model(scripted, **kw):
    return scripted(rules=[
        (r"text imagination agent", json.dumps({"modifications": ["add sunshine"], "target_caption": C_T})),
        (r"vision imagination agent", json.dumps({"attributes": [{"attribute": "sun", "present": True}],
                                                  "target_caption": C_V})),
        (r"question agent of an image search", json.dumps(QUESTIONS)),
        (r"Statement: ", verifier_reply),
    ], **kw)


def hand_context(gallery, model) -> MethodContext:
    dual = FakeDual()
    return MethodContext(gallery=gallery, dual=dual, text=dual, roles=Roles.from_models({"default": model}))


def hand_query() -> Query:
    return Query("make it sunny", reference=ImageRecord(id="ref", path="/nonexistent/ref.jpg", captions=["a field"]))


def step(result, name):
    return next(s for s in result.trace.steps if s.name == name)


# --------------------------------------------------------------------------- RRF arithmetic


def test_rrf_arithmetic_on_hand_made_case(hand_gallery, scripted):
    cfg = {"text_questions": False, "visual_questions": False}
    result = get_method("xr")(hand_context(hand_gallery, hand_model(scripted)), cfg).search(hand_query(), top_k=4)
    # S_t ranks: a1 b2 d3 c4; S_v ranks: c1 b2 d3 a4.
    expected = {"a": 1 / 61 + 1 / 64, "b": 1 / 62 + 1 / 62, "c": 1 / 64 + 1 / 61, "d": 1 / 63 + 1 / 63}
    coarse = result.stages["coarse"]
    # a and c tie exactly; the tie keeps pool (row) order, so a before c.
    assert coarse.ids == ["b", "a", "c", "d"]
    for i, s in zip(coarse.ids, coarse.scores, strict=True):
        assert s == pytest.approx(expected[i], abs=1e-12)
    top = {row["id"]: row for row in step(result, "coarse.rrf").outputs["top"]}
    assert (top["a"]["rank_t"], top["a"]["rank_v"]) == (1, 4)
    assert top["a"]["S_t"] == pytest.approx(1.7, abs=1e-4) and top["a"]["S_v"] == pytest.approx(0.3, abs=1e-4)
    assert top["c"]["cos(C_t,C_a)"] == pytest.approx(0.2, abs=1e-4)
    assert top["c"]["cos(C_v,I_a)"] == pytest.approx(0.8, abs=1e-4)
    # No question agent: lines 11-16 are skipped, the coarse ranking is the answer.
    assert result.ranking.ids == coarse.ids and result.stages["full"].ids == coarse.ids
    assert result.trace.model_calls == 2


def test_coarse_scores_pure_function():
    s_t = np.array([3.0, 2.0, 1.0], dtype=np.float32)
    s_v = np.array([1.0, 3.0, 2.0], dtype=np.float32)
    assert coarse_scores(s_t, s_v, z=10).tolist() == pytest.approx([1 / 11 + 1 / 13, 1 / 12 + 1 / 11, 1 / 13 + 1 / 12])
    assert coarse_scores(s_t, s_v, fusion="sum").tolist() == [4.0, 5.0, 3.0]
    s_t2, s_v2 = similarity_scores(np.array([0.1]), np.array([0.2]), np.array([0.3]), np.array([0.4]))
    assert (float(s_t2[0]), float(s_v2[0])) == pytest.approx((0.3, 0.7))  # decision 1: S_t from C_t, S_v from C_v


# --------------------------------------------------------------------------- the re-rank formula


def test_rerank_formula_pure_function():
    sq = np.array([2, 6, 6], dtype=np.float32)
    s_t = np.array([1.1, 1.7, 0.5], dtype=np.float32)
    s_v = np.array([1.3, 0.3, 1.7], dtype=np.float32)
    sim = 0.15 * s_t + 0.85 * s_v  # [1.27, 0.51, 1.52]
    expected = sq * (sim - sim.min()) / (sim.max() - sim.min())
    got = rerank_scores(sq, s_t, s_v, 0.15)
    assert got == pytest.approx(expected, rel=1e-5)
    # Equal scores keep the block's (RRF) order.
    assert rerank_order(np.array([0.0, 1.0, 0.0, 1.0])).tolist() == [1, 3, 0, 2]


def test_rerank_on_hand_made_case(hand_gallery, scripted):
    model = hand_model(scripted)
    result = get_method("xr")(hand_context(hand_gallery, model), {"k_prime": 3}).search(hand_query(), top_k=4)
    assert result.stages["coarse"].ids == ["b", "a", "c", "d"]
    # Block b, a, c: Sq = 0 (all wrong), 0 (unanswerable), 6 (all right). minmax(0.15 S_t + 0.85 S_v) over the block:
    # b 1.27, a 0.51, c 1.52 -> c gets 6 * 1.0; a and b tie at 0 and keep RRF order (b before a); d stays below.
    assert result.ranking.ids == ["c", "b", "a", "d"]
    assert result.ranking.scores[:3] == pytest.approx([6.0, 0.0, 0.0])
    assert result.ranking.scores[3] < 0.0  # below the block, order only
    assert result.stages["full"].ids == result.ranking.ids
    questions = step(result, "fine.questions").outputs["questions"]
    assert [q["answer"] for q in questions] == [True, False, True]  # "False" parsed as False, "true" as True
    answers = {c["id"]: c for c in step(result, "fine.verify.text").outputs["candidates"]}
    assert answers["c"]["answers"] == [True, False, True] and answers["c"]["correct"] == 3
    assert answers["b"]["answers"] == [False, True, False] and answers["b"]["correct"] == 0
    assert answers["a"]["answers"] == [None, None, None] and answers["a"]["correct"] == 0
    # Unanswerable replies are counted, not guessed.
    assert result.trace.counters == {"xr.unanswered_text": 3, "xr.unanswered_vision": 3}
    kept = step(result, "fine.rerank").outputs["kept_order"]
    assert [(k["id"], k["coarse_rank"], k["Sq_t"], k["Sq_v"]) for k in kept] == [
        ("c", 3, 3, 3), ("b", 1, 0, 0), ("a", 2, 0, 0)]
    assert result.trace.model_calls == 2 + 1 + 3 * 3 * 2


# --------------------------------------------------------------------------- ablation switches (Table 3)


def test_similarity_switches(hand_gallery, scripted):
    off = {"text_questions": False, "visual_questions": False}
    ctx = hand_context(hand_gallery, hand_model(scripted))
    visual_only = get_method("xr")(ctx, {**off, "text_similarity": False}).search(hand_query(), top_k=4)
    top = {r["id"]: r for r in step(visual_only, "coarse.rrf").outputs["top"]}
    assert top["b"]["S_t"] == pytest.approx(0.6, abs=1e-4) and top["b"]["S_v"] == pytest.approx(0.7, abs=1e-4)
    assert "cos(C_t,C_a)" not in top["b"]
    # S_t (I_a): a .8 b .6 d .5 c .3 ; S_v (I_a): c .8 b .7 d .3 a .2
    assert visual_only.ranking.ids == ["b", "a", "c", "d"]
    textual_only = get_method("xr")(ctx, {**off, "visual_similarity": False}).search(hand_query(), top_k=4)
    top = {r["id"]: r for r in step(textual_only, "coarse.rrf").outputs["top"]}
    assert top["d"]["S_t"] == pytest.approx(0.4, abs=1e-4) and top["d"]["S_v"] == pytest.approx(0.4, abs=1e-4)
    assert "cos(C_v,I_a)" not in top["d"]
    with pytest.raises(ValidationError, match="clip"):
        XRConfig(text_similarity=False, visual_similarity=False)


@pytest.mark.parametrize(("text_q", "vision_q", "steps", "calls"), [
    (True, True, {"fine.verify.text", "fine.verify.vision"}, 2 + 1 + 2 * 3 * 3),
    (True, False, {"fine.verify.text"}, 2 + 1 + 3 * 3),
    (False, True, {"fine.verify.vision"}, 2 + 1 + 3 * 3),
    (False, False, set(), 2),
])
def test_question_agent_switches(hand_gallery, scripted, text_q, vision_q, steps, calls):
    cfg = {"k_prime": 3, "text_questions": text_q, "visual_questions": vision_q}
    result = get_method("xr")(hand_context(hand_gallery, hand_model(scripted)), cfg).search(hand_query(), top_k=4)
    names = {s.name for s in result.trace.steps}
    assert {n for n in names if n.startswith("fine.verify")} == steps
    assert ("fine.questions" in names) == bool(steps)
    assert result.trace.model_calls == calls
    if text_q and not vision_q:
        # Only the text verifier's +1s: c 3, b 0, a 0.
        assert result.ranking.scores[0] == pytest.approx(3.0)


def test_config_fields_and_defaults():
    cfg = XRConfig()
    assert (cfg.rrf_z, cfg.k_prime, cfg.num_questions, cfg.lam) == (60.0, 100, 3, 0.15)
    assert cfg.text_similarity and cfg.visual_similarity and cfg.text_questions and cfg.visual_questions
    assert not cfg.batch_questions and cfg.fusion == "rrf"
    with pytest.raises(ValidationError):
        XRConfig.model_validate({"lambda": 0.2})  # unknown keys are errors (typos in --set)
    with pytest.raises(ValidationError):
        XRConfig(lam=1.5)


def test_sum_fusion_switch(hand_gallery, scripted):
    cfg = {"fusion": "sum", "text_questions": False, "visual_questions": False}
    result = get_method("xr")(hand_context(hand_gallery, hand_model(scripted)), cfg).search(hand_query(), top_k=4)
    # S_t + S_v: a 2.0, b 2.4, c 2.2, d 1.6
    assert result.ranking.ids == ["b", "c", "a", "d"]


# --------------------------------------------------------------------------- call counts on the real stamps


def stamps_model(scripted, verifier: str = "True"):
    return scripted(rules=[
        (r"text imagination agent", json.dumps({"modifications": ["replace the frog by a penguin"],
                                                "target_caption": "A penguin."})),
        (r"vision imagination agent", json.dumps({"attributes": [{"attribute": "penguin", "present": True},
                                                                 {"attribute": "frog", "present": False}],
                                                  "target_caption": "A penguin standing."})),
        (r"question agent of an image search", json.dumps({"questions": [
            {"question": "The image shows a penguin.", "answer": True},
            {"question": "The image shows a frog.", "answer": False},
            {"question": "The image shows an animal.", "answer": True}]})),
        (r"Statements:", json.dumps({"answers": [True, False, True]})),
    ], default=verifier)


def frog_query(stamps_gallery) -> Query:
    ref = next(stamps_gallery.record(i) for i in stamps_gallery.ids if stamps_gallery.record(i).caption == "A frog.")
    return Query("show a penguin instead of the frog", reference=ref, exclude=[ref.id])


@pytest.mark.parametrize(("cfg", "per_step"), [
    ({}, {"imagine.text": 1, "imagine.vision": 1, "fine.questions": 1,
          "fine.verify.text": 5 * 3, "fine.verify.vision": 5 * 3}),
    ({"batch_questions": True}, {"imagine.text": 1, "imagine.vision": 1, "fine.questions": 1,
                                 "fine.verify.text": 5, "fine.verify.vision": 5}),
    ({"visual_questions": False, "concurrency": 4}, {"imagine.text": 1, "imagine.vision": 1, "fine.questions": 1,
                                                     "fine.verify.text": 5 * 3}),
])
def test_exact_model_calls_per_query(make_context, scripted, stamps_gallery, cfg, per_step):
    model = stamps_model(scripted)
    result = get_method("xr")(make_context(model), {"k_prime": 5, **cfg}).search(frog_query(stamps_gallery), 10)
    got = {s.name: s.model_calls for s in result.trace.steps if s.model_calls}
    assert got == per_step
    assert result.trace.model_calls == len(model.calls) == sum(per_step.values())
    # Roles are separate names (a config may map each to its own model).
    roles = {c.role for s in result.trace.steps for c in s.calls}
    assert roles == {"imaginer", "vision_imaginer", "questioner", "text_verifier"} | (
        {"vision_verifier"} if cfg.get("visual_questions", True) else set())
    assert len(result.ranking) == 10 and len(result.stages["coarse"]) == 10
    ref = frog_query(stamps_gallery).reference
    assert ref.id not in result.ranking.ids
    # Every verifier says True: Sq is 2 per modality (Q1, Q3 right; Q2 wrong), so the block is ordered by similarity.
    assert result.ranking.ids[5:] == result.stages["coarse"].ids[5:]
    assert set(result.ranking.ids[:5]) == set(result.stages["coarse"].ids[:5])


def test_caption_mode_is_in_the_trace(make_context, scripted, stamps_gallery):
    model = stamps_model(scripted)
    result = get_method("xr")(make_context(model), {"k_prime": 2}).search(frog_query(stamps_gallery), 5)
    vision = step(result, "imagine.vision")
    assert vision.outputs["reference_seen_as"] == "text surrogate (caption mode)"
    assert any("caption mode" in n for n in vision.notes)
    # The vision imagination agent received the reference's caption in place of the image.
    vision_prompt = next(p for p in model.prompts() if "vision imagination agent" in p)
    assert "[Image, described in text: A frog." in vision_prompt
    assert step(result, "fine.verify.vision").outputs["images_seen_as"] == "text surrogate (caption mode)"
    assert step(result, "caption").outputs["C_r"] == "A frog."
    assert step(result, "imagine.text").outputs["M_t"] == ["replace the frog by a penguin"]
    assert step(result, "imagine.vision").outputs["M_v"][1] == {"attribute": "frog", "present": False}


def test_reference_without_caption_uses_captioner(make_context, scripted, stamps_gallery):
    q = frog_query(stamps_gallery)
    bare = ImageRecord(id="outside", path=q.reference.path, content_hash="abc")  # not in the index, no caption
    query = Query(q.text, reference=bare)
    seeing = stamps_model(scripted)
    seeing.sees_images = True
    seeing.rules.insert(0, (re.compile(r"Write a caption for this image"), "A green frog."))
    result = get_method("xr")(make_context(seeing), {"k_prime": 2, "visual_questions": False}).search(query, 5)
    cap = step(result, "caption")
    assert cap.outputs == {**cap.outputs, "C_r": "A green frog.", "C_r_source": "captioner"}
    assert cap.model_calls == 1
    assert "A green frog." in next(p for p in seeing.prompts() if "text imagination agent" in p)
    # In caption mode a caption call would only read the surrogate: none is made, and it is counted.
    blind = stamps_model(scripted)
    result = get_method("xr")(make_context(blind), {"k_prime": 2, "visual_questions": False}).search(query, 5)
    assert step(result, "caption").model_calls == 0
    assert result.trace.counters.get("xr.reference_without_caption") == 1


# --------------------------------------------------------------------------- robustness


def test_batched_answers_of_wrong_length_are_retried_then_unanswered(make_context, scripted, stamps_gallery):
    model = stamps_model(scripted)
    model.rules[3] = (re.compile(r"Statements:"), json.dumps({"answers": [True]}))
    result = get_method("xr")(make_context(model), {"k_prime": 2, "batch_questions": True}).search(
        frog_query(stamps_gallery), 5)
    # Each of the 2 x 2 batched calls is tried 3 times (Role.json retries), then all 3 answers count as unanswered.
    assert step(result, "fine.verify.text").model_calls == 2 * 3
    assert result.trace.counters["xr.unanswered_text"] == 2 * 3
    assert result.trace.counters["xr.unanswered_vision"] == 2 * 3
    assert step(result, "fine.rerank").outputs["kept_order"][0]["score"] == 0.0


def test_unusable_questions_fall_back_to_visual_attributes(make_context, scripted, stamps_gallery):
    model = stamps_model(scripted)
    model.rules[2] = (re.compile(r"question agent of an image search"), "I cannot help with that.")
    result = get_method("xr")(make_context(model), {"k_prime": 2}).search(frog_query(stamps_gallery), 5)
    assert step(result, "fine.questions").model_calls == 3
    assert step(result, "fine.questions").outputs["questions"] == [
        {"question": "The image shows penguin.", "answer": True},
        {"question": "The image shows frog.", "answer": False}]
    assert result.trace.counters["xr.questions_fallback"] == 1


def test_unusable_imagination_falls_back_to_reference_plus_text(make_context, scripted, stamps_gallery):
    model = stamps_model(scripted)
    model.rules[0] = (re.compile(r"text imagination agent"), '{"modifications": [], "target_caption": ""}')
    result = get_method("xr")(make_context(model), {"k_prime": 1}).search(frog_query(stamps_gallery), 5)
    out = step(result, "imagine.text").outputs
    assert out["parsed"] is False
    assert out["C_t"] == "A frog. show a penguin instead of the frog"
    assert out["M_t"] == ["show a penguin instead of the frog"]
    assert result.trace.counters["xr.imagination_fallback"] == 1


def test_text_query_is_refused(make_context, scripted):
    with pytest.raises(ValueError, match="cir"):
        get_method("xr")(make_context(scripted(default="x"))).search(Query("a penguin"), 5)


# --------------------------------------------------------------------------- a large gallery (fast paths)


@pytest.fixture(scope="module", params=["two matrices", "one matrix"])
def large_gallery(request, tmp_path_factory) -> Gallery:
    """20,000 images whose cosines with C_t and C_v take few values (ties everywhere): large enough for the
    pre-selected top-k and the bounded RRF. "one matrix": both spaces hold the same vectors (stored once, as in
    caption mode), so the image terms reuse the caption scan."""
    rng = np.random.default_rng(21)
    g = Gallery(tmp_path_factory.mktemp("xr-large"), create=True)
    grid = np.round(np.arange(0.0, 0.65, 0.05), 2)
    with g.transaction() as c:
        g.ensure_space(c, SPACE_IMAGE, FakeDual.model_id, 4)
        g.ensure_space(c, SPACE_CAPTION_DUAL, FakeDual.model_id, 4)
        for i in range(20_000):
            cap = _unit(*rng.choice(grid, 2), 2)
            img = cap if request.param == "one matrix" else _unit(*rng.choice(grid, 2), 3)
            g.upsert(c, ImageRecord(id=f"r{i:05d}", path=f"/nonexistent/{i}.jpg", captions=[f"image {i}"]),
                     f"record:{i}", f"r{i:05d}", {SPACE_CAPTION_DUAL: cap, SPACE_IMAGE: img})
    g.write_snapshot()
    return g


@pytest.mark.parametrize(("k_prime", "top_k"), [(100, 50), (7, 50), (400, 20)])
def test_coarse_ranking_on_a_large_gallery_equals_the_full_fusion(large_gallery, scripted, k_prime, top_k):
    g = large_gallery
    cfg = {"text_questions": False, "visual_questions": False, "k_prime": k_prime}
    query = Query("make it sunny", reference=ImageRecord(id="ref", path="/nonexistent/ref.jpg", captions=["a field"]),
                  exclude=["r00000", "r00777", "r19999"])
    result = get_method("xr")(hand_context(g, hand_model(scripted)), cfg).search(query, top_k=top_k)
    # The straightforward computation: every pool image's S_t and S_v, RRF over all of them, a stable sort.
    pool = g.candidate_rows(exclude=query.exclude)
    q = FakeDual().encode_texts([C_T, C_V])
    cap, img = g.scores(q, SPACE_CAPTION_DUAL, pool), g.scores(q, SPACE_IMAGE, pool)
    s_t, s_v = cap[0] + img[0], cap[1] + img[1]
    fused = reciprocal_rank_fusion([s_t, s_v], 60.0)
    order = stable_order(fused)[: max(min(k_prime, len(pool)), top_k)]
    coarse = result.stages["coarse"]
    assert coarse.ids == [g.ids[int(pool[i])] for i in order[:top_k]]
    assert coarse.scores == fused[order[:top_k]].tolist()
    ranks_t, ranks_v = ranks_from_scores(s_t), ranks_from_scores(s_v)
    top = step(result, "coarse.rrf").outputs["top"]
    assert [(r["id"], r["rank_t"], r["rank_v"]) for r in top] == [
        (g.ids[int(pool[i])], int(ranks_t[i]), int(ranks_v[i])) for i in order[: len(top)]]
    assert step(result, "coarse.similarity").outputs["pool"] == len(pool) == 20_000 - 3


def test_prompt_pieces_substitute_as_template_does():
    """Prompt files are parsed once (_Piece); the text is what string.Template gives, values with $ included,
    and an invalid placeholder still raises as Template does."""
    from importlib import resources
    from string import Template

    from imagent.methods.xr import IMAGE_MARK, _Piece, load_prompt

    rng = np.random.default_rng(22)
    names = [p.name for p in (resources.files("imagent.methods") / "prompts" / "xr").iterdir()
             if p.name.endswith(".txt")]
    assert "verify_text.txt" in names
    for name in names:
        for text in load_prompt(name).split(IMAGE_MARK):
            keys = set(re.findall(r"\$\{?([_a-z][_a-z0-9]*)", text, re.IGNORECASE))
            for _ in range(20):
                values = {k: "".join(rng.choice(list("ab $${}x_1\n"), int(rng.integers(0, 12)))) for k in keys}
                assert _Piece(text).substitute(values) == Template(text).substitute(values)
    values = {"a": "$b", "b": "${a}"}
    for text in ["$a and ${b} $$c $$$a", "price $$5", "${a}${a}$a", "", "end $a", "$a$"]:
        try:
            want: object = Template(text).substitute(values)
        except ValueError:
            want = ValueError
        try:
            got: object = _Piece(text).substitute(values)
        except ValueError:
            got = ValueError
        assert got == want, text
    with pytest.raises(ValueError):
        _Piece("bad $ here").substitute(values)
    with pytest.raises(KeyError):
        _Piece("$missing").substitute(values)
