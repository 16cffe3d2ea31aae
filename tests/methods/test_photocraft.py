"""`photocraft` and `imageseeker` as methods over the shipped mini album (caption mode, real MiniLM), with the
scripted chat backend: the per-user album scope, the answer set apart from the ranking, which memories each
method runs, the distillation threshold, a user marking an answer right, and `imagent search` printing turns."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.agents.tools import ToolError
from imagent.cli.main import app
from imagent.core.config import IndexOptions
from imagent.core.types import Query
from imagent.eval.datasets import load_benchmark
from imagent.methods.album.skills import SkillLibrary
from imagent.methods.base import MethodContext, get_method
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Roles
from imagent.tools.album import Album

ALBUM = Path(str(files("imagent.eval") / "data" / "album_mini"))
FLAMINGO = "u1001/13942060112"


@pytest.fixture(scope="module")
def album_index(tmp_path_factory, caption_dual, minilm):
    """Both users' photos in one index (the DISBench manifest: captions, time, place, device)."""
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    root = tmp_path_factory.mktemp("album")
    manifest = root / "manifest.jsonl"
    rows = load_benchmark("disbench", images_root=ALBUM).gallery_manifest()
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    build_index(manifest, root / "index", IndexParts.of(caption_dual, minilm), IndexOptions())
    return root / "index"


@pytest.fixture
def ctx_for(album_index, caption_dual, minilm):
    from imagent.index.gallery import Gallery

    def make(model, memory=None):
        models = {"default": model} | ({"memory": memory} if memory else {})
        return MethodContext(gallery=Gallery(album_index), dual=caption_dual, text=minilm,
                             roles=Roles.from_models(models))

    return make


def user_ids(gallery, user):
    return [i for i in gallery.ids if i.startswith(f"{user}/")]


def test_device_and_scope(ctx_for):
    ctx = ctx_for(ScriptedChatModel(default="x"))
    assert ctx.gallery.record(FLAMINGO).device == "Canon EOS 550D"  # the manifest's device column
    scope = user_ids(ctx.gallery, "u1001")
    album = Album(ctx.gallery, ctx.dual, ctx.text).scoped(scope)
    assert len(album) == len(scope) == 55 and "u1002/27815530001" not in album
    hits = album.search("a pigeon", 50)
    assert hits.ids and set(hits.ids) <= set(scope)  # u1002 has a pigeon too; it is not this album's
    assert set(album.filter("address ~ 'paris'")) == set()  # u1002's Paris photos are out of scope
    assert len(album.filter("time >= '2014-04-20' and time < '2014-04-21'")) == 11
    with pytest.raises(ToolError):
        album.require_known(["u1002/27815530001"])


AGENT_RULES = [
    (r"\[REFLECTION", json.dumps({"anchor": {"note": "the flamingo", "ok": True},
                                  "constraint": {"note": "its day", "ok": True},
                                  "target": {"note": "birds", "ok": True},
                                  "completeness": {"note": "all", "ok": True}, "remove": []})),
    (r"\[ImageSearch\]", 'The zoo birds. The final answer is: ["u1001/13942060001", "u1001/13942060112", '
                         '"u1002/27815530001"]'),
]


def agent(rules=AGENT_RULES):
    return ScriptedChatModel(rules=list(rules), default='<tool_call>{"name": "ImageSearch", "arguments": '
                             '{"query": "pink flamingo bird"}}</tool_call>')


def query(ctx):
    return Query("The birds I photographed on the day I saw the pink flamingo.", id="q01",
                 candidates=user_ids(ctx.gallery, "u1001"))


@pytest.mark.parametrize("name", ["photocraft", "imageseeker"])
def test_answer_set_ranking_and_memories(ctx_for, tmp_path, name):
    model = agent()
    ctx = ctx_for(model)
    params = {"skills_path": str(tmp_path / "skills.jsonl")} if name == "photocraft" else {}
    method = get_method(name)(ctx, params)
    result = method.search(query(ctx), top_k=10)
    # u1002's photo is not in this user's album: dropped from the set.
    assert result.answer_set == ["u1001/13942060001", FLAMINGO]
    assert result.ranking.ids[:2] == result.answer_set and len(result.ranking) == 10
    assert all(a >= b for a, b in zip(result.ranking.scores, result.ranking.scores[1:], strict=False))
    assert set(result.ranking.ids) <= set(query(ctx).candidates)
    names = [s.name for s in result.trace.steps]
    assert names[-1] == "answer" and "turn.1" in names
    memory_steps = {n for n in names if n.startswith("memory.")}
    assert memory_steps == ({"memory.skill", "memory.audit"} if name == "photocraft" else set())
    system = model.calls[0][0][0].text
    assert ("MemoryCondense" in system) == (name == "photocraft")  # the working-memory tool
    assert "ANCHOR" in system if name == "photocraft" else "photo-search agent" in system
    assert "WebSearch is not available" in system  # no web backend configured


def test_distillation_threshold_and_user_marked_answers(ctx_for, tmp_path):
    skill_json = json.dumps({"task_pattern": "targets on the anchor's day",
                             "strategy": "Find the anchor, filter its day, search inside the day.",
                             "key_insight": "Scope before searching.", "applicable_when": "same-day queries"})
    memory = ScriptedChatModel(rules=[("reusable search strategy", skill_json), *AGENT_RULES[:1]])
    ctx = ctx_for(agent(), memory)
    lib_path = tmp_path / "skills.jsonl"
    method = get_method("photocraft")(ctx, {"skills_path": str(lib_path)})
    q = query(ctx)
    result = method.search(q, top_k=5)
    assert method.learn_from_outcome(q, result, 0.85) is None  # F1 must exceed theta_conf = 0.85
    assert not lib_path.exists() and not any("reusable" in p for p in memory.prompts())
    skill = method.learn_from_outcome(q, result, 0.9)
    assert skill is not None and skill.confidence == 0.9 and skill.origin == "evaluation"
    step = next(s for s in result.trace.steps if s.name == "memory.distill" and s.outputs.get("distilled"))
    assert step.outputs["skill"] == skill.id and not step.outputs["merged"]
    trajectory = memory.prompts()[-1]
    assert "ImageSearch" in trajectory and "pink flamingo bird" in trajectory  # the episode's trajectory
    # The user marks the same search right: same source query -> merged, confidence 1.0, origin kept.
    marked = method.mark_answer_correct(q.text, result.trace.to_dict())
    assert marked is not None and marked.id == skill.id and marked.support == 2 and marked.confidence == 1.0
    assert [s.id for s in SkillLibrary(lib_path).load()] == [skill.id]
    # The same query never receives the skill distilled from itself (a shared library, a resumed run) ...
    again = method.search(query(ctx), top_k=5)
    inj = next(s for s in again.trace.steps if s.name == "memory.skill")
    assert inj.outputs["injected"] is None and inj.outputs["excluded_same_query"] == [skill.id]
    # ... while a similar query does: the similarity compares the query text with the skill's source query.
    similar = Query("The birds I photographed on the day I saw the pink flamingos.", id="q02",
                    candidates=q.candidates)
    other = method.search(similar, top_k=5)
    inj = next(s for s in other.trace.steps if s.name == "memory.skill")
    expected = float(minilm_cos(ctx.text, similar.text, q.text))
    assert inj.inputs["query"] == similar.text and inj.outputs["injected"] == skill.id
    assert inj.outputs["best_similarity"] == pytest.approx(expected, abs=1e-3) and expected > 0.65
    task_message = ctx.roles["agent"].model.calls[-1][0][1].text  # the hint is prepended to the task
    assert task_message.startswith("Past-experience hint")


def minilm_cos(embedder, a, b):
    va, vb = embedder.encode_texts([a, b])
    return (va * vb).sum()


def test_context_limit_defaults_to_the_backend_window(ctx_for):
    model = agent()
    model.n_ctx = 2048
    method = get_method("photocraft")(ctx_for(model), {"context_limit": None})
    assert method.context_limit() == 2048
    assert get_method("photocraft")(ctx_for(agent()), {}).context_limit() == 32768
    assert get_method("imageseeker")(ctx_for(model), {"context_limit": 4096}).context_limit() == 4096


def test_cli_search_prints_each_turn(album_index, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path / "data"))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [list(r) for r in AGENT_RULES],
                                  "default": '<tool_call>{"name": "ImageSearch", "arguments": {"query": '
                                             '"pink flamingo bird"}}</tool_call>'}))
    cfg = tmp_path / "imagent.toml"
    cfg.write_text(f'[models.s]\nbackend = "scripted"\nmodel = "{script}"\n[roles]\ndefault = "s"\n')
    res = CliRunner().invoke(app, ["search", "the birds on the day I saw the pink flamingo", "--method",
                                   "photocraft", "--index", str(album_index), "--config", str(cfg), "-k", "3"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output[-2000:]
    out = res.output
    assert "turn.1" in out and "turn.2" in out and "memory.audit" in out
    assert 'ImageSearch {"query": "pink flamingo bird"' in out and "photos for 'pink flamingo bird'" in out
    assert "answer" in out and FLAMINGO in out


def test_preflight_warns_a_blind_agent_without_captions(tmp_path, caption_dual, minilm, ctx_for):
    from imagent.core.types import ImageRecord
    from imagent.index.embedding import gallery_from_records

    bare = [ImageRecord(id=f"p{i}", path="", derived_text=f"img {i} 2014-04-20") for i in range(3)]
    g = gallery_from_records(str(tmp_path / "bare"), bare, caption_dual, minilm)
    ctx = MethodContext(gallery=g, dual=caption_dual, text=minilm, roles=Roles.from_models({"default": agent()}))
    warnings = get_method("photocraft")(ctx).preflight()
    assert len(warnings) == 1 and "cannot see pixels" in warnings[0]
    assert get_method("imageseeker")(ctx_for(agent())).preflight() == []  # the album has captions
    seeing = ScriptedChatModel(default="x", sees_images=True)
    assert get_method("photocraft")(MethodContext(gallery=g, dual=caption_dual, text=minilm,
                                                  roles=Roles.from_models({"default": seeing}))).preflight() == []


@pytest.mark.parametrize("describe", [None, False])
def test_a_blind_agent_reads_each_photos_date_place_and_caption(ctx_for, describe):
    """describe_results (None: on for a blind agent): search results come grouped by day and place, a line
    id | score | time | caption each; false: the paper's ids and scores."""
    import re

    model = agent()
    ctx = ctx_for(model)
    method = get_method("imageseeker")(ctx, {} if describe is None else {"describe_results": describe})
    assert method.describe() is (describe is None)  # the scripted model cannot see pixels
    method.search(query(ctx), top_k=5)
    seen = "\n".join(m.text for m in model.calls[1][0])  # the second call reads the first search's result
    described = re.search(r"time = '2014-04-20' and place ~ 'Melbourne Zoo, Elliott Avenue':\n(.+\n)*"
                          r"u1001/13942060112 \| 0\.\d\d \| "
                          r"\d\d:\d\d \| \S", seen)
    assert bool(described) is (describe is None)
    assert ("(score 0." in seen) is (describe is False)


def test_both_agents_share_one_scaffold_and_differ_only_by_their_memories(ctx_for, tmp_path):
    """Decision 10: the scaffold profile, the tools and the prompts' protocol are the same for both; PhotoCraft adds
    the paper's memories (working memory with its MemoryCondense tool, the audit, skills) and nothing else."""
    from imagent.methods.album.photocraft import ImageSeekerConfig, PhotoCraftConfig
    from imagent.methods.album.scaffold import NONE, SMALL

    ctx = ctx_for(agent())
    q = query(ctx)
    album = Album(ctx.gallery, ctx.dual, ctx.text).scoped(q.candidates)
    skills = {"skills_path": str(tmp_path / "s.jsonl")}
    for scaffold, profile in (("auto", NONE), ("none", NONE), ("small", SMALL)):  # auto: the scripted backend
        craft = get_method("photocraft")(ctx, skills | {"scaffold": scaffold})
        seeker = get_method("imageseeker")(ctx, {"scaffold": scaffold})
        assert craft.profile() is seeker.profile() is profile
        craft_tools, seeker_tools = craft.tools(album, profile), seeker.tools(album, profile)
        assert [t.name for t in craft_tools] == [t.name for t in seeker_tools]
        assert [t.config for t in craft_tools] == [t.config for t in seeker_tools]
        assert craft.worked_example(profile) == seeker.worked_example(profile)
        memories = craft.memories(q, album, profile, craft_tools)
        assert [type(h).__name__ for h in memories] == ["SkillInjection", "WorkingMemory", "EpisodicMemory"]
        assert [t.name for t in craft_tools][-1] == "MemoryCondense"
        assert [type(h).__name__ for h in seeker.memories(q, album, profile, seeker_tools)] == ["WorkingMemory"]
        assert memories[2].max_audits == (1 if profile is SMALL else None)  # the small profile bounds the audit
    extra = set(PhotoCraftConfig.model_fields) - set(ImageSeekerConfig.model_fields)
    assert extra == {"working_memory", "summaries", "fidelity", "tau", "keep_verbatim", "episodic_memory",
                     "max_audits", "semantic_memory", "skills_path", "theta_conf", "theta_retr", "merge_threshold"}
    assert set(ImageSeekerConfig.model_fields) - set(PhotoCraftConfig.model_fields) == {"compression"}
    tri_state = [k for k, f in PhotoCraftConfig.model_fields.items()
                 if f.default is None and f.annotation == bool | None]
    assert tri_state == ["describe_results"]  # no "None means on for the JSON protocol" knob is left


PINK = "u1001/13942060112"  # the flamingo photo


def episode_model():
    """One scripted JSON-protocol episode for either agent: the split, an unnarrowed answer, the narrowing, an
    unsearched answer, the target search, an answer leaving out its clear matches, then the answer the scaffold
    named; the model's audit (PhotoCraft's memory) passes."""
    replies = [json.dumps({"thought": "t", "tool": "ImageSearch", "arguments": {"query": "pink flamingo"}}),
               json.dumps({"thought": "t", "final_answer": [PINK]}),
               json.dumps({"thought": "t", "tool": "FilterMetadata",
                           "arguments": {"same_as_photo": PINK, "same": ["day"], "save_as": "d"}}),
               json.dumps({"thought": "t", "final_answer": [PINK]}),
               json.dumps({"thought": "t", "tool": "ImageSearch",
                           "arguments": {"query": "bird", "search_within": "d"}}),
               json.dumps({"thought": "t", "final_answer": [PINK]})]

    def reply(text):
        if "Split a photo-album search" in text:
            return json.dumps({"anchor": "pink flamingo", "same": "day", "target": "bird"})
        if "[REFLECTION" in text:
            return AGENT_RULES[0][1]
        if replies:
            return replies.pop(0)
        named = text.rsplit("found these clear matches, best first: ", 1)[1].split(".", 1)[0]
        return json.dumps({"thought": "t", "final_answer": named.split(", ")})

    return ScriptedChatModel(default=reply)


def run_episode(ctx_for, tmp_path, name, scaffold="small"):
    model = episode_model()
    ctx = ctx_for(model)
    params = {"tool_mode": "json", "scaffold": scaffold}
    if name == "photocraft":
        params["skills_path"] = str(tmp_path / f"{name}.jsonl")
    result = get_method(name)(ctx, params).search(query(ctx), top_k=10)
    return result, model


def directives(result):
    """What the scaffold told the agent, turn by turn, and the calls it fixed next (from the trace)."""
    return [(s.outputs["feedback"], s.outputs["rejected_by"]) for s in result.trace.steps
            if s.outputs.get("rejected_by")]


def test_scaffold_parity_both_agents_receive_the_same_directives_on_the_same_episode(ctx_for, tmp_path):
    craft, craft_model = run_episode(ctx_for, tmp_path, "photocraft")
    seeker, seeker_model = run_episode(ctx_for, tmp_path, "imageseeker")
    told = directives(seeker)
    assert [r for _, r in told] == ["Scaffold"] * 3 and directives(craft) == told
    assert told[0][0].startswith("Not narrowed yet. Call FilterMetadata with same_as_photo = the photo of the pink "
                                 f"flamingo ({PINK}, found by your search)")
    assert told[1][0].startswith('Now call ImageSearch with {"query": "bird", "search_within": "d"}')
    assert "Your answer leaves out" in told[2][0]

    def scaffold_counts(result):
        return {k: v for k, v in result.counts.items() if k.startswith("scaffold.")}

    assert scaffold_counts(craft) == scaffold_counts(seeker) == {
        "scaffold.query_split": 1, "scaffold.send_back.scope": 1, "scaffold.send_back.target": 1,
        "scaffold.answer_only.cover": 1}

    def next_grammars(result, model):  # the grammar of the turn after each directive (the agent's calls only)
        turns = [p.json_schema for m, p in model.calls
                 if "Split a photo-album" not in m[-1].text and "[REFLECTION" not in m[-1].text]
        return [json.dumps(turns[s.inputs["turn"]], sort_keys=True) for s in result.trace.steps
                if s.outputs.get("rejected_by")]

    after = next_grammars(seeker, seeker_model)
    assert len(after) == 3 and next_grammars(craft, craft_model) == after
    assert '"const": "FilterMetadata"' in after[0] and '"const": "bird"' in after[1] and '"tool"' not in after[2]
    # the memories are the only difference: PhotoCraft's audit ran once on the answer that stood
    assert craft.counts["audits_passed"] == 1 and seeker.counts["audits_passed"] == 0
    assert craft.answer_set == seeker.answer_set and len(craft.answer_set) >= 2


def test_answer_origin_on_scripted_episodes(ctx_for, tmp_path):
    """The answer the scaffold named (the clear matches of the chain's last search) is code's: origin "code",
    share 1; under the papers' protocol (scaffold none) nothing is named and the model's answer is its own."""
    for name in ("photocraft", "imageseeker"):
        small, _ = run_episode(ctx_for, tmp_path, name)
        assert (small.answer_origin, small.code_selected_share) == ("code", 1.0)
        step = next(s for s in small.trace.steps if s.name == "answer")
        assert step.inputs["scaffold"] == "small" and step.outputs["answer_origin"] == "code"
        none, model = run_episode(ctx_for, tmp_path, name, scaffold="none")
        assert none.answer_set == [PINK] and none.source == "method"
        assert (none.answer_origin, none.code_selected_share) == ("model", 0.0)
        assert not any("Split a photo-album" in p for p in model.prompts())
        assert not any(k.startswith("scaffold.") for k in none.counts)
        assert none.to_dict()["answer_origin"] == "model" and none.to_dict()["code_selected_share"] == 0.0
