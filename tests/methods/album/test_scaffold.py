"""The album agents' one scaffold policy (methods/album/scaffold.py) on the JSON protocol, over a real album in
caption mode with the scripted chat backend: the query split, the progress derived from typed tool results, the
directives (accept, send back with a next call, answer only), the profiles and who chose an answer."""

from __future__ import annotations

import json

import pytest

from imagent.agents import AgentRuntime
from imagent.core.trace import Trace
from imagent.methods.album.scaffold import (
    NONE,
    PLAN_SCHEMA,
    SMALL,
    Accept,
    AnswerOnly,
    Progress,
    QueryPlan,
    Scaffold,
    SendBack,
    advance,
    answer_origin,
    decide,
    describe_plan,
    resolve_scaffold,
    scaffold_from_settings,
)
from imagent.methods.album.tools import AlbumToolsConfig, FilterResult, SearchResult, album_tools
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Role


def scripted(replies):
    """A model answering with ``replies`` in order (the last one repeats)."""
    seq = list(replies)

    def reply(_text):
        return seq.pop(0) if len(seq) > 1 else seq[0]

    return ScriptedChatModel(default=reply)


def json_turn(tool, **arguments):
    return json.dumps({"thought": "t", "tool": tool, "arguments": arguments})


def answer(*ids):
    return json.dumps({"thought": "t", "final_answer": list(ids)})


def offered(schema):
    """{tool name or 'answer': its schema} of a JSON turn schema."""
    out = {}
    for alt in schema.get("oneOf", [schema]):
        props = alt["properties"]
        out[props["tool"]["const"] if "tool" in props else "answer"] = alt
    return out


def fixed(schema, tool):
    return offered(schema)[tool]["properties"]["arguments"]["properties"]


def run_scaffolded(known_album, replies, query="the heron on the penguin day", profile=SMALL):
    """A JSON-protocol agent with the scaffold of ``profile`` over ``replies`` (the split's reply first when the
    profile splits the query); the album tools as that profile sets them, described (caption mode)."""
    tools = album_tools(known_album, AlbumToolsConfig(describe=True, anchor_filters=profile.anchor_filters,
                                                      clear_matches=profile.clear_matches_line))
    model = scripted(replies)
    role = Role("agent", model)
    scaffold = Scaffold(profile, role, query)
    runtime = AgentRuntime(role, tools, "You find photos.", known_ids=known_album, tool_mode="json",
                           hooks=[scaffold])
    trace = Trace()
    with trace.activate():
        run = runtime.run(query)
    return run, scaffold, model, trace


def events(scaffold):
    return [(e.kind, e.reason) for e in scaffold.events]


# --------------------------------------------------------------------------- steering a circling model


def test_a_circling_small_model_is_steered_along_the_chain_of_its_own_query_split(known_album):
    search = json_turn("ImageSearch", query="penguin")
    run, scaffold, model, _ = run_scaffolded(known_album, [
        json.dumps({"anchor": "penguin", "same": "day", "target": "heron"}),
        search, search,  # the repeat is refused: steered to FilterMetadata, same day
        json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
        json_turn("GetMetadata", photo_ids=["penguin"]), json_turn("GetMetadata", photo_ids=["penguin"]),
        json_turn("ImageSearch", query="heron", search_within="d"),
        json_turn("ImageSearch", query="heron", search_within="d"),  # the chain is done: answer now
        answer("heron")])
    assert run.answer == ["heron"] and scaffold.plan == QueryPlan("penguin", "day", "heron")
    assert events(scaffold) == [("send_back", "steer"), ("send_back", "steer"), ("answer_only", "done")]
    schemas = [params.json_schema for _, params in model.calls]
    assert schemas[0] == PLAN_SCHEMA  # the split: one grammar-constrained call
    assert set(offered(schemas[3])) == {"FilterMetadata"}  # calls 1 and 2 are the searches
    assert fixed(schemas[3], "FilterMetadata")["same"]["prefixItems"] == [{"const": "day"}]
    assert set(offered(schemas[6])) == {"ImageSearch"}
    assert fixed(schemas[6], "ImageSearch")["query"] == {"const": "heron"}
    assert fixed(schemas[6], "ImageSearch")["search_within"] == {"const": "d"}
    assert "answer" in offered(schemas[7])  # the chain is done: free again
    # ... and repeating a call then ends the search with the request for the answer (one call, no tools)
    assert len(model.calls) == 9 and run.state.guards.answer_due and run.forced
    assert set(offered(schemas[8])) == {"answer"} and run.turns == 8
    assert run.reason == "the model's final answer after a repeated call once the search was done"
    assert scaffold.counts() == {"scaffold.query_split": 1, "scaffold.send_back.steer": 2,
                                 "scaffold.answer_only.done": 1}


def test_a_chain_that_ran_stays_done_when_the_model_narrows_to_another_anchor(known_album):
    other = json_turn("FilterMetadata", same_as_photo="heron", same=["day"], save_as="e")
    run, scaffold, model, _ = run_scaffolded(known_album, [
        json.dumps({"anchor": "penguin", "same": "day", "target": "heron"}),
        json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
        json_turn("ImageSearch", query="heron", search_within="d"),
        other, other,  # a new anchor, then its repeat: the chain is not reopened on "e"
        answer("heron")])
    assert run.answer == ["heron"] and events(scaffold) == [("answer_only", "done")]
    assert run.state.guards.answer_due and run.forced and len(model.calls) == 6
    assert set(offered(model.calls[5][1].json_schema)) == {"answer"}
    asked = model.calls[5][0][-1].text  # the request restates the chain's result: its search's clear matches
    assert asked.startswith("Your last tool call repeated an earlier one after your search was done")
    assert "Your search for 'heron' within 'd' found these clear matches, best first: " in asked
    within = run.state.turns[1].calls[0][1].result
    assert within.matches and scaffold.events[0].found == within.matches
    assert ", ".join(within.matches) in asked


def test_a_split_without_an_anchor_steers_a_circling_model_to_its_target_search_then_to_the_answer(known_album):
    other = json_turn("ImageSearch", query="penguin")
    run, scaffold, model, _ = run_scaffolded(known_album, [
        json.dumps({"anchor": "penguin", "same": "none", "target": "heron"}),
        other, other,  # the repeat is refused: steered to the target's search
        json_turn("ImageSearch", query="heron"),
        json_turn("GetMetadata", photo_ids=["heron"]), json_turn("GetMetadata", photo_ids=["heron"]),
        answer("heron")])
    assert run.answer == ["heron"] and events(scaffold) == [("send_back", "steer"), ("answer_only", "done")]
    assert fixed(model.calls[3][1].json_schema, "ImageSearch")["query"] == {"const": "heron"}
    assert set(offered(model.calls[3][1].json_schema)) == {"ImageSearch"}
    assert "answer" in offered(model.calls[4][1].json_schema)
    assert run.state.guards.answer_due and run.forced and len(model.calls) == 7
    assert "Your search for 'heron' found these clear matches, best first: " in model.calls[6][0][-1].text


def test_a_model_that_does_not_circle_is_left_alone(known_album):
    run, scaffold, model, _ = run_scaffolded(known_album, [
        json.dumps({"anchor": "penguin", "same": "none", "target": "heron"}),
        json_turn("ImageSearch", query="penguin"), json_turn("ImageSearch", query="heron"), answer("heron")])
    assert run.answer == ["heron"] and not run.forced and scaffold.events == []
    assert not run.state.guards.answer_due and len(model.calls) == 4


# --------------------------------------------------------------------------- answers sent back


def test_unnarrowed_and_unsearched_answers_are_sent_back_once_naming_the_next_call(known_album):
    run, scaffold, model, trace = run_scaffolded(known_album, [
        json.dumps({"anchor": "little penguin", "same": "day", "target": "bird"}),
        json_turn("ImageSearch", query="little penguin"), json_turn("ImageSearch", query="bird"),
        answer("crow"),  # nothing narrowed: back, FilterMetadata with the anchor's own clear matches
        json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
        answer("heron"),  # narrowed, not searched within: back, ImageSearch for the target within it
        json_turn("ImageSearch", query="bird", search_within="d"),
        answer("heron"), answer("heron")], query="the birds on the day I saw the little penguin")
    anchor = run.state.turns[0].calls[0][1].result
    assert anchor.matches and anchor.matches[0] == "penguin" and "crow" not in anchor.matches
    assert events(scaffold)[:2] == [("send_back", "scope"), ("send_back", "target")]
    narrowing = fixed(model.calls[4][1].json_schema, "FilterMetadata")
    assert narrowing["same_as_photo"] == {"enum": list(anchor.matches)}
    assert narrowing["same"]["prefixItems"] == [{"const": "day"}]
    target = fixed(model.calls[6][1].json_schema, "ImageSearch")
    assert target["query"] == {"const": "bird"} and target["search_within"] == {"const": "d"}
    feedback = [t.feedback for t in run.state.turns if t.rejected_by == "Scaffold"]
    assert feedback[:2] == [
        "Not narrowed yet. Call FilterMetadata with same_as_photo = the photo of the little penguin "
        f"({' or '.join(anchor.matches[:5])}, found by your search) and same = [\"day\"], then search for 'bird' "
        "within it.",
        'Now call ImageSearch with {"query": "bird", "search_within": "d"}, then answer with the photos of that '
        "list that show bird."]
    task = run.state.messages[1].text
    assert task.endswith("Your plan: find the anchor 'little penguin'; keep the photos of its same day "
                         "(FilterMetadata same_as_photo); search for the target 'bird' within them.")
    assert [s.outputs for s in trace.steps if s.name == "plan"] == [
        {"parsed": True, "anchor": "little penguin", "same": "day", "target": "bird"}]


def test_an_answer_that_leaves_out_clear_matches_of_the_chain_is_sent_back_once_for_the_answer_again(known_album):
    def episode(answers):
        return run_scaffolded(known_album, [
            json.dumps({"anchor": "penguin", "same": "day", "target": "sea bird"}),
            json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
            json_turn("ImageSearch", query="sea bird", search_within="d"), *(answer(*a) for a in answers)],
            query="the sea birds on the penguin day")

    probe = episode([["penguin"]])[0].state.turns[1].calls[0][1].result
    matches = list(probe.matches)
    assert len(matches) >= 2, matches  # the fixture's search has more than one clear match
    first, rest = matches[0], matches[1:]
    run, scaffold, model, _ = episode([[first], [first], matches])
    assert run.answer == [first] and len(model.calls) == 5  # sent back once; the second answer stands
    assert run.state.turns[2].rejected_by == "Scaffold" and not run.forced
    told = model.calls[4][0][-1].text
    assert told.startswith("Your search for 'sea bird' within 'd' found these clear matches")
    assert f"Your answer leaves out {', '.join(rest)}." in told
    assert set(offered(model.calls[4][1].json_schema)) == {"answer"}  # the revised answer, no tools
    assert events(scaffold) == [("answer_only", "cover")] and scaffold.events[0].found == probe.matches
    covered, scaffold, model, _ = episode([[*matches, "frog"]])  # more than the matches: it stands
    assert covered.answer == [*matches, "frog"] and len(model.calls) == 4 and scaffold.events == []


def test_a_time_relation_is_narrowed_in_the_photo_form_of_that_relation(known_album):
    """``after``: FilterMetadata with the anchor photo and ``same`` ["after"]; the clear matches of the search within
    those days are what the answer cut names (no code picks a trip)."""
    search = json_turn("ImageSearch", query="tux")
    run, scaffold, model, _ = run_scaffolded(known_album, [
        json.dumps({"anchor": "tux", "same": "after", "target": "bird"}), search, search,
        json_turn("FilterMetadata", same_as_photo="tux", same=["after"], save_as="later"),
        json_turn("ImageSearch", query="bird", search_within="later"), answer("crow"), answer("crow")],
        query="the birds of the days after the tux")
    assert set(offered(model.calls[3][1].json_schema)) == {"FilterMetadata"}
    assert fixed(model.calls[3][1].json_schema, "FilterMetadata")["same"]["prefixItems"] == [{"const": "after"}]
    assert set(run.state.subsets["later"]) == {"penguin", "heron", "duck", "frog", "blackbird", "crow"}
    within = run.state.turns[3].calls[0][1].result
    cover = [e for e in scaffold.events if e.reason == "cover"]
    assert (cover[0].found == within.matches) if set(within.matches) - {"crow"} else not cover


def test_the_split_stands_as_the_model_wrote_it(known_album):
    """No word list second-guesses the model's split: a relation in time it reads into a query is kept."""
    run, scaffold, _, trace = run_scaffolded(known_album, [
        json.dumps({"anchor": "penguin", "same": "after", "target": "bird"}), answer("heron"), answer("heron")],
        query="the birds at the beach where I saw the penguin")
    assert scaffold.plan == QueryPlan("penguin", "after", "bird")
    assert not any(s.notes for s in trace.steps if s.name == "plan")
    run, scaffold, _, trace = run_scaffolded(known_album, ["no json here", "still none",
                                                           json_turn("ImageSearch", query="penguin"),
                                                           answer("penguin"), answer("penguin")])
    assert scaffold.plan is None and scaffold.split_parsed is False and "Your plan" not in run.state.messages[1].text
    assert scaffold.counts()["scaffold.query_split"] == 0
    assert [r for _, r in events(scaffold)] == ["scope"]  # without a split: the generic send-back


# --------------------------------------------------------------------------- the policy as a function


def search(query, within=None, ids=("a", "b", "c"), matches=("a", "b")):
    return SearchResult(query, within, ids, (0.9, 0.8, 0.1)[: len(ids)], ("",) * len(ids), matches, True)


def test_progress_is_derived_from_typed_results_only():
    plan = QueryPlan("red tractor", "device", "kite")
    p = advance(Progress(), plan, [search("red tractor", matches=("k52",)), "not a typed result"])
    assert p == Progress(anchor=("k52",))
    p = advance(p, plan, [FilterResult("device = 'x'", "k52", ("device",), "cam", 3, ("k52", "k60", "p14"))])
    assert p.narrowed and p.unsearched == "cam" and p.target is None
    hit = search("kite", within="cam", matches=("k60", "p14"))
    p = advance(p, plan, [hit])
    assert p.unsearched is None and p.target == hit
    assert advance(Progress(), None, [hit]) == Progress(narrowed=True)  # no split: no anchor, no target


def test_decide_returns_one_typed_directive():
    plan = QueryPlan("red tractor", "device", "kite")
    start = Progress(anchor=("k52",))
    d = decide(SMALL, plan, start, answer=["k52"])
    assert isinstance(d, SendBack) and d.reason == "scope" and d.next_call.tool == "FilterMetadata"
    assert decide(SMALL, plan, start, answer=["k52"], sent=frozenset({"scope"})) == Accept()
    done = Progress(anchor=("k52",), narrowed=True, target=search("kite", "cam", matches=("k60", "p14")))
    cut = decide(SMALL, plan, done, answer=["k60"])
    assert isinstance(cut, AnswerOnly) and cut.found == ("k60", "p14") and "leaves out p14" in cut.message
    assert decide(SMALL, plan, done, answer=["k60", "p14"]) == Accept()
    assert decide(SMALL, plan, done, repeated=True) == AnswerOnly("done", cut.message.split(" Your answer")[0],
                                                                  ("k60", "p14"))
    assert decide(SMALL, plan, done) == Accept()  # a turn that made progress
    for d in (decide(NONE, plan, start, answer=["k52"]), decide(NONE, plan, done, answer=["k60"]),
              decide(NONE, plan, done, repeated=True)):
        assert d == Accept()  # the papers' protocol: the model decides every step
    # another visit: the photo form's place on other days, in the task message and in the narrowing it names
    visit = QueryPlan("red tractor", "other visit", "kite")
    assert describe_plan(visit) == ("Your plan: find the anchor 'red tractor'; keep the photos of its place on other "
                                    "days (FilterMetadata same_as_photo, same [\"place\", \"other_day\"]); search for "
                                    "the target 'kite' within them.")
    assert decide(SMALL, visit, start, answer=["k52"]).next_call.arguments["same"] == ["place", "other_day"]
    assert describe_plan(QueryPlan("-", "none", "kite")) == "Your plan: no anchor; search for the target 'kite'."
    assert decide(SMALL, QueryPlan("-", "none", "kite"), Progress(), answer=["k52"]) == Accept()  # nothing to narrow


# --------------------------------------------------------------------------- profiles


def test_the_profile_follows_the_agents_protocol_and_the_identity_resolves_it_the_same_way():
    assert resolve_scaffold("auto", "json") is SMALL and resolve_scaffold("auto", "native") is NONE
    assert resolve_scaffold("auto", "text") is NONE and resolve_scaffold("none", "json") is NONE
    assert resolve_scaffold("small", "native") is SMALL
    with pytest.raises(ValueError, match="auto, none or small"):
        resolve_scaffold("medium", "json")
    offline = {"roles": {"default": "offline"}, "models": {"offline": {"backend": "llama.cpp"}}}
    served = {"roles": {"default": "x", "agent": "vllm"}, "models": {"x": {"backend": "llama.cpp"},
                                                                     "vllm": {"backend": "openai"}}}
    assert scaffold_from_settings({"scaffold": "auto"}, offline) == "small"
    assert scaffold_from_settings({"scaffold": "auto"}, served) == "none"  # the agent role's model decides
    assert scaffold_from_settings({"scaffold": "auto", "tool_mode": "json"}, served) == "small"
    assert scaffold_from_settings({"scaffold": "none"}, offline) == "none"
    assert scaffold_from_settings({"tau": 0.15}, offline) is None  # a method without a scaffold
    assert SMALL.audits(None) == 1 and SMALL.audits(3) == 1 and NONE.audits(None) is None and NONE.audits(2) == 2


def test_the_none_profile_leaves_every_step_to_the_model(known_album):
    run, scaffold, model, trace = run_scaffolded(known_album, [
        json_turn("ImageSearch", query="penguin"), answer("penguin")], profile=NONE)
    assert run.answer == ["penguin"] and run.turns == 2 and scaffold.events == [] and scaffold.plan is None
    assert not any(s.name == "plan" for s in trace.steps) and len(model.calls) == 2  # no split call
    assert "Clear matches" not in model.calls[1][0][-1].text
    assert "FilterMetadata" in offered(model.calls[1][1].json_schema)
    assert "expression" in fixed(model.calls[1][1].json_schema, "FilterMetadata")  # the written form too


# --------------------------------------------------------------------------- who chose the answer


def test_answer_origin_says_whether_code_or_the_model_chose_the_answer():
    lists = [("a", "b"), ("c", "d", "e")]
    assert answer_origin(["b", "a"], lists) == ("code", 1.0)  # equals a list code computed
    assert answer_origin(["x", "y"], lists) == ("model", 0.0)  # on no such list
    assert answer_origin(["a", "x"], lists) == ("mixed", 0.5)
    assert answer_origin(["c", "d"], lists) == ("mixed", 1.0)  # a part of one list: the model cut it
    assert answer_origin(["x"], []) == ("model", 0.0)
    assert answer_origin(["x"], [], fallback=True) == ("code", 1.0)  # a fallback's candidates are code's
