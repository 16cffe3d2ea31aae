"""TaCIR end to end with the real offline Qwen2.5 0.5B (llama.cpp, caption mode) on the real stamps, the
``search`` tool being the offline exemplar backend over a held-apart part of the stamps.

Gallery: every other stamp. Exemplars: a disjoint quarter, indexed on their own (an imagent index). One CIR
query with ``tool_policy = always_search`` so the search -> refine path runs whatever the small model decides:
2 reasoner calls (up to 3 tries each on unusable JSON) and exactly 1 tool call. A 0.5B model reasons
poorly, so this checks structure, counts and plumbing, not quality.
"""

from __future__ import annotations

import time

import pytest

from imagent.core.cache import DiskCache
from imagent.core.types import Query
from imagent.methods.base import MethodContext, get_method
from imagent.models.roles import Roles
from imagent.tools import CachedTool
from imagent.tools.exemplar import ExemplarSearchTool

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture(scope="module")
def split(tmp_path_factory, stamp_records, caption_dual, minilm):
    """(gallery, exemplar index dir, exemplar records): disjoint halves/quarters of the stamps."""
    from imagent.index.embedding import gallery_from_records

    root = tmp_path_factory.mktemp("tacir-real")
    gallery_records, held_apart = stamp_records[0::2], stamp_records[1::4]
    gallery = gallery_from_records(str(root / "gallery"), gallery_records, caption_dual, minilm)
    gallery_from_records(str(root / "exemplars"), held_apart, None, minilm)
    return gallery, root / "exemplars", held_apart


def test_tacir_search_with_real_qwen_and_exemplar_search(split, qwen_local, caption_dual, minilm, tmp_path):
    gallery, exemplar_dir, held_apart = split
    search = CachedTool(ExemplarSearchTool(exemplar_dir, embedder=minilm), DiskCache(None), tmp_path / "tools",
                        name="search")
    ctx = MethodContext(gallery=gallery, dual=caption_dual, text=minilm,
                        roles=Roles.from_models({"default": qwen_local}), tools={"search": search})
    ref = next(gallery.record(i) for i in gallery.ids if gallery.record(i).caption == "A frog.")
    query = Query("show a penguin instead of the frog", reference=ref, exclude=[ref.id])
    t0 = time.perf_counter()
    # Field bounds and answer length as before the GPT-4-class defaults: a 0.5B model loops to any bound.
    result = get_method("tacir")(ctx, {"tool_policy": "always_search", "max_field_chars": 400,
                                       "max_tokens": 640}).search(query, top_k=10)
    print(f"\ntacir real-model query: {time.perf_counter() - t0:.1f} s, {result.trace.model_calls} reasoner calls")

    assert [s.name for s in result.trace.steps] == ["tacir.select", "tacir.tool.search", "tacir.refine",
                                                   "tacir.retrieve"]
    select, tool_step, refine, retrieve = result.trace.steps
    # The reasoner saw the reference through its caption (caption mode), and every round produced a description.
    assert any("caption mode" in n for n in select.notes)
    assert select.outputs["target_description"].strip() and refine.outputs["target_description"].strip()
    assert 1 <= select.model_calls <= 3 and 1 <= refine.model_calls <= 3
    assert result.trace.model_calls == select.model_calls + refine.model_calls

    # Exactly one tool call, answered from the held-apart exemplars (never a gallery image).
    assert [c.kind for c in tool_step.calls] == ["tool"] and tool_step.calls[0].error is None
    proxy = tool_step.outputs["proxy"]
    assert proxy["backend"] == "exemplar" and proxy["cached"] is False
    assert proxy["source"] in {r.path for r in held_apart}
    assert proxy["source"] not in {gallery.record(i).path for i in gallery.ids}
    assert proxy["title"] in {r.caption for r in held_apart}
    assert tool_step.outputs["instruction"].strip()

    # Eq. 5 in caption mode: cos(T_t, I) + cos(title of the proxy, I) for every returned image.
    assert retrieve.outputs["proxy_used"] is True
    t, p = minilm.encode_texts([retrieve.outputs["final_description"], proxy["title"]])
    vecs = gallery.vectors("image")
    for image_id, score in zip(result.ranking.ids, result.ranking.scores, strict=True):
        v = vecs[gallery.row(image_id)]
        assert score == pytest.approx(float(v @ t + v @ p), abs=1e-4)
    assert len(result.ranking) == 10 and ref.id not in result.ranking.ids
    assert len(result.stages["initial"]) == 10
