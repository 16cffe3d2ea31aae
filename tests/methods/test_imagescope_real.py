"""ImageScope end to end with the real offline Qwen2.5 0.5B (llama.cpp, caption mode) on the 627 real stamps.

One TIR and one CIR query, k = 3, alpha = 1: per query 2 reasoner calls (more only on a retry), 3 x M verifier
calls and one evaluator call. A 0.5B model reasons poorly, so this checks structure, counts and plumbing
through a real model (its JSON, its yes/no replies, its ANSWER line), not retrieval quality.
"""

from __future__ import annotations

import pytest

from imagent.core.types import Query
from imagent.methods.imagescope import ATOMIC_TYPES, ImageScope

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

K, ALPHA, TOP_K = 3, 1, 10


def check_pipeline(result, parse_retries: int = 2) -> dict:
    steps = {s.name: s for s in result.trace.steps}
    assert list(steps) == ["reference", "stage1.reason", "stage1.retrieve", "stage2.propositions",
                           "stage2.verify", "stage3.evaluate"]
    # Stage 1: atomic instructions of the five types and 1-3 target descriptions (the model's or the fall-back).
    reason = steps["stage1.reason"].outputs
    assert reason["atomic"] and all(kind in ATOMIC_TYPES and text.strip() for kind, text in reason["atomic"])
    assert 1 <= len(reason["descriptions"]) <= 3 and all(d.strip() for d in reason["descriptions"])
    assert any("caption mode" in n for n in steps["stage1.retrieve"].notes)
    # Stage 2: every proposition asked of each of the top k, answers parsed strictly (yes / no / None).
    props = steps["stage2.propositions"].outputs["propositions"]
    assert all(p["question"].strip() and isinstance(p["truth"], bool) for p in props)
    verify = steps["stage2.verify"]
    m = len(props)
    assert verify.model_calls == K * m
    if m:
        candidates = verify.outputs["candidates"]
        assert [c["id"] for c in candidates] == result.stages["stage1"].ids[:K]
        assert all(len(c["answers"]) == m and set(c["answers"]) <= {"yes", "no", None} for c in candidates)
        assert any("caption mode: role 'verifier'" in n for n in verify.notes)
    # Stage 2 permutes the top k only; stage 3 (alpha = 1) can only confirm rank 1.
    s1, s2, s3 = (result.stages[f"stage{i}"].ids for i in (1, 2, 3))
    assert sorted(s2[:K]) == sorted(s1[:K]) and s2[K:] == s1[K:]
    assert s3 == s2 == result.ranking.ids and len(result.ranking) == TOP_K
    evaluate = steps["stage3.evaluate"]
    assert evaluate.model_calls == ALPHA
    assert evaluate.outputs["verdicts"][0]["answer"] in {"yes", "no", None}
    # The documented count: 1 + 1 reasoner calls (+ retries), k*M verifier calls, at most alpha evaluator calls.
    reasoner_calls = steps["stage1.reason"].model_calls + steps["stage2.propositions"].model_calls
    assert 2 <= reasoner_calls <= 2 * (1 + parse_retries)
    assert result.trace.model_calls == reasoner_calls + K * m + ALPHA
    assert result.ranking.scores == sorted(result.ranking.scores, reverse=True)
    return steps


def test_text_to_image_with_real_qwen(make_context, stamps_gallery, qwen_local):
    method = ImageScope(make_context(qwen_local), {"k": K, "alpha": ALPHA})
    result = method.search(Query("a penguin"), top_k=TOP_K)
    steps = check_pipeline(result)
    assert steps["reference"].outputs == {"reference_description": "", "source": "none (no reference image)"}
    assert steps["stage1.reason"].inputs["reference"] == ""


def test_composed_with_real_qwen(make_context, stamps_gallery, qwen_local):
    frog = next(stamps_gallery.record(i) for i in stamps_gallery.ids if stamps_gallery.record(i).caption == "A frog.")
    method = ImageScope(make_context(qwen_local), {"k": K, "alpha": ALPHA})
    result = method.search(Query("show a penguin instead of the frog", reference=frog, exclude=[frog.id]),
                           top_k=TOP_K)
    steps = check_pipeline(result)
    assert steps["reference"].outputs == {"reference_description": "A frog.", "source": "stored caption"}
    assert steps["reference"].model_calls == 0  # stored caption: no captioner call
    assert frog.id not in result.ranking.ids
    assert any("caption mode: role 'evaluator'" in n for n in steps["stage3.evaluate"].notes)
