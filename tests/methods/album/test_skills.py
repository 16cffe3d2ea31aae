"""PhotoCraft's semantic memory: de-entified distillation, the merge threshold (Eq. 4), the injection
threshold, persistence of the library file and the ``imagent skills`` commands."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from imagent.agents.runtime import AgentRuntime
from imagent.cli.main import app
from imagent.core.trace import Trace
from imagent.methods.album.memory import SkillInjection
from imagent.methods.album.skills import (
    Skill,
    SkillLibrary,
    SkillLibraryError,
    distill_skill,
    entity_terms,
    skill_problems,
    trajectory_text,
)
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Role


class AngleEmbedder:
    """Texts at chosen angles on a circle: cos(a, b) = cos(angle_a - angle_b), exactly."""

    model_id, dim = "angles", 2

    def __init__(self, angles: dict[str, float]) -> None:
        self.angles = angles

    def encode_texts(self, texts):
        return np.asarray([[math.cos(self.angles[t]), math.sin(self.angles[t])] for t in texts], dtype=np.float32)


def at_cos(c: float) -> float:
    return math.acos(c)


def skill(query: str, conf: float = 0.9, pattern: str = "anchor day then target") -> Skill:
    return Skill(id=f"sk-{abs(hash(query)) % 10**8:08d}", task_pattern=pattern, strategy="find the anchor, filter "
                 "its day, search inside", key_insight="filter before searching", applicable_when="same-day queries",
                 confidence=conf, source_query=query, source_queries=[query])


CLEAN = {"task_pattern": "targets on the same day as a visually identified anchor",
         "strategy": "Search the anchor with short keywords, read its date, filter that day, search inside it.",
         "key_insight": "Filtering the anchor's day first removes look-alike photos from other days.",
         "applicable_when": "The query names an anchor object and asks for other photos from that day."}


# --------------------------------------------------------------------------- de-entification


def test_skill_problems_catch_ids_dates_and_query_entities():
    q = "The birds I photographed on the day I saw the flamingo at Melbourne Zoo."
    assert entity_terms(q) >= {"melbourne", "zoo"}
    assert skill_problems(CLEAN, q, ["u1/13942060001"]) == []
    assert "photo ids" in skill_problems({**CLEAN, "strategy": "start from 13942060001"}, q, ["u1/13942060001"])[0]
    assert "date" in skill_problems({**CLEAN, "key_insight": "it was 2014-04-20"}, q)[0]
    assert "entities" in skill_problems({**CLEAN, "task_pattern": "birds at Melbourne zoo"}, q)[0]
    assert "empty" in skill_problems({**CLEAN, "strategy": ""}, q)[0]


def test_distillation_retries_an_entity_naming_skill_then_drops_it():
    q = "The fish from the visit where I saw a seahorse in Sydney."
    bad = json.dumps({**CLEAN, "strategy": "Search Sydney aquarium first."})
    model = ScriptedChatModel(rules=[("rejected", json.dumps(CLEAN))], default=bad)
    s = distill_skill(Role("skill", model), "Q: $query\nT: $trajectory", q, "[turn.1] ...", 0.9)
    assert s is not None and s.task_pattern == CLEAN["task_pattern"] and s.confidence == 0.9
    assert "sydney" in model.prompts()[-1].lower() and "rejected" in model.prompts()[-1]
    trace = Trace()
    with trace.step("distil"):
        none = distill_skill(Role("skill", ScriptedChatModel(default=bad)), "Q: $query", q, "", 0.9)
    assert none is None and "entities" in trace.steps[0].notes[0]


def test_trajectory_text_abbreviates_agent_turns():
    trace = {"steps": [{"name": "turn.1", "outputs": {"reasoning": "anchor first", "calls": [
        {"tool": "ImageSearch", "arguments": {"query": "flamingo"}, "observation": "u1/1 0.61"}]}},
        {"name": "memory.audit", "outputs": {"decision": "pass"}},
        {"name": "turn.2", "outputs": {"reasoning": "done", "answer": ["u1/1"]}}]}
    text = trajectory_text(trace)
    assert "[turn.1] anchor first" in text and 'ImageSearch({"query": "flamingo"})' in text
    assert "[memory.audit]" in text and "answer: ['u1/1']" in text
    assert trajectory_text(trace, max_chars=20).startswith("...")


# --------------------------------------------------------------------------- merge and injection thresholds


def test_merge_only_above_the_threshold(tmp_path):
    emb = AngleEmbedder({"q0": 0.0, "near": at_cos(0.85), "far": at_cos(0.75)})
    lib = SkillLibrary(tmp_path / "skills.jsonl", emb)
    first, merged, _ = lib.add(skill("q0", 0.9), merge_threshold=0.8)
    assert not merged
    entry, merged, sim = lib.add(skill("near", 0.95, pattern="better wording"), merge_threshold=0.8)
    assert merged and sim == pytest.approx(0.85, abs=1e-5) and entry.id == first.id
    assert entry.support == 2 and entry.source_queries == ["q0", "near"]
    assert entry.confidence == 0.95 and entry.task_pattern == "better wording"  # the more confident text wins
    _, merged, sim = lib.add(skill("far"), merge_threshold=0.8)
    assert not merged and sim == pytest.approx(0.75, abs=1e-5)
    assert [s.source_query for s in lib.load()] == ["q0", "far"]


def test_injection_only_above_the_threshold(tmp_path):
    emb = AngleEmbedder({"src": 0.0, "similar query": at_cos(0.70), "other query": at_cos(0.60)})
    lib = SkillLibrary(tmp_path / "skills.jsonl", emb)
    lib.save([skill("src")])
    for query, injected in (("similar query", True), ("other query", False)):
        model = ScriptedChatModel(default='The final answer is: ["a"]')
        runtime = AgentRuntime(Role("agent", model), [], "sys", max_turns=2, hooks=[SkillInjection(lib, 0.65)],
                               known_ids={"a"})
        trace = Trace()
        with trace.activate():
            runtime.run(query)
        step = next(s for s in trace.steps if s.name == "memory.skill")
        assert (step.outputs["injected"] is not None) == injected
        assert ("Past-experience hint" in model.prompts()[0]) == injected
        prompt = model.prompts()[0]
        assert query in prompt and (not injected or prompt.index("Past-experience") < prompt.index(query))


def test_real_minilm_merges_paraphrases_not_different_structures(tmp_path, minilm):
    lib = SkillLibrary(tmp_path / "skills.jsonl", minilm)
    lib.add(skill("The birds I photographed on the day I saw the pink flamingo."), 0.8)
    _, merged, sim = lib.add(skill("The birds I photographed on the day I saw the flamingo."), 0.8)
    assert merged and sim > 0.8
    _, merged, sim = lib.add(skill("The cars from my trip exactly one year after I photographed the obelisk."), 0.8)
    assert not merged and sim < 0.8


# --------------------------------------------------------------------------- persistence and the CLI


def test_library_file_round_trip_edit_and_errors(tmp_path):
    path = tmp_path / "lib" / "skills.jsonl"
    lib = SkillLibrary(path)
    assert lib.load() == []
    a, b = skill("q a"), skill("q b")
    lib.save([a, b])
    again = SkillLibrary(path).load()
    assert [s.to_dict() for s in again] == [a.to_dict(), b.to_dict()]
    # A hand edit is read back; a removal keeps the rest.
    lines = path.read_text().splitlines()
    edited = json.loads(lines[0]) | {"strategy": "edited by hand"}
    path.write_text(json.dumps(edited) + "\n" + lines[1] + "\n")
    assert lib.get(a.id).strategy == "edited by hand"
    assert lib.remove(a.id).id == a.id and [s.id for s in lib.load()] == [b.id]
    with pytest.raises(KeyError):
        lib.remove("sk-nope")
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(SkillLibraryError, match="line 2"):
        lib.load()
    with pytest.raises(SkillLibraryError):
        lib.remove(b.id)  # a broken file is never overwritten
    assert "{not json" in path.read_text()


def test_skills_cli_list_show_rm(tmp_path):
    path = tmp_path / "skills.jsonl"
    s = skill("The fish from the aquarium visit.")
    SkillLibrary(path).save([s])
    runner = CliRunner()
    res = runner.invoke(app, ["skills", "list", "--path", str(path), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["skills"][0]["id"] == s.id
    res = runner.invoke(app, ["skills", "show", s.id, "--path", str(path)])
    assert res.exit_code == 0 and "find the anchor" in res.stdout and "source_query" in res.stdout
    res = runner.invoke(app, ["skills", "rm", s.id, "--path", str(path)])
    assert res.exit_code == 0 and SkillLibrary(path).load() == []
    res = runner.invoke(app, ["skills", "show", s.id, "--path", str(path)])
    assert res.exit_code == 2 and "no skill" in res.output
    # Default location: the configured methods.photocraft.skills_path.
    cfg = tmp_path / "imagent.toml"
    cfg.write_text(f'[methods.photocraft]\nskills_path = "{path}"\n')
    SkillLibrary(path).save([s])
    res = runner.invoke(app, ["skills", "list", "--config", str(cfg)])
    assert res.exit_code == 0 and s.id in res.stdout
