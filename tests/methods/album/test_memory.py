"""PhotoCraft's memories on the agent runtime with the scripted chat backend: the compression trigger,
the fidelity validator (a summary that drops an id or a date is caught), the MemoryCondense tool, and
the episodic audit's re-round."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagent.agents.runtime import AgentRuntime
from imagent.agents.tools import Observation, Tool, ToolArgs
from imagent.core.trace import Trace
from imagent.methods.album.memory import (
    EpisodicMemory,
    MemoryCondense,
    WorkingMemory,
    extract_facts,
    fidelity,
)
from imagent.methods.album.tools import MetadataResult, SearchResult
from imagent.models.base import ImagePart
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Role

ALBUM = {"u1/1001", "u1/1002", "u1/1003", "u1/2001", "u1/2002"}
META = {
    "u1/1001": ("2014-04-20 10:05:00", "Melbourne Zoo, Parkville, Australia"),
    "u1/1002": ("2014-04-20 10:12:13", "Melbourne Zoo, Parkville, Australia"),
    "u1/2001": ("2014-06-14 09:40:00", "Yarra Valley farm, Healesville, Australia"),
}
CONDENSE_PROMPT = "Query: $query\nWrite:\n$sections\n---\n$history"


class PhotoIdsArgs(ToolArgs):
    photo_ids: list[str]


class SearchArgs(ToolArgs):
    query: str
    search_within: str | None = None


class FakeMetadata(Tool):
    name = "GetMetadata"
    description = "metadata of photos"
    Args = PhotoIdsArgs

    def run(self, args, state):
        lines = [f"{p}: time={META[p][0]}; address={META[p][1]}" for p in args.photo_ids]
        return Observation("\n".join(lines), photos=list(args.photo_ids),
                           result=MetadataResult(tuple(args.photo_ids)))


class FakeSearch(Tool):
    name = "ImageSearch"
    description = "search"
    Args = SearchArgs

    def run(self, args, state):
        hits = ["u1/1001", "u1/1002"] if "bird" in args.query else ["u1/2001"]
        result = SearchResult(args.query, args.search_within, tuple(hits), (0.5,) * len(hits),
                              ("",) * len(hits), tuple(hits))
        return Observation(", ".join(hits), photos=hits, scores={h: 0.5 for h in hits}, result=result)


def call(name: str, **arguments: Any) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def sequence(*replies: str):
    """A scripted reply function answering the agent's turns in order (the last one repeats)."""
    it = iter(replies)
    last = [replies[-1]]

    def reply(_text: str) -> str:
        last[0] = next(it, last[0])
        return last[0]

    return reply


# --------------------------------------------------------------------------- fidelity validator


def test_extract_facts_reads_ids_dates_and_places():
    text = "u1/1001: time=2014-04-20 10:05:00; address=Melbourne Zoo, Parkville\nu1/9999: unknown"
    f = extract_facts(text, ALBUM, {"expression": "address contains 'Brunswick' and near(-37.76, 144.96, 2)"})
    assert f.ids == {"u1/1001"}  # u1/9999 is not an album id
    assert f.dates == {"2014-04-20"}
    assert f.places == {"Melbourne Zoo", "Brunswick", "-37.76"}


def test_fidelity_catches_a_summary_that_drops_an_id_or_a_date():
    m1 = extract_facts("u1/1001: time=2014-04-20 10:05:00; address=Melbourne Zoo, Parkville", ALBUM)
    m2 = extract_facts("u1/2001: time=2014-06-14 09:40:00; address=Yarra Valley farm, Healesville", ALBUM)
    full = "Anchor u1/1001 at Melbourne Zoo on 2014-04-20; farm photo u1/2001 on 2014-06-14 at Yarra Valley farm."
    assert fidelity([m1, m2], full).loss == 0.0
    no_id = full.replace("u1/2001", "a farm photo")
    r = fidelity([m1, m2], no_id)
    assert r.loss == 0.5 and r.missing == {1: ["u1/2001"]}
    no_date = full.replace("2014-04-20", "that day")
    r = fidelity([m1, m2], no_date)
    assert r.preserved == 1 and r.missing == {0: ["2014-04-20"]}
    assert fidelity([m1, m2], "searched a bit").loss == 1.0
    assert fidelity([extract_facts("nothing here", ALBUM)], "x").messages == 0  # no metadata, no loss


# --------------------------------------------------------------------------- working memory in the loop


def run_agent(agent_replies, memory_reply, *, limit, tau=0.5, structured=True, summaries=("digest", "session",
              "working"), extra_tools=()):
    agent = ScriptedChatModel(default=sequence(*agent_replies))
    mem_model = ScriptedChatModel(default=memory_reply)
    wm = WorkingMemory(Role("memory", mem_model), CONDENSE_PROMPT, context_limit=limit, compress_at=1.0,
                       structured=structured, summaries=summaries, tau=tau, known_ids=ALBUM)
    tools = [FakeSearch(), FakeMetadata(), *(t(wm) for t in extra_tools)]
    runtime = AgentRuntime(Role("agent", agent), tools, "You search photos.", max_turns=8, hooks=[wm],
                           known_ids=ALBUM)
    trace = Trace()
    with trace.activate():
        run = runtime.run("the birds on the day of the zoo")
    return run, trace, wm, agent, mem_model


AGENT = [
    call("ImageSearch", query="birds zoo"),
    call("GetMetadata", photo_ids=["u1/1001", "u1/1002"]),
    call("GetMetadata", photo_ids=["u1/2001"]),
    'The final answer is: ["u1/1001", "u1/1002"]',
]


def summary(digest: str) -> str:
    return json.dumps({"digest": digest, "session": "search by keywords worked", "working": "answer now"})


def test_no_compression_below_the_limit():
    run, trace, wm, _, mem = run_agent(AGENT, summary("x"), limit=100_000)
    assert run.answer == ["u1/1001", "u1/1002"] and wm.compressions == 0 and not mem.calls
    assert not [s for s in trace.steps if s.name == "memory.condense"]


def test_compression_near_the_limit_keeps_a_faithful_summary_only():
    good = summary("searched birds zoo: u1/1001, u1/1002 at Melbourne Zoo on 2014-04-20; "
                   "u1/2001 at Yarra Valley farm on 2014-06-14")
    run, trace, wm, agent, mem = run_agent(AGENT, good, limit=60)
    assert wm.compressions >= 1 and run.answer == ["u1/1001", "u1/1002"]
    step = next(s for s in trace.steps if s.name == "memory.condense")
    assert step.outputs["compressed"] and step.outputs["fidelity"]["loss"] == 0.0
    assert step.outputs["kept_verbatim"] == 0
    assert step.model_calls == 1  # the compressor's call is in the step
    # The three summaries were asked for, and the agent continued from the working memory.
    assert all(k in mem.prompts()[0] for k in ("digest:", "session:", "working:"))
    later = agent.prompts()[-1]
    assert "[WORKING MEMORY" in later and "[DIGEST]" in later and "[WORKING]" in later


def test_lossy_summary_keeps_the_recent_metadata_messages_verbatim():
    lossy = summary("looked at some zoo photos")  # drops every id, date and place
    _, trace, _, agent, _ = run_agent(AGENT, lossy, limit=60)
    steps = [s for s in trace.steps if s.name == "memory.condense"]
    last = steps[-1]
    assert last.outputs["fidelity"]["loss"] > 0.5 and last.outputs["kept_verbatim"] >= 1
    assert any("kept" in n for n in last.notes)
    memory_msg = agent.prompts()[-1]
    assert "kept verbatim" in memory_msg and "2014-04-20" in memory_msg
    # With tau = 1 (nothing is ever unreliable) the same summary keeps nothing verbatim.
    _, trace2, _, agent2, _ = run_agent(AGENT, lossy, limit=60, tau=1.0)
    assert all(s.outputs["kept_verbatim"] == 0 for s in trace2.steps if s.name == "memory.condense")
    assert "kept verbatim" not in agent2.prompts()[-1]


def test_summary_ablation_and_freeform_compression():
    _, trace, _, _, mem = run_agent(AGENT, json.dumps({"digest": "u1/1001 2014-04-20"}), limit=60,
                                    summaries=("digest",))
    assert "session:" not in mem.prompts()[0] and "digest:" in mem.prompts()[0]
    _, trace, _, agent, mem = run_agent(AGENT, "We searched birds and found two zoo photos.", limit=60,
                                        structured=False)
    step = next(s for s in trace.steps if s.name == "memory.condense")
    assert "fidelity" not in step.outputs  # the baseline's free-form compression has no validator
    assert "found two zoo photos" in agent.prompts()[-1]


def test_memory_condense_tool_compresses_on_request():
    replies = [call("ImageSearch", query="birds"), call("MemoryCondense"), 'The final answer is: ["u1/1001"]']
    good = summary("u1/1001 u1/1002")
    run, trace, wm, _, _ = run_agent(replies, good, limit=100_000, extra_tools=(MemoryCondense,))
    step = next(s for s in trace.steps if s.name == "memory.condense")
    assert step.inputs["trigger"] == "requested by the agent" and wm.compressions == 1
    assert run.answer == ["u1/1001"]


# --------------------------------------------------------------------------- episodic memory


AUDIT_PROMPT = "[REFLECTION] proposed $pred_ids$extra_notes. Reply with JSON."
FEEDBACK = "[EPISODIC AUDIT failed for $pred_ids]\n$verdict\nTried: $used. Try: $keywords."


def audit(verdict: str, **kw: Any) -> str:
    """An auditor's reply: every check ok for "pass"; for "revise" the TARGET check fails (unless ``remove``
    alone fails it, with ``target_ok``)."""
    passed = verdict == "pass"
    return json.dumps({"anchor": {"note": "the right anchor", "ok": True},
                       "constraint": {"note": "date range used", "ok": True},
                       "target": {"note": kw.get("target", "fits"), "ok": kw.get("target_ok", passed)},
                       "completeness": {"note": "nothing missing", "ok": True},
                       "new_keywords": kw.get("keywords", []), "remove": kw.get("remove", [])})


def run_audited(agent_replies, audit_replies, max_audits=None, max_turns=8):
    agent = ScriptedChatModel(default=sequence(*agent_replies))
    auditor = ScriptedChatModel(default=sequence(*audit_replies))
    reloaded: list[list[str]] = []

    def reload(ids):
        reloaded.append(list(ids))
        return [(i, ImagePart(description=f"photo {i}")) for i in ids]

    epi = EpisodicMemory(Role("auditor", auditor), AUDIT_PROMPT, FEEDBACK, reload, max_audits=max_audits)
    runtime = AgentRuntime(Role("agent", agent), [FakeSearch(), FakeMetadata()], "You search photos.",
                           max_turns=max_turns, hooks=[epi], known_ids=ALBUM)
    trace = Trace()
    with trace.activate():
        run = runtime.run("the birds on the zoo day")
    return run, trace, agent, auditor, reloaded


def test_failed_audit_starts_a_new_round_until_one_passes():
    replies = [call("ImageSearch", query="zoo animals"), 'The final answer is: ["u1/2001"]',
               call("ImageSearch", query="bird"), 'The final answer is: ["u1/1001", "u1/1002"]']
    run, trace, agent, auditor, reloaded = run_audited(
        replies, [audit("revise", target="u1/2001 is not a bird", keywords=["bird"], remove=["u1/2001"]),
                  audit("pass")])
    assert run.answer == ["u1/1001", "u1/1002"] and run.source == "model"
    audits = [s for s in trace.steps if s.name == "memory.audit"]
    assert [a.outputs["decision"] for a in audits] == ["revise", "pass"]
    assert all(a.outputs["decided_by"] == "checks" for a in audits)
    assert reloaded == [["u1/2001"], ["u1/1001", "u1/1002"]]  # the proposed photos were reloaded each time
    assert "photo u1/2001" in auditor.prompts()[0]  # ...and reached the auditor (caption mode: surrogate)
    feedback = agent.prompts()[2]  # the agent's third call reads the audit's verdict
    assert "[EPISODIC AUDIT failed" in feedback and "TARGET (PROBLEM): u1/2001 is not a bird" in feedback
    assert '"zoo animals"' in feedback and '"bird"' in feedback  # tried vs. suggested keywords
    assert "photos that do not fit the target: u1/2001" in feedback
    turn2 = next(s for s in trace.steps if s.name == "turn.2")
    assert turn2.outputs["rejected_by"] == "EpisodicMemory"


def test_audit_stops_at_max_audits_and_at_the_budget():
    replies = ['The final answer is: ["u1/1001"]']
    run, _, _, auditor, _ = run_audited(replies, [audit("revise")], max_audits=2)
    assert run.answer == ["u1/1001"] and len(auditor.calls) == 2
    # Unbounded audits that always fail: the turn budget ends the search with the model's answer.
    run, _, _, auditor, _ = run_audited(replies, [audit("revise")], max_turns=3)
    assert run.answer == ["u1/1001"] and len(auditor.calls) == 2  # no audit on the last turn


def test_unreadable_audit_accepts_the_answer():
    run, trace, _, _, _ = run_audited(['The final answer is: ["u1/1002"]'], ["not json at all"])
    assert run.answer == ["u1/1002"]
    step = next(s for s in trace.steps if s.name == "memory.audit")
    assert step.outputs["parsed"] is False and step.notes


def test_the_decision_is_derived_from_the_checks():
    """A verdict and a decision that disagree cannot be written: there is no decision field; the audit passes
    exactly when every check is ok and no photo is to be removed (seen with the offline model: "these photos must
    go" beside "decision: pass")."""
    from imagent.methods.album.memory import AUDIT_SCHEMA, audit_decision, audit_schema

    assert "decision" not in AUDIT_SCHEMA["properties"] and "verdict" not in AUDIT_SCHEMA["properties"]
    assert all(AUDIT_SCHEMA["properties"][k]["properties"]["ok"] == {"type": "boolean"}
               for k in ("anchor", "constraint", "target", "completeness"))
    fine = {k: {"note": "fine", "ok": True} for k in ("anchor", "constraint", "target", "completeness")}
    assert audit_decision(fine, ["a"]) == ("pass", dict.fromkeys(fine, True), [])
    assert audit_decision({**fine, "remove": ["a", "zz"]}, ["a"])[0::2] == ("revise", ["a"])  # zz: not proposed
    assert audit_decision({**fine, "completeness": {"note": "fine", "ok": False}}, ["a"])[0] == "revise"
    assert audit_decision({**fine, "anchor": "ok"}, ["a"])[0] == "revise"  # a check that is not an object fails
    # With the audit's prompt: a failure whose note only copies the prompt's words is not counted; one that says
    # something of its own (a photo, what it shows) is.
    from imagent.methods.album.memory import own_words

    prompt = "3. TARGET: Does each proposed photo satisfy the TARGET itself? Photos that only match the anchor must go."
    parroted = {**fine, "target": {"note": "Each proposed photo that only match the anchor must go", "ok": False}}
    grounded = {**fine, "target": {"note": "photo a shows a cow, not a bird", "ok": False}}
    assert own_words(parroted["target"]["note"], prompt) == [] and own_words("the cow", prompt) == ["cow"]
    assert audit_decision(parroted, ["a"])[0] == "revise" and audit_decision(parroted, ["a"], prompt)[0] == "pass"
    assert audit_decision(grounded, ["a"], prompt)[0] == "revise"
    assert audit_decision({**parroted, "remove": ["a"]}, ["a"], prompt)[0] == "revise"  # a removal always counts
    # ... at least ``min_own`` words of its own: a "no" before the prompt's words says nothing either
    prompt4 = "4. COMPLETENESS: Were all photos of the constrained day, place or trip that show the TARGET included?"
    no = {**fine, "completeness": {"note": "No photos of the constrained day that show the TARGET included",
                                   "ok": False}}
    assert own_words(no["completeness"]["note"], prompt4) == ["no"]
    assert audit_decision(no, ["a"], prompt4, min_own=1)[0] == "revise"
    assert audit_decision(no, ["a"], prompt4, min_own=2)[0] == "pass"
    assert audit_decision(no, ["a"], prompt4, min_own=0)[0] == "revise"  # 0: every failed check counts
    assert audit_decision(grounded, ["a"], prompt, min_own=2)[0] == "revise"
    assert audit_schema(["a", "b", "a"])["properties"]["remove"]["items"]["enum"] == ["a", "b"]
    # Through the loop: "remove" alone fails an audit whose four checks say ok, and the feedback names it.
    replies = ['The final answer is: ["u1/1001", "u1/2001"]', call("ImageSearch", query="heron"),
               'The final answer is: ["u1/1001", "u1/1002"]']
    run, trace, agent, _, _ = run_audited(replies, [audit("revise", target_ok=True, remove=["u1/2001"]),
                                                   audit("pass")])
    audits = [s for s in trace.steps if s.name == "memory.audit"]
    assert [a.outputs["decision"] for a in audits] == ["revise", "pass"]
    assert audits[0].outputs["checks_ok"] == dict.fromkeys(fine, True) and audits[0].outputs["remove"] == ["u1/2001"]
    assert "photos that do not fit the target: u1/2001" in agent.prompts()[1]
    assert run.answer == ["u1/1001", "u1/1002"]
    from imagent.methods.album import load_prompt

    assert '"ok": true or false' in load_prompt("photocraft/audit.txt")


def test_working_memory_rejects_unknown_summary_kinds():
    with pytest.raises(ValueError, match="summaries"):
        WorkingMemory(None, "", summaries=("digest", "plan"))


def test_compression_in_context_reads_the_history_where_it_is():
    """The compressor is the agent's own model: the request follows the conversation (a KV cache reuses the
    prefix) instead of a fresh prompt with the history rendered as text; the next prompt starts the same."""
    agent = ScriptedChatModel(default=sequence(*AGENT))
    mem = ScriptedChatModel(default=summary("u1/1001 u1/1002 Melbourne Zoo 2014-04-20 u1/2001 Yarra Valley farm "
                                            "2014-06-14"))
    wm = WorkingMemory(Role("memory", mem), CONDENSE_PROMPT, context_limit=2000, compress_at=0.04, known_ids=ALBUM,
                       in_context=True)
    runtime = AgentRuntime(Role("agent", agent), [FakeSearch(), FakeMetadata()], "You search photos.", max_turns=8,
                           hooks=[wm], known_ids=ALBUM)
    trace = Trace()
    with trace.activate():
        run = runtime.run("the birds on the day of the zoo")
    assert run.answer == ["u1/1001", "u1/1002"] and wm.compressions >= 1
    step = next(s for s in trace.steps if s.name == "memory.condense")
    assert step.inputs["in_context"] is True
    messages = mem.calls[0][0]
    assert messages[0].text.startswith("You search photos.") and len(messages) > 3  # the conversation, then the request
    assert WorkingMemory.IN_CONTEXT_HISTORY in messages[-1].text and "tool_response" not in messages[-1].text
    after = agent.calls[-1][0]  # the agent's next prompt: system, task, summary (same prefix as the request)
    assert [m.text for m in after[:2]] == [m.text for m in messages[:2]] and "[WORKING MEMORY" in after[2].text
    # a window without room for the request and its reply: the history goes as text, as before
    wm2 = WorkingMemory(Role("memory", mem), CONDENSE_PROMPT, context_limit=60, compress_at=1.0, known_ids=ALBUM,
                        in_context=True)
    agent2 = ScriptedChatModel(default=sequence(*AGENT))
    runtime2 = AgentRuntime(Role("agent", agent2), [FakeSearch(), FakeMetadata()], "You search photos.", max_turns=8,
                            hooks=[wm2], known_ids=ALBUM)
    trace2 = Trace()
    with trace2.activate():
        runtime2.run("the birds on the day of the zoo")
    step2 = next(s for s in trace2.steps if s.name == "memory.condense")
    assert step2.inputs["in_context"] is False and len(mem.calls[-1][0]) == 1
    assert "</tool_response>" in mem.calls[-1][0][0].text  # the history rendered into the request


def test_the_audit_prompt_is_fitted_to_the_window():
    answer = json.dumps(sorted(ALBUM))
    long = "a long description of the photo " * 7  # ~220 characters a photo

    def audited(limit):
        auditor = ScriptedChatModel(default=audit("pass"))
        reloaded: list[list[str]] = []

        def reload(ids):
            reloaded.append(list(ids))
            return [(i, ImagePart(description=long)) for i in ids]

        epi = EpisodicMemory(Role("auditor", auditor), AUDIT_PROMPT, FEEDBACK, reload, context_limit=limit)
        runtime = AgentRuntime(Role("agent", ScriptedChatModel(default=sequence(
            call("ImageSearch", query="birds"), f"The final answer is: {answer}"))), [FakeSearch(), FakeMetadata()],
            "You search photos.", max_turns=8, hooks=[epi], known_ids=ALBUM)
        trace = Trace()
        with trace.activate():
            run = runtime.run("the birds on the zoo day")
        return run, reloaded, auditor, next(s for s in trace.steps if s.name == "memory.audit")

    run, reloaded, auditor, step = audited(None)
    assert run.answer == sorted(ALBUM) and [len(r) for r in reloaded] == [5]
    assert not any("would not fit" in n for n in step.notes)
    _, reloaded, auditor, step = audited(1000)  # 5 photos do not fit beside the verdict's room: 3 do
    assert [len(r) for r in reloaded] == [5, 3] and "(only the first 3 proposed photos are shown)" in \
        auditor.calls[0][0][-1].text
    _, reloaded, auditor, step = audited(700)  # not even 3: the history goes as text, cut to fit
    assert any("would not fit" in n for n in step.notes)
    messages = auditor.calls[0][0]
    assert len(messages) == 4 and messages[2].text.startswith("THE SEARCH SO FAR")


def test_the_audit_reads_the_days_and_places_the_answer_spans():
    from datetime import datetime

    from imagent.core.types import ImageRecord
    from imagent.methods.album.memory import AUDIT_CHECK_CHARS, AUDIT_SCHEMA, answer_spread

    def part(pid: str) -> ImagePart:
        when, where = META[pid]
        return ImagePart(record=ImageRecord(id=pid, path="", captions=["a bird"], address=where,
                                            taken_time=datetime.fromisoformat(when)))

    assert answer_spread([part("u1/1001"), part("u1/1002")]) == (
        "The proposed photos span 1 day(s): 2014-04-20 and 1 place(s): Melbourne Zoo.")
    assert answer_spread([part("u1/2001"), part("u1/1001")]) == (
        "The proposed photos span 2 day(s): 2014-04-20, 2014-06-14 and 2 place(s): Yarra Valley farm; "
        "Melbourne Zoo.")
    assert answer_spread([ImagePart(description="a web image")]) == ""
    auditor = ScriptedChatModel(default=sequence(audit("pass")))
    epi = EpisodicMemory(Role("auditor", auditor), AUDIT_PROMPT, FEEDBACK,
                         lambda ids: [(i, part(i)) for i in ids])
    runtime = AgentRuntime(Role("agent", ScriptedChatModel(default=sequence(
        call("ImageSearch", query="bird"), 'The final answer is: ["u1/1001", "u1/1002"]'))),
        [FakeSearch()], "You search photos.", max_turns=4, hooks=[epi], known_ids=ALBUM)
    trace = Trace()
    with trace.activate():
        runtime.run("the birds on the zoo day")
    assert "span 1 day(s): 2014-04-20 and 1 place(s): Melbourne Zoo." in auditor.prompts()[0]
    assert all(AUDIT_SCHEMA["properties"][k]["properties"]["note"]["maxLength"] == AUDIT_CHECK_CHARS
               for k in ("anchor", "constraint", "target", "completeness"))
