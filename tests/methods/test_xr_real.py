"""X^R end to end with the real offline Qwen2.5 0.5B (llama.cpp, caption mode) on the 627 real stamps.

One CIR query, k' = 3, three questions: 2 imagination + 1 question + 3 x 3 x 2 verifier calls (about a minute
on two cores). A 0.5B model reasons poorly, so this checks structure, counts and plumbing, not quality.
"""

from __future__ import annotations

import pytest

from imagent.core.types import Query
from imagent.methods.base import get_method

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

K_PRIME = 3


def test_xr_search_with_real_qwen(make_context, stamps_gallery, qwen_local):
    ref = next(stamps_gallery.record(i) for i in stamps_gallery.ids if stamps_gallery.record(i).caption == "A frog.")
    query = Query("show a penguin instead of the frog", reference=ref, exclude=[ref.id])
    method = get_method("xr")(make_context(qwen_local), {"k_prime": K_PRIME})
    result = method.search(query, top_k=10)

    names = [s.name for s in result.trace.steps]
    assert names == ["caption", "imagine.text", "imagine.vision", "coarse.similarity", "coarse.rrf",
                     "fine.questions", "fine.verify.text", "fine.verify.vision", "fine.rerank"]
    steps = {s.name: s for s in result.trace.steps}
    assert steps["caption"].outputs["C_r"] == "A frog." and steps["caption"].model_calls == 0

    # Imagination: a caption each (the model's, or the documented fall-back), caption mode said in the trace.
    assert steps["imagine.text"].outputs["C_t"].strip()
    assert steps["imagine.vision"].outputs["C_v"].strip()
    assert isinstance(steps["imagine.text"].outputs["M_t"], list)
    assert steps["imagine.vision"].outputs["reference_seen_as"] == "text surrogate (caption mode)"
    assert any("caption mode" in n for n in steps["imagine.vision"].notes)

    # Questions with boolean expected answers; every candidate asked every question by both verifiers.
    questions = steps["fine.questions"].outputs["questions"]
    assert 1 <= len(questions) <= 3
    assert all(isinstance(q["answer"], bool) and q["question"].strip() for q in questions)
    for modality in ("text", "vision"):
        out = steps[f"fine.verify.{modality}"].outputs
        assert len(out["candidates"]) == K_PRIME
        assert all(len(c["answers"]) == len(questions) for c in out["candidates"])
        assert all(a in (True, False, None) for c in out["candidates"] for a in c["answers"])
        assert steps[f"fine.verify.{modality}"].model_calls == K_PRIME * len(questions)
        assert result.trace.counters.get(f"xr.unanswered_{modality}", 0) == out["unanswered"]

    # Exact call count: the JSON steps may retry (at most 3 tries each), the verifiers never do.
    json_calls = sum(steps[n].model_calls for n in ("imagine.text", "imagine.vision", "fine.questions"))
    assert 3 <= json_calls <= 9
    assert result.trace.model_calls == json_calls + 2 * K_PRIME * len(questions)

    # Rankings: the re-ranked block is a permutation of the coarse top k'; the rest keeps coarse order.
    coarse, final = result.stages["coarse"], result.ranking
    assert result.stages["full"].ids == final.ids
    assert len(final) == len(coarse) == 10
    assert set(final.ids[:K_PRIME]) == set(coarse.ids[:K_PRIME])
    assert final.ids[K_PRIME:] == coarse.ids[K_PRIME:]
    assert ref.id not in final.ids
    assert final.scores == sorted(final.scores, reverse=True)
    kept = steps["fine.rerank"].outputs["kept_order"]
    assert [k["id"] for k in kept] == final.ids[:K_PRIME]
