"""ImageScope step by step with scripted chat backends (one per role) over the 627 real stamps
(caption mode, real MiniLM): the exact prompts each role receives, the stage-2 stable sort, the stage-3
promotion, the model-call count, the fall-backs, the configuration and the Chat-IR rounds."""

from __future__ import annotations

import json
from importlib.resources import files
from string import Template

import numpy as np
import pytest
from pydantic import ValidationError

from imagent.core.config import load_settings
from imagent.core.types import DialogueTurn, ImageRecord, Query, Ranking
from imagent.index.embedding import gallery_from_records
from imagent.index.gallery import Gallery
from imagent.methods.base import MethodContext, get_method
from imagent.methods.imagescope import (
    ImageScope,
    parse_evaluator_answer,
    promote_to_top,
    rerank_by_matches,
)
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Roles

STAGE1_MARK = "Describe the target image"  # only Prompt 1 says this
STAGE2_MARK = "Atomic Instructions:"  # only Prompt 2


def template(name: str, **values: str) -> str:
    """The shipped prompt file, filled independently of the method's own renderer."""
    text = (files("imagent.methods") / "prompts" / "imagescope" / name).read_text(encoding="utf-8").strip()
    return Template(text).substitute(values)


def stage1_reply(descriptions: list[str], atomic: list[list[str]] | None = None) -> str:
    return json.dumps({"step1": atomic if atomic is not None else [["Addition", descriptions[0]]],
                       "step2": descriptions})


def stage2_reply(pairs: list[list[str]]) -> str:
    return json.dumps({"step1": [f"statement {i}" for i in range(len(pairs))], "step2": pairs})


PENGUIN = stage1_reply(["A penguin.", "A black and white penguin.", "A penguin standing on ice."])
TWO_QUESTIONS = stage2_reply([["Is there a penguin?", "True"], ["Is there a fish?", "False"]])


def reasoner(stage1: str = PENGUIN, stage2: str = TWO_QUESTIONS) -> ScriptedChatModel:
    return ScriptedChatModel(rules=[(STAGE2_MARK, stage2), (STAGE1_MARK, stage1)], model_id="reasoner")


def captioned_id(text: str) -> str:
    """The candidate's caption as the verifier/evaluator see it in caption mode."""
    return text.split("[Image, described in text: ")[-1].split("]")[0]


@pytest.fixture
def roles_context(stamps_gallery, caption_dual, minilm):
    """``roles_context(reasoner=..., verifier=..., evaluator=..., captioner=...)``: one scripted
    model per role, so each model's ``calls`` are exactly what that role received."""

    def make(**models: ScriptedChatModel) -> MethodContext:
        models.setdefault("captioner", ScriptedChatModel(model_id="captioner"))  # no rule: a call would fail
        return MethodContext(gallery=stamps_gallery, dual=caption_dual, text=minilm, roles=Roles.from_models(models))

    return make


def record_with_caption(gallery: Gallery, caption: str) -> ImageRecord:
    return next(gallery.record(i) for i in gallery.ids if gallery.record(i).caption == caption)


def search(ctx: MethodContext, query: Query, top_k: int = 10, **config) -> tuple:
    method = ImageScope(ctx, config)
    return method, method.search(query, top_k=top_k)


# --------------------------------------------------------------------------- prompts and call counts


def test_each_role_receives_exactly_its_prompt(roles_context, stamps_gallery):
    frog = record_with_caption(stamps_gallery, "A frog.")
    atomic = [["Modification", "Replace the frog with a penguin."], ["Removal", "Remove the frog."]]
    r = reasoner(stage1_reply(["A penguin.", "A black and white penguin.", "A penguin on grass."], atomic))
    verifier = ScriptedChatModel(default="Yes", model_id="verifier")
    evaluator = ScriptedChatModel(default="ANSWER: No\nIt shows something else.", model_id="evaluator")
    captioner = ScriptedChatModel(model_id="captioner")
    ctx = roles_context(reasoner=r, verifier=verifier, evaluator=evaluator, captioner=captioner)
    query = Query("show a penguin instead", reference=frog, exclude=[frog.id])
    _, result = search(ctx, query, k=3, alpha=2)

    # Reasoner, stage 1: the instruction and the reference's stored caption (no captioner call).
    assert r.prompts()[0] == template("stage1_reasoner.txt", instruction="show a penguin instead", reference="A frog.")
    assert captioner.calls == []
    steps = {s.name: s for s in result.trace.steps}
    assert steps["reference"].outputs == {"reference_description": "A frog.", "source": "stored caption"}
    # Reasoner, stage 2: the atomic instructions of stage 1, numbered.
    assert r.prompts()[1] == template(
        "stage2_reasoner.txt", instruction="show a penguin instead",
        atomic_instructions="   (1) Modification: Replace the frog with a penguin.\n   (2) Removal: Remove the frog.")
    assert len(r.calls) == 2
    # Verifier: every question for each of the top k stage-1 candidates, candidate by candidate.
    top3 = result.stages["stage1"].ids[:3]
    expected = [
        f"[Image, described in text: {stamps_gallery.record(i).surrogate()}]\n"
        + template("stage2_verifier.txt", question=q)
        for i in top3 for q in ("Is there a penguin?", "Is there a fish?")
    ]
    assert verifier.prompts() == expected
    # Evaluator: Prompt 3, then the reference and the candidate as labelled images, top alpha in order.
    ref_text = f"[Image, described in text: {frog.surrogate()}]"
    assert evaluator.prompts() == [
        template("stage3_evaluator.txt", instruction="show a penguin instead")
        + f"\n\nReference image: {ref_text}\nCandidate image: [Image, described in text: "
        f"{stamps_gallery.record(i).surrogate()}]"
        for i in result.stages["stage2"].ids[:2]
    ]
    # Roles in the trace, and the documented count: 1 + 1 + k*M + at most alpha.
    roles = [c.role for s in result.trace.steps for c in s.calls]
    assert roles == ["reasoner", "reasoner"] + ["verifier"] * 6 + ["evaluator"] * 2
    assert result.trace.model_calls == 1 + 1 + 3 * 2 + 2
    assert [s.name for s in result.trace.steps] == [
        "reference", "stage1.reason", "stage1.retrieve", "stage2.propositions", "stage2.verify", "stage3.evaluate"]
    assert frog.id not in result.ranking.ids


def test_text_to_image_shows_no_reference(roles_context):
    r = reasoner()
    evaluator = ScriptedChatModel(default="ANSWER: No", model_id="evaluator")
    ctx = roles_context(reasoner=r, verifier=ScriptedChatModel(default="No"), evaluator=evaluator)
    _, result = search(ctx, Query("a penguin"), k=2, alpha=1)
    assert r.prompts()[0] == template("stage1_reasoner.txt", instruction="a penguin", reference="(none)")
    assert "\n\nReference image: none; judge the candidate image by itself.\nCandidate image: [Image" in (
        evaluator.prompts()[0])
    assert result.trace.steps[0].outputs == {"reference_description": "", "source": "none (no reference image)"}


@pytest.mark.parametrize(("k", "questions", "alpha", "yes_at"), [
    (20, 2, 3, None), (5, 3, 3, 1), (4, 1, 2, 0), (3, 4, 0, None),
])
def test_model_calls_per_query(roles_context, stamps_gallery, k, questions, alpha, yes_at):
    pairs = [[f"Question {i}?", "True"] for i in range(questions)]
    evaluator = ScriptedChatModel(default="ANSWER: No", model_id="evaluator")
    _, first = search(roles_context(reasoner=reasoner(), verifier=ScriptedChatModel(default="No"),
                                    evaluator=evaluator), Query("a penguin"), stages=[1, 2])
    if yes_at is not None:
        target = stamps_gallery.record(first.ranking.ids[yes_at]).surrogate()
        evaluator = ScriptedChatModel(default=lambda t: "ANSWER: Yes" if captioned_id(t) == target else "ANSWER: No",
                                      model_id="evaluator")
    verifier = ScriptedChatModel(default="No", model_id="verifier")
    ctx = roles_context(reasoner=reasoner(stage2=stage2_reply(pairs)), verifier=verifier, evaluator=evaluator)
    _, result = search(ctx, Query("a penguin"), k=k, alpha=alpha)
    evaluated = alpha if yes_at is None else yes_at + 1
    assert len(verifier.calls) == k * questions
    assert len(evaluator.calls) == evaluated <= alpha
    assert result.trace.model_calls == 1 + 1 + k * questions + evaluated


# --------------------------------------------------------------------------- stage 2: stable re-sort


def test_rerank_by_matches_is_stable_and_keeps_the_tail():
    ranking = Ranking(list("abcdefg"), [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
    out = rerank_by_matches(ranking, [1, 2, 1, 2, 0])
    assert out.ids == ["b", "d", "a", "c", "e", "f", "g"]
    assert out.scores == sorted(out.scores, reverse=True)
    assert rerank_by_matches(ranking, [0] * 5).ids == ranking.ids  # all tied: the stage-1 order


def test_stage2_sorts_top_k_by_matched_answers(roles_context, stamps_gallery):
    _, plain = search(roles_context(reasoner=reasoner()), Query("a bird"), top_k=12, stages=[1])
    stage1 = plain.ranking.ids
    assert len({stamps_gallery.record(i).surrogate() for i in stage1[:6]}) == 6  # tell candidates apart
    # Matches per stage-1 position (truths: penguin True, fish False): 1, 2, 1, 2, 0, 2.
    answers = {0: ("No", "No"), 1: ("Yes", "No"), 2: ("Yes", "Yes"), 3: ("Yes", "No"), 4: ("No", "Yes"),
               5: ("Yes", "No")}
    by_caption = {stamps_gallery.record(stage1[p]).surrogate(): a for p, a in answers.items()}

    def verify(text: str) -> str:
        yes_penguin, yes_fish = by_caption[captioned_id(text)]
        return yes_penguin if "penguin?" in text else yes_fish

    verifier = ScriptedChatModel(default=verify, model_id="verifier")
    _, result = search(roles_context(reasoner=reasoner(), verifier=verifier), Query("a bird"), top_k=12,
                       k=6, stages=[1, 2])
    assert result.stages["stage1"].ids == stage1
    assert result.ranking.ids == [stage1[i] for i in (1, 3, 5, 0, 2, 4)] + stage1[6:]
    assert result.stages["stage2"].ids == result.ranking.ids
    assert result.ranking.scores == sorted(result.ranking.scores, reverse=True)
    verify_step = next(s for s in result.trace.steps if s.name == "stage2.verify")
    assert [c["matches"] for c in verify_step.outputs["candidates"]] == [1, 2, 1, 2, 0, 2]


# --------------------------------------------------------------------------- stage 3: promotion


def test_promote_to_top_moves_one_entry_without_index_shift():
    ranking = Ranking(list("abcde"), [5.0, 4.0, 3.0, 2.0, 1.0])
    out = promote_to_top(ranking, 2)
    assert out.ids == ["c", "a", "b", "d", "e"]
    assert out.scores == sorted(out.scores, reverse=True)
    assert promote_to_top(ranking, 0).ids == ranking.ids


@pytest.mark.parametrize(("yes_positions", "promoted", "calls"), [
    ({1, 2}, 1, 2),  # first Yes only; the authors' script would also pop index 2 of the shifted list
    ({0, 2}, 0, 1),  # a Yes at rank 1 ends the evaluation at once
    ({2}, 2, 3),
    (set(), None, 3),  # no Yes: order unchanged after alpha calls
])
def test_stage3_promotes_the_first_yes_only(roles_context, stamps_gallery, yes_positions, promoted, calls):
    _, plain = search(roles_context(reasoner=reasoner(), verifier=ScriptedChatModel(default="Yes")),
                      Query("a bird"), k=4, stages=[1, 2])
    stage2 = plain.ranking.ids
    yes = {stamps_gallery.record(stage2[p]).surrogate() for p in yes_positions}
    evaluator = ScriptedChatModel(default=lambda t: "ANSWER: Yes\nfine" if captioned_id(t) in yes else "ANSWER: No",
                                  model_id="evaluator")
    ctx = roles_context(reasoner=reasoner(), verifier=ScriptedChatModel(default="Yes"), evaluator=evaluator)
    _, result = search(ctx, Query("a bird"), k=4, alpha=3)
    assert result.stages["stage2"].ids == stage2
    assert len(evaluator.calls) == calls
    expected = stage2 if promoted is None else [stage2[promoted], *stage2[:promoted], *stage2[promoted + 1:]]
    assert result.ranking.ids == result.stages["stage3"].ids == expected
    assert result.ranking.scores == sorted(result.ranking.scores, reverse=True)
    step = result.trace.steps[-1]
    assert step.outputs["promoted"] == (None if promoted is None else stage2[promoted])


@pytest.mark.parametrize(("reply", "verdict"), [
    ("ANSWER: Yes\nThe dog is there.", True), ("ANSWER: No", False), ("**ANSWER:** [Yes]", True),
    ("answer: no, it is not", False), ("Yes, it matches.", True), ("\n\nANSWER: No\n", False),
    ("The image shows a dog. ANSWER: Yes", None), ("Maybe", None), ("", None),
])
def test_evaluator_answer_parsing(reply, verdict):
    assert parse_evaluator_answer(reply) is verdict


# --------------------------------------------------------------------------- robustness


def test_unparsable_reasoner_falls_back_to_the_reference_caption(roles_context, stamps_gallery):
    frog = record_with_caption(stamps_gallery, "A frog.")
    r = ScriptedChatModel(default="Sorry, I cannot help with that.", model_id="reasoner")
    verifier = ScriptedChatModel(default="Yes", model_id="verifier")
    ctx = roles_context(reasoner=r, verifier=verifier, evaluator=ScriptedChatModel(default="ANSWER: No"))
    _, result = search(ctx, Query("show a penguin instead", reference=frog), k=3, alpha=1, parse_retries=1)
    steps = {s.name: s for s in result.trace.steps}
    assert steps["stage1.reason"].outputs["descriptions"] == ["A frog."]
    assert steps["stage1.reason"].outputs["atomic"] == [["modification", "show a penguin instead"]]
    assert result.trace.counters == {"stage1_fallback": 1, "stage2_fallback": 1}
    assert len(r.calls) == 2 * 2  # one retry for each reasoner step
    assert verifier.calls == []  # no propositions: nothing to verify
    assert result.stages["stage2"].ids == result.stages["stage1"].ids
    # The reference caption is the description: the frog itself ranks first (or its twin stamp: two stamps have
    # the caption "A frog.", whose scores tie to the last bits, so which comes first is float noise).
    assert stamps_gallery.record(result.stages["stage1"].ids[0]).caption == "A frog."
    # Not the method's own answer: the result names the fallback paths that stood in.
    assert result.source == "fallback:stage1_reference_description"
    assert result.source_reason == ("stage1_reference_description (stage1_fallback = 1); "
                                    "stage2_keeps_stage1_order (stage2_fallback = 1)")
    assert result.counts == {"stage1_fallback": 1, "stage2_fallback": 1}


def test_a_failing_model_makes_the_query_an_error_not_a_fallback(roles_context, stamps_gallery):
    """Every reasoner call fails (the endpoint is down): the JSON fallbacks stand in, so the search still returns a
    ranking for interactive use, but its source is ``error`` with the reason; a healthy run is the method's own."""
    frog = record_with_caption(stamps_gallery, "A frog.")
    down = ScriptedChatModel(model_id="reasoner")  # no rule, no default: every call raises ChatError
    ctx = roles_context(reasoner=down, verifier=ScriptedChatModel(default="Yes"),
                        evaluator=ScriptedChatModel(default="ANSWER: No"))
    _, result = search(ctx, Query("show a penguin instead", reference=frog), k=3, alpha=1, parse_retries=0)
    assert result.is_error and len(result.ranking) == 10
    assert result.source_reason.startswith("2 model call(s) failed (first: scripted model: no rule matches")
    assert result.counts["model_call_failed"] == 2
    good = ScriptedChatModel(default=stage1_reply(["A penguin.", "A penguin stamp.", "A black penguin."]))
    ctx = roles_context(reasoner=good, verifier=ScriptedChatModel(default="Yes"),
                        evaluator=ScriptedChatModel(default="ANSWER: No"))
    _, ok = search(ctx, Query("a penguin"), stages=[1])
    assert ok.source == "method" and ok.source_reason == ""


def test_unparsable_reasoner_without_reference_uses_the_instruction(roles_context):
    r = ScriptedChatModel(default="no json here", model_id="reasoner")
    ctx = roles_context(reasoner=r)
    _, result = search(ctx, Query("a penguin"), stages=[1], parse_retries=0)
    assert result.trace.steps[1].outputs["descriptions"] == ["a penguin"]
    assert result.trace.counters == {"stage1_fallback": 1}
    assert len(r.calls) == 1


@pytest.mark.parametrize("descriptions", [["A penguin."], ["A penguin.", "A black and white penguin."]])
def test_one_or_two_descriptions_are_used_as_given(roles_context, descriptions):
    # The authors' VisDial prompt asks for one description: 1-3 is a valid answer, not a parse failure.
    r = reasoner(stage1_reply(descriptions))
    _, result = search(roles_context(reasoner=r), Query("a penguin"), stages=[1], parse_retries=1)
    reason = result.trace.steps[1]
    assert reason.outputs["descriptions"] == descriptions
    assert result.trace.counters == {} and len(r.calls) == 1
    assert f"{len(descriptions)} target description(s) instead of 3: used as given" in reason.notes


def test_unknown_atomic_types_are_kept_and_long_outputs_are_noted(roles_context):
    long = "A penguin " + "x" * 990  # exactly the 1000-character bound: decoding stopped it there
    stage1 = stage1_reply(["A penguin.", long], [["Addition", "a penguin"], ["Counting", "two penguins"]])
    r = reasoner(stage1)
    ctx = roles_context(reasoner=r, verifier=ScriptedChatModel(default="Yes"))
    _, result = search(ctx, Query("two penguins"), k=2, stages=[1, 2])
    reason = next(s for s in result.trace.steps if s.name == "stage1.reason")
    assert reason.outputs["atomic"] == [["addition", "a penguin"], ["counting", "two penguins"]]
    assert any("outside the paper's five kept as given: counting" in n for n in reason.notes)
    assert any("step2[1] (1000 chars)" in n and "may have been cut" in n for n in reason.notes)
    # Prompt 2 lists the kept instruction under its own type.
    assert "(2) Counting: two penguins" in next(p for p in r.prompts() if STAGE2_MARK in p)


def test_invalid_items_are_dropped_and_counted(roles_context):
    stage1 = stage1_reply(["A penguin.", "", "  "], [["Addition", "a penguin"], ["", "x"], ["lonely"]])
    stage2 = stage2_reply([["Is there a penguin?", "True"], ["Is it blue?", "perhaps"], ["no answer"]])
    ctx = roles_context(reasoner=reasoner(stage1, stage2), verifier=ScriptedChatModel(default="Yes"))
    _, result = search(ctx, Query("a penguin"), k=2, stages=[1, 2])
    steps = {s.name: s for s in result.trace.steps}
    assert steps["stage1.reason"].outputs["atomic"] == [["addition", "a penguin"]]
    assert any("1 target description(s) instead of 3" in n for n in steps["stage1.reason"].notes)
    assert steps["stage2.propositions"].outputs["propositions"] == [
        {"statement": "statement 0", "question": "Is there a penguin?", "truth": True}]
    assert result.trace.counters == {"stage1_invalid_items": 2, "stage2_invalid_items": 2}


def test_verifier_answers_are_parsed_strictly(roles_context, stamps_gallery):
    replies = iter(["Yes", "eyes: two", "No.", "Maybe", "TRUE", "I think yes"] * 2)
    verifier = ScriptedChatModel(default=lambda _t: next(replies), model_id="verifier")
    ctx = roles_context(reasoner=reasoner(), verifier=verifier)
    _, result = search(ctx, Query("a penguin"), k=3, stages=[1, 2])
    step = next(s for s in result.trace.steps if s.name == "stage2.verify")
    assert [c["answers"] for c in step.outputs["candidates"]] == [["yes", None], ["no", None], ["yes", None]]
    # truths (True, False): "Yes"/None -> 1, "No."/None -> 0, "TRUE"/None -> 1
    assert [c["matches"] for c in step.outputs["candidates"]] == [1, 0, 1]
    assert result.trace.counters == {"verifier_unanswered": 3}


# --------------------------------------------------------------------------- reference description


def test_reference_without_caption_is_described_by_the_captioner(roles_context, stamps_gallery, tmp_path):
    image = tmp_path / "ref.png"
    image.write_bytes(b"not read by the scripted captioner")
    ref = ImageRecord(id="outside", path=str(image))
    captioner = ScriptedChatModel(default="A green frog on a rock.", sees_images=True, model_id="captioner")
    r = reasoner()
    ctx = roles_context(reasoner=r, captioner=captioner)
    _, result = search(ctx, Query("show a penguin instead", reference=ref), stages=[1])
    assert len(captioner.calls) == 1
    assert result.trace.steps[0].outputs == {"reference_description": "A green frog on a rock.", "source": "captioner"}
    assert "Reference Image: A green frog on a rock." in r.prompts()[0]
    assert result.trace.steps[0].model_calls == 1


def test_reference_from_the_gallery_uses_its_stored_caption(roles_context, stamps_gallery):
    frog = record_with_caption(stamps_gallery, "A frog.")
    bare = ImageRecord(id=frog.id, path=frog.path)  # a loader's copy without captions
    ctx = roles_context(reasoner=reasoner())
    _, result = search(ctx, Query("show a penguin instead", reference=bare), stages=[1])
    assert result.trace.steps[0].outputs == {"reference_description": "A frog.", "source": "stored caption"}
    assert result.trace.model_calls == 1


def test_uncaptioned_reference_with_a_blind_captioner_is_empty_and_noted(roles_context):
    ctx = roles_context(reasoner=reasoner())  # the scripted captioner sees no pixels
    _, result = search(ctx, Query("make it red", reference=ImageRecord(id="x", path="/nonexistent.png")),
                       stages=[1])
    step = result.trace.steps[0]
    assert step.outputs["reference_description"] == ""
    assert any("captioner cannot see images" in n for n in step.notes)
    assert result.trace.model_calls == 1


# --------------------------------------------------------------------------- configuration and ablation


def test_config_defaults_are_the_papers():
    cfg = ImageScope.Config()
    assert (cfg.tau, cfg.k, cfg.alpha, cfg.stages) == (0.15, 20, 3, [1, 2, 3])
    assert get_method("imagescope") is ImageScope


@pytest.mark.parametrize(("value", "stages"), [("1,2", [1, 2]), ("1", [1]), ("s1,s3", [1, 3]), ("[3,1,2]", [1, 2, 3])])
def test_stages_from_set_flags(value, stages):
    settings = load_settings(sets=[f"methods.imagescope.stages={value}", "methods.imagescope.tau=0.3"])
    cfg = ImageScope.Config.model_validate(settings.methods["imagescope"])
    assert cfg.stages == stages and cfg.tau == 0.3


@pytest.mark.parametrize("bad", [{"stages": [2, 3]}, {"stages": [1, 4]}, {"stages": "x"}, {"tau": 1.5},
                                 {"k": 0}, {"alpha": -1}, {"taw": 0.1}])
def test_bad_config_is_refused(bad):
    with pytest.raises(ValidationError):
        ImageScope.Config.model_validate(bad)


@pytest.mark.parametrize(("stages", "snapshots", "calls"), [
    ([1], ["stage1"], {"reasoner": 1}),
    ([1, 2], ["stage1", "stage2"], {"reasoner": 2, "verifier": 6}),
    ([1, 2, 3], ["stage1", "stage2", "stage3"], {"reasoner": 2, "verifier": 6, "evaluator": 2}),
    ([1, 3], ["stage1", "stage3"], {"reasoner": 1, "evaluator": 2}),
])
def test_stage_ablation(roles_context, stages, snapshots, calls):
    ctx = roles_context(reasoner=reasoner(), verifier=ScriptedChatModel(default="No"),
                        evaluator=ScriptedChatModel(default="ANSWER: No"))
    _, result = search(ctx, Query("a penguin"), top_k=7, k=3, alpha=2, stages=stages)
    assert list(result.stages) == snapshots
    assert all(len(r) == 7 for r in result.stages.values()) and len(result.ranking) == 7
    assert result.ranking.ids == result.stages[snapshots[-1]].ids
    counted: dict[str, int] = {}
    for step in result.trace.steps:
        for c in step.calls:
            counted[c.role] = counted.get(c.role, 0) + 1
    assert counted == calls


# --------------------------------------------------------------------------- stage-1 scoring (Eq. 7)


class HashEncoder:
    """A pixel-seeing dual encoder test double: deterministic unit vectors, texts and images differ."""

    sees_pixels = True
    model_id = "hash-dual"
    dim = 16

    def _vec(self, key: str) -> np.ndarray:
        v = np.random.default_rng(abs(hash(key)) % 2**32).normal(size=self.dim).astype(np.float32)
        return v / np.linalg.norm(v)

    def encode_texts(self, texts):
        return np.stack([self._vec("text:" + t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def encode_images(self, records):
        return np.stack([self._vec("image:" + r.id) for r in records])


RECORDS = [ImageRecord(id=f"r{i}", path=f"/x/{i}.png", captions=[f"caption number {i}"]) for i in range(12)]
DESCRIPTIONS = ["A penguin.", "A black and white penguin.", "A penguin standing on ice."]


def test_stage1_score_is_the_weighted_mean_of_caption_and_image_cosines(tmp_path):
    enc = HashEncoder()
    gallery = gallery_from_records(str(tmp_path / "g"), RECORDS, enc, None)
    ctx = MethodContext(gallery=gallery, dual=enc, text=enc, roles=Roles.from_models({"default": reasoner()}))
    _, result = search(ctx, Query("a penguin"), top_k=12, stages=[1], tau=0.3)
    d = enc.encode_texts(DESCRIPTIONS)
    captions = gallery.vectors("caption_dual")
    images = gallery.vectors("image")
    expected = (0.3 * (d @ captions.T) + 0.7 * (d @ images.T)).mean(axis=0)
    got = dict(zip(result.ranking.ids, result.ranking.scores, strict=True))
    assert np.allclose([got[i] for i in gallery.ids], expected, atol=1e-5)
    assert result.ranking.ids == [gallery.ids[i] for i in np.argsort(-expected, kind="stable")]
    assert not any("caption mode" in n for s in result.trace.steps for n in s.notes)


def test_stage1_without_image_vectors_uses_the_caption_term_alone(tmp_path):
    enc = HashEncoder()
    gallery = Gallery(tmp_path / "g", create=True)
    with gallery.transaction() as c:
        gallery.ensure_space(c, "caption_dual", enc.model_id, enc.dim)
        for r in RECORDS:
            gallery.upsert(c, r, r.id, r.id, {"caption_dual": enc.encode_texts(r.captions)[0]})
    gallery.write_snapshot()
    ctx = MethodContext(gallery=gallery, dual=enc, text=enc, roles=Roles.from_models({"default": reasoner()}))
    _, result = search(ctx, Query("a penguin"), top_k=12, stages=[1])
    expected = (enc.encode_texts(DESCRIPTIONS) @ gallery.vectors("caption_dual").T).mean(axis=0)
    got = dict(zip(result.ranking.ids, result.ranking.scores, strict=True))
    assert np.allclose([got[i] for i in gallery.ids], expected, atol=1e-5)
    retrieve = next(s for s in result.trace.steps if s.name == "stage1.retrieve")
    assert any("no image vectors" in n and "caption_dual only" in n for n in retrieve.notes)


def test_caption_mode_is_stated_in_the_trace(roles_context):
    _, result = search(roles_context(reasoner=reasoner()), Query("a penguin"), stages=[1])
    retrieve = next(s for s in result.trace.steps if s.name == "stage1.retrieve")
    assert any("caption mode" in n for n in retrieve.notes)


# --------------------------------------------------------------------------- Chat-IR


DIALOGUE = [DialogueTurn("does it live in the cold?", "yes, on ice"), DialogueTurn("is it a bird?", "yes")]


def chat_reasoner() -> ScriptedChatModel:
    """Stage 1 answers with descriptions naming the number of turns its instruction holds."""

    def stage1(text: str) -> str:
        instruction = text.rsplit(" - Instruction: ", 1)[1].split("\n")[0]
        n = instruction.count("?")
        return stage1_reply([f"core {n}", f"enhanced {n}", f"A penguin after {n} turns."])

    return ScriptedChatModel(rules=[(STAGE2_MARK, TWO_QUESTIONS), (STAGE1_MARK, stage1)], model_id="reasoner")


def stage1_prompts(model: ScriptedChatModel) -> list[str]:
    return [p for p in model.prompts() if STAGE1_MARK in p and STAGE2_MARK not in p]


def test_chat_default_is_the_papers_previous_description_plus_current_turn(roles_context):
    # Sec. 3.2 / the authors' start_dialog: round 1 reads the opening caption and turn 1; round r reads
    # round r-1's description and turn r alone. Round 0 (scored by the PlugIR protocol) is TIR on the caption.
    r = chat_reasoner()
    ctx = roles_context(reasoner=r, verifier=ScriptedChatModel(default="Yes"),
                        evaluator=ScriptedChatModel(default="ANSWER: No"))
    method = ImageScope(ctx, {"k": 2, "alpha": 1})
    query = Query("an animal", dialogue=DIALOGUE)
    rounds = method.search_rounds(query, top_k=5)
    instructions = ["an animal", "does it live in the cold? yes, on ice", "is it a bird? yes"]
    references = ["(none)", "an animal", "A penguin after 1 turns."]
    assert stage1_prompts(r) == [template("stage1_reasoner.txt", instruction=i, reference=ref)
                                 for i, ref in zip(instructions, references, strict=True)]
    assert rounds[1].trace.steps[0].outputs == {"reference_description": "an animal",
                                                "source": "the opening caption (round 1 of Sec. 3.2)"}
    assert rounds[2].trace.steps[0].outputs["source"] == "round 1 comprehensive synthesis"

    # search() reasons through round 1 only (round 0's description is not used by the paper's round 1).
    r2 = chat_reasoner()
    ctx2 = roles_context(reasoner=r2, verifier=ScriptedChatModel(default="Yes"),
                         evaluator=ScriptedChatModel(default="ANSWER: No"))
    final = ImageScope(ctx2, {"k": 2, "alpha": 1}).search(query, top_k=5)
    assert final.ranking.ids == rounds[-1].ranking.ids
    assert stage1_prompts(r2) == stage1_prompts(r)[1:]
    assert [s.name for s in final.trace.steps][:3] == ["reference", "chat.round1.stage1.reason", "stage1.reason"]


def test_search_rounds_folds_the_dialogue_and_carries_the_description(roles_context):
    r = chat_reasoner()
    ctx = roles_context(reasoner=r, verifier=ScriptedChatModel(default="Yes"),
                        evaluator=ScriptedChatModel(default="ANSWER: No"))
    method = ImageScope(ctx, {"k": 2, "alpha": 1, "chat_mode": "fold"})
    query = Query("an animal", dialogue=DIALOGUE)
    rounds = method.search_rounds(query, top_k=5)

    assert len(rounds) == 3
    instructions = ["an animal", "an animal, does it live in the cold? yes, on ice",
                    "an animal, does it live in the cold? yes, on ice, is it a bird? yes"]
    references = ["(none)", "A penguin after 0 turns.", "A penguin after 1 turns."]
    assert stage1_prompts(r) == [template("stage1_reasoner.txt", instruction=i, reference=ref)
                                 for i, ref in zip(instructions, references, strict=True)]
    assert [res.trace.query["round"] for res in rounds] == [0, 1, 2]
    assert rounds[0].trace.steps[0].outputs["source"] == "none (no reference image)"
    assert rounds[2].trace.steps[0].outputs == {"reference_description": "A penguin after 1 turns.",
                                                "source": "round 1 comprehensive synthesis"}
    assert all(list(res.stages) == ["stage1", "stage2", "stage3"] and len(res.ranking) == 5 for res in rounds)
    assert [res.trace.model_calls for res in rounds] == [1 + 1 + 2 * 2 + 1] * 3

    # search() on the whole dialogue ranks like the last round, reasoning through the earlier rounds.
    r2 = chat_reasoner()
    ctx2 = roles_context(reasoner=r2, verifier=ScriptedChatModel(default="Yes"),
                         evaluator=ScriptedChatModel(default="ANSWER: No"))
    final = ImageScope(ctx2, {"k": 2, "alpha": 1, "chat_mode": "fold"}).search(query, top_k=5)
    assert final.ranking.ids == rounds[-1].ranking.ids
    assert stage1_prompts(r2) == stage1_prompts(r)
    names = [s.name for s in final.trace.steps]
    assert names[:4] == ["reference", "chat.round0.stage1.reason", "chat.round1.stage1.reason", "stage1.reason"]


def test_chat_mode_is_validated(roles_context):
    with pytest.raises(ValidationError):
        ImageScope(roles_context(reasoner=chat_reasoner()), {"chat_mode": "last_turn"})


def test_search_rounds_keeps_each_rounds_call_cap(roles_context):
    """Each round gets the cap a search of it gets: a cap of 3 stops every round inside stage 2's verification
    (1 synthesis + 1 propositions + 2x2 verifier calls would be 6), each returns its stage-1 ranking, and no
    round makes more than 3 calls."""
    r = chat_reasoner()
    verifier = ScriptedChatModel(default="Yes")
    ctx = roles_context(reasoner=r, verifier=verifier, evaluator=ScriptedChatModel(default="ANSWER: No"))
    method = ImageScope(ctx, {"k": 2, "alpha": 1, "chat_mode": "fold", "max_calls": 3})
    rounds = method.search_rounds(Query("an animal", dialogue=DIALOGUE), top_k=5)
    assert len(rounds) == 3
    for res in rounds:
        assert res.trace.model_calls <= 3
        assert res.trace.steps[-1].name == "stopped.call_cap"
        assert res.is_error and res.source_reason.startswith("call cap reached")  # not the method's answer
        assert res.trace.counters.get("call_cap_refused", 0) >= 1
        stage1 = next(s for s in res.trace.steps if s.name == "stage1.retrieve")
        assert res.ranking.ids[:len(stage1.outputs["top"])] == [t["id"] if isinstance(t, dict) else t[0]
                                                                  for t in stage1.outputs["top"]]
    # Uncapped, the same rounds make their full calls (the cap above is what stopped them).
    full = ImageScope(roles_context(reasoner=chat_reasoner(), verifier=ScriptedChatModel(default="Yes"),
                                    evaluator=ScriptedChatModel(default="ANSWER: No")),
                      {"k": 2, "alpha": 1, "chat_mode": "fold"}).search_rounds(Query("an animal", dialogue=DIALOGUE))
    assert [res.trace.model_calls for res in full] == [7] * 3
