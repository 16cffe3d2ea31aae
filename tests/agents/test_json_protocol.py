"""The JSON tool protocol (grammar-constrained turns for small local models), the compact prompt with its
worked example, function-call syntax in the text protocol, and the search-first rule; scripted backend,
plus llama.cpp's own JSON-schema grammar converter on the schemas the runtime sends."""

from __future__ import annotations

import json

import pytest

from imagent.agents import AgentRuntime
from imagent.agents.album_tools import AlbumToolsConfig, album_tools
from imagent.agents.protocol import (
    fix_arguments,
    json_turn_schema,
    parse_json_turn,
    parse_tool_calls,
    render_worked_example,
)
from imagent.agents.runtime import SEARCH_FIRST
from imagent.core.trace import Trace
from imagent.methods.photocraft import WORKED_EXAMPLE
from imagent.models.roles import Role

from .test_runtime import ALBUM, Search, call, run_agent, scripted, turn_steps


def alternatives(schema):
    return schema.get("oneOf", [schema])


def offered(schema):
    """{tool name or 'answer': its schema} of a turn schema."""
    out = {}
    for alt in alternatives(schema):
        props = alt["properties"]
        out[props["tool"]["const"] if "tool" in props else "answer"] = alt
    return out


def test_the_turn_schema_offers_only_what_can_be_used(known_album):
    tools = album_tools(known_album)
    first = offered(json_turn_schema(tools, [], []))
    # nothing seen yet: no answer and no tool that needs a photo id; no subset to search within
    assert set(first) == {"ImageSearch", "FilterMetadata"}
    search = first["ImageSearch"]["properties"]["arguments"]
    assert set(search["properties"]) == {"query", "top_k"} and search["additionalProperties"] is False
    assert search["properties"]["query"]["maxLength"] <= 160  # bounded: a small model loops in unbounded strings
    assert first["ImageSearch"]["required"] == ["thought", "tool", "arguments"]

    later = offered(json_turn_schema(tools, ["penguin", "heron"], ["that_day"]))
    assert set(later) == {"ImageSearch", "GetMetadata", "FilterMetadata", "ViewPhotos", "answer"}
    assert later["answer"]["properties"]["final_answer"]["items"] == {"enum": ["penguin", "heron"]}
    assert later["GetMetadata"]["properties"]["arguments"]["properties"]["photo_ids"]["items"] == {
        "enum": ["penguin", "heron"]}
    assert later["ImageSearch"]["properties"]["arguments"]["properties"]["search_within"] == {"enum": ["that_day"]}
    assert later["ImageSearch"]["properties"]["arguments"]["properties"]["visual_cue"] == {
        "enum": ["penguin", "heron"]}

    fixed_k = album_tools(known_album, AlbumToolsConfig(grammar_top_k=False))[0]  # a small model's: top 20 always
    assert set(fixed_k.grammar_parameters([], [])["properties"]) == {"query"} and "top_k" in fixed_k.parameters[
        "properties"]

    final = json_turn_schema(tools, ["penguin"], [], tools_allowed=False)
    assert "oneOf" not in final and set(final["required"]) == {"thought", "final_answer"}
    with pytest.raises(ValueError, match="nothing to offer"):
        json_turn_schema(tools, [], [], tools_allowed=False)


def test_llama_cpp_compiles_the_turn_schemas_into_grammars(known_album):
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    tools = album_tools(known_album)
    cases = [(json_turn_schema(tools, [], []), "ImageSearch", "final_answer"),
             (json_turn_schema(tools, known_album.ids, ["a", "b.c"]), "final_answer", None),
             (json_turn_schema(tools, ["penguin"], [], tools_allowed=False), "final_answer", "ImageSearch")]
    for schema, present, absent in cases:
        gbnf = grammar.json_schema_to_gbnf(json.dumps(schema))
        assert gbnf.startswith("root") or "\nroot" in gbnf
        assert present in gbnf and (absent is None or absent not in gbnf)


def test_parse_json_turn_reads_calls_answers_and_reports_garbage():
    thought, calls, answer = parse_json_turn('{"thought": "find it", "tool": "ImageSearch", '
                                             '"arguments": {"query": "birds"}}')
    assert thought == "find it" and answer is None
    assert [(c.name, c.arguments, c.error) for c in calls] == [("ImageSearch", {"query": "birds"}, None)]
    thought, calls, answer = parse_json_turn('{"thought": "done", "final_answer": ["p2", "p2", "p3"]}')
    assert (thought, calls, answer) == ("done", [], ["p2", "p3"])
    _, calls, answer = parse_json_turn("I think the answer is the birds")
    assert answer is None and len(calls) == 1 and "not a JSON object" in calls[0].error


def json_turn(tool=None, thought="t", **arguments):
    return json.dumps({"thought": thought, "tool": tool, "arguments": arguments})


def test_the_runtime_speaks_the_json_protocol_with_a_grammar_each_turn():
    model = scripted([json_turn("ImageSearch", thought="anchor first", query="birds"),
                      json.dumps({"thought": "the two birds", "final_answer": ["p2", "p3"]})])
    run, trace = run_agent(model, tool_mode="json", worked_example=WORKED_EXAMPLE)
    assert run.answer == ["p2", "p3"] and run.source == "model"
    assert run.paths == {"json": 1, "none": 1} and run.tool_calls == 1
    steps = turn_steps(trace)
    assert steps[0].outputs["protocol"] == "json" and steps[0].outputs["path"] == "json"
    assert steps[0].outputs["reasoning"] == "anchor first" and steps[0].outputs["tool"] == "ImageSearch"
    assert steps[1].outputs["answer"] == ["p2", "p3"]
    (m1, p1), (m2, p2) = model.calls
    # turn 1: only ImageSearch (nothing seen, so no answer); turn 2: the answer limited to the photos seen
    assert set(offered(p1.json_schema)) == {"ImageSearch"}
    assert offered(p2.json_schema)["answer"]["properties"]["final_answer"]["items"]["enum"] == ["p2", "p3", "p1"]
    system = m1[0].text
    assert "ImageSearch(query: string)" in system and '"final_answer"' in system
    assert "The dogs I photographed on the day I saw the lighthouse." in system  # the worked example
    assert '{"thought": "Keep the photos of 2019-05-04.", "tool": "FilterMetadata"' in system
    # the history is append-only: the second prompt extends the first (a KV cache reuses the prefix)
    assert [m.text for m in m2[: len(m1)]] == [m.text for m in m1]
    assert "<tool_response>" in m2[-1].text and "p2 (score 0.9)" in m2[-1].text


def test_an_unreadable_json_turn_goes_back_to_the_model():
    model = scripted(["not json at all", json_turn("ImageSearch", query="sea"),
                      json.dumps({"thought": "x", "final_answer": ["p4"]})])
    run, trace = run_agent(model, tool_mode="json")
    assert run.answer == ["p4"]
    first = turn_steps(trace)[0].outputs
    assert first["calls"][0]["error"] and "not a JSON object" in first["observation"]


def test_the_budget_spent_call_in_json_mode_offers_only_the_answer():
    model = scripted([json_turn("ImageSearch", query="birds"), json.dumps({"thought": "x", "final_answer": ["p3"]})])
    run, _ = run_agent(model, tool_mode="json", max_turns=1)
    assert run.answer == ["p3"] and run.turns == 2
    final_params = model.calls[-1][1]
    assert set(offered(final_params.json_schema)) == {"answer"}
    assert "final_answer" in model.calls[-1][0][-1].text


def test_auto_mode_picks_json_for_the_in_process_llama_cpp_backend(tmp_path):
    from imagent.models.chat_llamacpp import LlamaCppChatModel

    llama = LlamaCppChatModel(tmp_path / "unused.gguf")  # resolve_mode never loads the weights
    assert AgentRuntime(Role("a", llama), [Search()], "s").resolve_mode() == "json"
    assert AgentRuntime(Role("a", scripted(["x"])), [Search()], "s").resolve_mode() == "text"
    assert AgentRuntime(Role("a", scripted(["x"], supports_tools=True)), [Search()], "s").resolve_mode() == "native"
    compact = AgentRuntime(Role("a", llama), [Search()], "s", tool_mode="text", worked_example=WORKED_EXAMPLE)
    text = compact.system_message("text").text
    assert "e.g. {" in text and "<tool_call>" in text and '"properties"' not in text  # no full JSON Schemas
    full = AgentRuntime(Role("a", scripted(["x"])), [Search()], "s").system_message("text").text
    assert '"properties"' in full


def test_function_call_syntax_is_read_as_a_call_and_prose_is_not():
    names = ["ImageSearch", "GetMetadata"]
    calls = parse_tool_calls('Let me search. ImageSearch(query="pink flamingo", top_k=5)', names)
    assert [(c.name, c.arguments, c.error) for c in calls] == [("ImageSearch", {"query": "pink flamingo",
                                                                                 "top_k": 5}, None)]
    calls = parse_tool_calls("GetMetadata(photo_ids=['a1', 'a2']) then ImageSearch(query='a (big) dog')", names)
    assert [c.arguments for c in calls] == [{"photo_ids": ["a1", "a2"]}, {"query": "a (big) dog"}]
    assert parse_tool_calls("I will use ImageSearch (the search tool) next.", names) == []
    assert parse_tool_calls('Unknown(query="x")', names) == []
    bad = parse_tool_calls('ImageSearch("flamingo")', names)
    assert len(bad) == 1 and "name every argument" in bad[0].error
    unsafe = parse_tool_calls('ImageSearch(query=__import__("os").getcwd())', names)
    assert len(unsafe) == 1 and "literals" in unsafe[0].error  # read by literal_eval, never evaluated


def test_search_first_sends_an_early_answer_back_once():
    model = scripted(['The final answer is: ["p1"]', call("ImageSearch", query="birds"),
                      'The final answer is: ["p2"]'])
    run, trace = run_agent(model, search_first=True)
    assert run.answer == ["p2"] and run.tool_calls == 1
    assert turn_steps(trace)[0].outputs["feedback"] == SEARCH_FIRST
    # only once: a model that insists is answered as before
    run, _ = run_agent(scripted(['The final answer is: ["p1"]']), search_first=True)
    assert run.answer == ["p1"] and run.turns == 2


def test_the_worked_example_is_written_in_each_protocol():
    as_json = render_worked_example(WORKED_EXAMPLE, "json")
    as_text = render_worked_example(WORKED_EXAMPLE, "text")
    assert '"final_answer": ["a21", "a24"]' in as_json and "<tool_call>" not in as_json
    assert "<tool_call>" in as_text and 'The final answer is: ["a21", "a24"]' in as_text
    assert as_json.count("<tool_response>") == as_text.count("<tool_response>") == len(WORKED_EXAMPLE["steps"])


def test_album_ids_in_the_json_protocol_come_from_tool_results(known_album):
    """Over a real album: the model can only name photos a tool returned, never an invented id."""
    tools = album_tools(known_album)
    model = scripted([json_turn("ImageSearch", query="a penguin", top_k=2),
                      json.dumps({"thought": "x", "final_answer": ["penguin"]})])
    runtime = AgentRuntime(Role("agent", model), tools, "sys", tool_mode="json", known_ids=known_album)
    with Trace().activate():
        run = runtime.run("the penguin")
    enum = offered(model.calls[1][1].json_schema)["answer"]["properties"]["final_answer"]["items"]["enum"]
    assert len(enum) == 2 and set(enum) <= set(known_album.ids) and run.answer == ["penguin"]
    assert set(ALBUM).isdisjoint(enum)


def test_a_repeated_call_is_refused_and_its_tool_left_out_of_the_next_grammar():
    model = scripted([json_turn("ImageSearch", query="birds"), json_turn("ImageSearch", query="birds"),
                      json.dumps({"thought": "x", "final_answer": ["p2"]})])
    search = Search()
    run, trace = run_agent(model, [search], tool_mode="json")
    assert search.queries == ["birds"] and run.answer == ["p2"]  # the repeat was not run again
    second = turn_steps(trace)[1].outputs
    assert second["calls"][0]["error"] and "same ImageSearch call as in turn 1" in second["observation"]
    assert set(offered(model.calls[2][1].json_schema)) == {"answer"}  # ImageSearch left out for one turn


def test_the_loop_guard_leaves_out_a_tool_called_turn_after_turn(known_album):
    tools = album_tools(known_album)
    model = scripted([json_turn("ImageSearch", query="bird"), json_turn("ImageSearch", query="penguin"),
                      json_turn("ImageSearch", query="heron"), json.dumps({"thought": "x", "final_answer": ["heron"]})])
    runtime = AgentRuntime(Role("agent", model), tools, "sys", tool_mode="json", known_ids=known_album, loop_guard=3)
    with Trace().activate():
        run = runtime.run("the heron")
    assert run.answer == ["heron"]
    fourth = offered(model.calls[3][1].json_schema)
    assert "ImageSearch" not in fourth and {"GetMetadata", "FilterMetadata", "answer"} <= set(fourth)
    assert "ImageSearch" in offered(model.calls[2][1].json_schema)  # two in a row are fine
    # GetMetadata is not offered a photo it already described (its result is in the history)
    model = scripted([json_turn("ImageSearch", query="penguin", top_k=2),
                      json_turn("GetMetadata", photo_ids=["penguin"]),
                      json.dumps({"thought": "x", "final_answer": ["penguin"]})])
    runtime = AgentRuntime(Role("agent", model), tools, "sys", tool_mode="json", known_ids=known_album)
    with Trace().activate():
        runtime.run("the penguin")
    meta = offered(model.calls[2][1].json_schema)["GetMetadata"]["properties"]["arguments"]["properties"]
    assert "penguin" not in meta["photo_ids"]["items"]["enum"]
    assert "penguin" in offered(model.calls[2][1].json_schema)["answer"]["properties"]["final_answer"]["items"]["enum"]


def test_a_date_copied_from_the_worked_example_is_refused_until_the_album_shows_it(known_album):
    """The 0.5B agent filtered on the example's 2019-05-04 instead of reading the anchor's date: that call is
    refused (not run, counted, the model told why); the anchor's real date and the day after it pass."""
    tools = album_tools(known_album)
    day = "time >= '{}' and time < '{}'"
    model = scripted([
        json_turn("ImageSearch", query="penguin", top_k=2),
        json_turn("FilterMetadata", expression=day.format("2019-05-04", "2019-05-05"), save_as="that_day"),
        json_turn("GetMetadata", photo_ids=["penguin"]),
        json_turn("FilterMetadata", expression=day.format("2013-06-09", "2013-06-10"), save_as="that_day"),
        json.dumps({"thought": "x", "final_answer": ["heron"]}),
    ])
    runtime = AgentRuntime(Role("agent", model), tools, "sys", tool_mode="json", known_ids=known_album,
                           worked_example=WORKED_EXAMPLE)
    trace = Trace()
    with trace.activate():
        run = runtime.run("the birds I photographed on the day I saw the penguin")
    steps = turn_steps(trace)
    refused = steps[1].outputs
    assert refused["calls"][0]["error"] and "'2019-05-04' and '2019-05-05' are from the worked example" in (
        refused["observation"])
    assert trace.counters["agent.example_date_refused"] == 1
    assert "match" in steps[3].outputs["observation"] and not steps[3].outputs["calls"][0]["error"]
    assert run.answer == ["heron"]

    # Where the request holds the date, the same call runs; without the example shown (native tool calls)
    # there is nothing to copy from.
    filter_day = {"expression": day.format("2019-05-04", "2019-05-05")}
    cases = [
        ("what did I photograph on 2019-05-04?", "json",
         scripted([json_turn("ImageSearch", query="penguin", top_k=2), json_turn("FilterMetadata", **filter_day),
                   json.dumps({"thought": "x", "final_answer": ["penguin"]})])),
        ("the penguin", "native",
         scripted([{"text": "", "tool_calls": [{"id": "a", "name": "ImageSearch", "arguments": {"query": "penguin"}}]},
                   {"text": "", "tool_calls": [{"id": "b", "name": "FilterMetadata", "arguments": filter_day}]},
                   'The final answer is: ["penguin"]'], supports_tools=True)),
    ]
    for message, mode, model in cases:
        runtime = AgentRuntime(Role("agent", model), tools, "sys", tool_mode=mode, known_ids=known_album,
                               worked_example=WORKED_EXAMPLE)
        trace = Trace()
        with trace.activate():
            runtime.run(message)
        assert "agent.example_date_refused" not in trace.counters
        assert any(c.role == "FilterMetadata" and not c.error for s in trace.steps for c in s.calls)


def test_an_answer_a_hook_sent_back_makes_the_next_turn_a_call():
    """A failed audit (any hook's rejection) starts a new retrieval round: the next JSON turn's grammar offers
    tools only, and the answer comes back once a tool ran (a 0.5B otherwise re-answered 12 times in a row)."""
    from imagent.agents.runtime import AgentHooks

    class RejectFirst(AgentHooks):
        def __init__(self) -> None:
            self.n = 0

        def before_answer(self, state, answer):
            self.n += 1
            return "search more" if self.n == 1 else None

    model = scripted([json_turn("ImageSearch", query="birds"), json.dumps({"thought": "x", "final_answer": ["p2"]}),
                      json_turn("ImageSearch", query="sea birds"),
                      json.dumps({"thought": "y", "final_answer": ["p2", "p3"]})])
    run, trace = run_agent(model, tool_mode="json", hooks=[RejectFirst()])
    assert run.answer == ["p2", "p3"] and run.turns == 4
    grammars = [offered(p.json_schema) for _, p in model.calls]
    assert "answer" in grammars[1] and "answer" not in grammars[2] and "answer" in grammars[3]
    assert turn_steps(trace)[1].outputs["rejected_by"] == "RejectFirst"
    assert run.state.retrieval_round is False


def test_a_hook_that_sends_an_answer_back_can_name_the_next_call_and_its_fixed_arguments(known_album):
    from imagent.agents.runtime import AgentHooks
    from imagent.agents.state import NextCall

    class WantsNarrowing(AgentHooks):
        sent = False

        def before_answer(self, state, answer):
            if self.sent:
                return None
            self.sent = True
            state.next_call = NextCall("ImageSearch", {"query": "heron", "search_within": "that_day"})
            return "search the heron within that_day first"

    tools = album_tools(known_album)
    model = scripted([json_turn("FilterMetadata", expression="time >= '2013-06-09' and time < '2013-06-10'",
                                save_as="that_day"),
                      json.dumps({"thought": "done", "final_answer": ["penguin"]}),
                      json_turn("ImageSearch", query="heron", search_within="that_day"),
                      json.dumps({"thought": "done", "final_answer": ["heron"]})])
    runtime = AgentRuntime(Role("agent", model), tools, "You find photos.", known_ids=known_album,
                           tool_mode="json", hooks=[WantsNarrowing()])
    trace = Trace()
    with trace.activate():
        run = runtime.run("the heron on the penguin day")
    assert run.answer == ["heron"] and run.state.next_call is None  # cleared once the call ran
    third = model.calls[2][1].json_schema
    assert set(offered(third)) == {"ImageSearch"}  # only the named tool, no answer
    args = offered(third)["ImageSearch"]["properties"]["arguments"]
    assert args["properties"]["query"] == {"const": "heron"} and args["properties"]["search_within"] == {
        "const": "that_day"}
    assert {"query", "search_within"} <= set(args["required"])
    fourth = model.calls[3][1].json_schema
    later_args = offered(fourth)["ImageSearch"]["properties"]["arguments"]
    assert "answer" in offered(fourth) and "const" not in json.dumps(later_args)
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    assert '"\\"heron\\""' in grammar.json_schema_to_gbnf(json.dumps(third))
    fixed = fix_arguments({"type": "object", "properties": {"same": {"type": "array"}}}, {"same": ["day"]})
    assert fixed["properties"]["same"]["prefixItems"] == [{"const": "day"}] and fixed["required"] == ["same"]


def run_steered(known_album, replies, guard=None, query="the heron on the penguin day", **tool_options):
    """A JSON-protocol agent with the query split and ``guard`` (default ChainSteer) over ``replies`` (the split's
    reply first); ``tool_options``: more AlbumToolsConfig fields."""
    from imagent.agents.album_tools import AlbumToolsConfig
    from imagent.methods.chain_guards import ChainPlan, ChainSteer

    tools = album_tools(known_album, AlbumToolsConfig(anchor_filters=True, **tool_options))
    model = scripted(replies)
    role = Role("agent", model)
    runtime = AgentRuntime(role, tools, "You find photos.", known_ids=known_album, tool_mode="json",
                           hooks=[ChainPlan(role, query), guard if guard is not None else ChainSteer()])
    trace = Trace()
    with trace.activate():
        run = runtime.run(query)
    return run, trace, model


def test_a_circling_small_model_is_steered_along_the_chain_of_its_own_query_split(known_album):
    search = json_turn("ImageSearch", query="penguin")
    run, trace, model = run_steered(known_album, [
        json.dumps({"anchor": "penguin", "same": "day", "target": "heron"}),
        search, search,  # the repeat is refused: steered to FilterMetadata, same day
        json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
        json_turn("GetMetadata", photo_ids=["penguin"]), json_turn("GetMetadata", photo_ids=["penguin"]),
        json_turn("ImageSearch", query="heron", search_within="d"),
        json_turn("ImageSearch", query="heron", search_within="d"),  # the chain is done: answer now
        json.dumps({"thought": "t", "final_answer": ["heron"]})])
    assert run.answer == ["heron"] and trace.counters["agent.chain_steered"] == 2
    schemas = [params.json_schema for _, params in model.calls]
    after_repeat = offered(schemas[3])  # call 0 is the split, 1 and 2 the searches
    assert set(after_repeat) == {"FilterMetadata"}
    assert after_repeat["FilterMetadata"]["properties"]["arguments"]["properties"]["same"]["prefixItems"] == [
        {"const": "day"}]
    after_second_repeat = offered(schemas[6])
    assert set(after_second_repeat) == {"ImageSearch"}
    fixed = after_second_repeat["ImageSearch"]["properties"]["arguments"]["properties"]
    assert fixed["query"] == {"const": "heron"} and fixed["search_within"] == {"const": "d"}
    assert "answer" in offered(schemas[7])  # the chain is done: free again
    # ... and repeating a call then ends the search with the request for the answer (one call, no tools)
    assert len(model.calls) == 9 and run.state.guards.answer_due and trace.counters["agent.stuck"] == 1
    assert set(offered(schemas[8])) == {"answer"} and run.turns == 8 and run.forced
    assert run.reason == "the model's final answer after a repeated call once the search was done"


def test_a_chain_that_ran_stays_done_when_the_model_narrows_to_another_anchor(known_album):
    other = json_turn("FilterMetadata", same_as_photo="heron", same=["day"], save_as="e")
    run, trace, model = run_steered(known_album, [
        json.dumps({"anchor": "penguin", "same": "day", "target": "heron"}),
        json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
        json_turn("ImageSearch", query="heron", search_within="d"),
        other, other,  # a new anchor, then its repeat: the chain is not reopened on "e"
        json.dumps({"thought": "t", "final_answer": ["heron"]})])
    assert run.answer == ["heron"] and "agent.chain_steered" not in trace.counters
    assert run.state.guards.answer_due and run.forced and len(model.calls) == 6
    assert set(offered(model.calls[5][1].json_schema)) == {"answer"}
    asked = model.calls[5][0][-1].text  # the request restates the chain's result: its search's clear matches
    assert asked.startswith("Your last tool call repeated an earlier one after your search was done")
    assert "Your search for 'heron' within 'd' found these clear matches, best first: " in asked
    within = run.state.turns[1].calls[0][1]
    assert within.photos and within.photos[0] in asked.split("best first: ")[1]


def test_a_split_without_an_anchor_steers_a_circling_model_to_its_target_search_then_to_the_answer(known_album):
    """same "none": the chain is the one ImageSearch for the split's target (the 0.5B searched the query's other noun
    and circled instead); once it ran, a repeat ends the search with the request for the answer, restating it."""
    other = json_turn("ImageSearch", query="penguin")
    run, trace, model = run_steered(known_album, [
        json.dumps({"anchor": "penguin", "same": "none", "target": "heron"}),
        other, other,  # the repeat is refused: steered to the target's search
        json_turn("ImageSearch", query="heron"),
        json_turn("GetMetadata", photo_ids=["heron"]), json_turn("GetMetadata", photo_ids=["heron"]),
        json.dumps({"thought": "t", "final_answer": ["heron"]})])
    assert run.answer == ["heron"] and trace.counters["agent.chain_steered"] == 1
    steered = offered(model.calls[3][1].json_schema)  # call 0 is the split, 1 and 2 the searches
    assert set(steered) == {"ImageSearch"}
    assert steered["ImageSearch"]["properties"]["arguments"]["properties"]["query"] == {"const": "heron"}
    assert "answer" in offered(model.calls[4][1].json_schema)  # the chain is done: free again
    assert run.state.guards.answer_due and run.forced and len(model.calls) == 7
    asked = model.calls[6][0][-1].text
    assert "Your search for 'heron' found these clear matches, best first: " in asked
    found = run.state.turns[2].calls[0][1]
    assert found.photos and found.photos[0] in asked.split("best first: ")[1]


def test_a_split_without_an_anchor_leaves_a_model_that_does_not_circle_alone(known_album):
    run, trace, model = run_steered(known_album, [
        json.dumps({"anchor": "penguin", "same": "none", "target": "heron"}),
        json_turn("ImageSearch", query="penguin"), json_turn("ImageSearch", query="heron"),
        json.dumps({"thought": "t", "final_answer": ["heron"]})])
    assert run.answer == ["heron"] and not run.forced and "agent.chain_steered" not in trace.counters
    assert not run.state.guards.answer_due and len(model.calls) == 4


def run_covered(known_album, answers):
    """A JSON-protocol agent that runs its split's chain (penguin -> same day -> sea bird), then answers ``answers``
    in turn, with PhotoCraft's completeness fact (:class:`CoverMatches`) before the answer."""
    from imagent.methods.chain_guards import CoverMatches

    run, trace, model = run_steered(
        known_album, [json.dumps({"anchor": "penguin", "same": "day", "target": "sea bird"}),
                      json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
                      json_turn("ImageSearch", query="sea bird", search_within="d"),
                      *(json.dumps({"thought": "t", "final_answer": a}) for a in answers)],
        guard=CoverMatches(), query="the sea birds on the penguin day", clear_matches=True)
    within = run.state.turns[1].calls[0][1]
    return run, trace, model, within


def test_an_answer_that_leaves_out_clear_matches_of_the_chain_is_sent_back_once_for_the_answer_again(known_album):
    from imagent.agents.album_tools import clear_matches

    probe = run_covered(known_album, [["penguin"]])[3]
    ranked = [i for i in probe.photos if i in probe.scores]
    matches = ranked[:clear_matches([probe.scores[i] for i in ranked])]
    assert len(matches) >= 2, matches  # the fixture's search has more than one clear match
    first, rest = matches[0], matches[1:]
    run, trace, model, _ = run_covered(known_album, [[first], [first], [*matches]])
    assert run.answer == [first] and len(model.calls) == 5  # sent back once; the second answer stands
    assert run.state.turns[2].rejected_by == "CoverMatches" and not run.forced
    told = model.calls[4][0][-1].text
    assert told.startswith("AUDIT, COMPLETENESS: Your search for 'sea bird' within 'd' found these clear matches")
    assert f"Your answer leaves out {', '.join(rest)}." in told
    assert set(offered(model.calls[4][1].json_schema)) == {"answer"}  # the revised answer, no tools
    assert trace.counters["agent.matches_missed"] == len(rest)
    assert not run.state.answer_next and not run.state.retrieval_round

    covered, trace, model, _ = run_covered(known_album, [[*matches, "frog"]])  # more than the matches: fine
    assert covered.answer == [*matches, "frog"] and len(model.calls) == 4
    assert "agent.matches_missed" not in trace.counters


def test_the_trip_a_time_relation_names_is_the_first_after_the_anchor_with_a_photo_of_the_target():
    """A search within the days after the anchor's covers several trips, one clear level a trip: the trip named is
    the first with a photo in the upper half of the results' score range, and its photos above their own largest
    drop are the ones wanted (``before``: the last such trip)."""
    from imagent.methods.chain_guards import relation_trip, trips

    times = {"a": "2020-05-01 10:00:00", "b": "2020-05-02 09:00:00", "c": "2020-05-09 12:00:00",
             "d": "2020-04-20 08:00:00", "e": "2020-05-01 18:00:00", "f": "2020-05-09 12:30:00"}
    assert trips(["c", "b", "a", "d", "e", "undated"], times, 1.0) == [["d"], ["a", "e", "b"], ["c"]]
    assert trips(["c", "b", "a", "e"], times, 0) == [["a", "e"], ["b"], ["c"]]  # the same day only
    assert trips(["c", "b", "a", "d"], times, 30) == [["d", "a", "b", "c"]]  # a wide gap: one trip
    # c (a later trip) scores best; d (the first trip) scores low: no photo of the target; a and e do, b less so
    scores = {"c": 0.9, "f": 0.8, "a": 0.7, "e": 0.66, "b": 0.3, "d": 0.2}
    ranked = sorted(scores, key=lambda i: -scores[i])
    likely, wanted, trip = relation_trip(ranked, scores, times, "after", 1.0)
    assert likely == ["c", "f", "a", "e"] and wanted == ["a", "e"] and trip == ["a", "e", "b"]
    likely, wanted, trip = relation_trip(ranked, scores, times, "before", 1.0)
    assert wanted == ["c", "f"] and trip == ["c", "f"]
    assert relation_trip([], {}, {}, "after", 1.0) == ([], [], [])


def run_after(known_album, answers):
    """The chain of a split with a time relation (tux -> the days after its day -> animal), then ``answers`` in
    turn, with :class:`CoverMatches` before the answer."""
    from imagent.methods.chain_guards import CoverMatches

    run, trace, model = run_steered(
        known_album, [json.dumps({"anchor": "tux", "same": "after", "target": "animal"}),
                      json_turn("FilterMetadata", same_as_photo="tux", same=["after"], save_as="later"),
                      json_turn("ImageSearch", query="animal", search_within="later"),
                      *(json.dumps({"thought": "t", "final_answer": a}) for a in answers)],
        guard=CoverMatches(), query="the animals from my first trip after the day I saw tux", clear_matches=True)
    return run, trace, model


def test_an_answer_holding_matches_of_a_later_trip_than_the_first_after_the_anchor_is_sent_back(known_album):
    """A split with a time relation (``after``): the audit's constraint check names the clear matches of the first
    trip after the anchor's day; an answer with clear matches of a later trip is sent back once, naming them, and
    the answer of that trip alone passes."""
    from imagent.methods.chain_guards import chain_matches

    probe, _, _ = run_after(known_album, [["crow"], ["crow"]])
    found = chain_matches(probe.state, probe.state.plan)
    assert "crow" in found.matches and "crow" in found.elsewhere  # 2013-07-01: the fixture's one later trip
    assert not found.elsewhere & set(found.wanted)
    assert set(found.wanted) <= {"penguin", "heron", "duck", "frog", "blackbird"} and found.wanted  # 06-09/10
    run, trace, model = run_after(known_album, [found.matches, found.matches])
    assert run.answer == found.matches and len(model.calls) == 5  # sent back once; the second answer stands
    told = model.calls[4][0][-1].text
    assert told.startswith("AUDIT, CONSTRAINT: the query asks for the first trip after the anchor's day; your "
                           "answer holds crow, from another trip.")
    assert f"its clear matches on the first trip after the anchor's day, best first: {', '.join(found.wanted)}." in told
    assert trace.counters["agent.matches_outside"] == 1 and set(offered(model.calls[4][1].json_schema)) == {
        "answer"}
    kept, trace, model = run_after(known_album, [found.wanted])  # that trip's matches: nothing to send back
    assert kept.answer == found.wanted and len(model.calls) == 4 and not trace.counters.get("agent.matches_outside")


def test_a_circling_model_with_a_time_relation_is_steered_to_the_photo_form_of_that_relation(known_album):
    search = json_turn("ImageSearch", query="tux")
    run, trace, model = run_steered(known_album, [
        json.dumps({"anchor": "tux", "same": "after", "target": "bird"}), search, search,
        json_turn("FilterMetadata", same_as_photo="tux", same=["after"], save_as="later"),
        json.dumps({"thought": "t", "final_answer": ["crow"]})], query="the birds of my first trip after tux")
    steered = offered(model.calls[3][1].json_schema)
    assert set(steered) == {"FilterMetadata"} and trace.counters["agent.chain_steered"] == 1
    assert steered["FilterMetadata"]["properties"]["arguments"]["properties"]["same"]["prefixItems"] == [
        {"const": "after"}]
    assert set(run.state.subsets["later"]) == {"penguin", "heron", "duck", "frog", "blackbird", "crow"}


def test_the_narrowing_a_guard_names_takes_its_photo_from_the_anchors_own_search(known_album):
    """Sent to FilterMetadata, the small model named the top photo of its latest search (a target's) as the anchor:
    once the split's anchor was searched, the grammar offers only that search's clear matches as same_as_photo, and
    the message names them."""
    from imagent.agents.album_tools import clear_matches
    from imagent.methods.chain_guards import ScopeFirst

    run, _, model = run_steered(known_album, [
        json.dumps({"anchor": "little penguin", "same": "day", "target": "bird"}),
        json_turn("ImageSearch", query="little penguin"), json_turn("ImageSearch", query="bird"),
        json.dumps({"thought": "t", "final_answer": ["crow"]}),
        json_turn("FilterMetadata", same_as_photo="penguin", same=["day"], save_as="d"),
        json.dumps({"thought": "t", "final_answer": ["heron"]})], guard=ScopeFirst(), query="the birds on the "
        "day I saw the little penguin")
    anchor = run.state.turns[0].calls[0][1]
    ranked = [i for i in anchor.photos if i in anchor.scores]
    photos = ranked[:clear_matches([anchor.scores[i] for i in ranked])]
    assert photos and photos[0] == "penguin" and "crow" not in photos
    fixed = offered(model.calls[4][1].json_schema)["FilterMetadata"]["properties"]["arguments"]["properties"]
    assert fixed["same_as_photo"] == {"enum": photos} and fixed["same"]["prefixItems"] == [{"const": "day"}]
    told = model.calls[4][0][-1].text
    assert f"the photo of the little penguin ({' or '.join(photos[:5])}, found by your search)" in told
    assert run.answer == ["heron"]


def test_a_split_relation_in_time_the_query_does_not_state_is_read_as_the_same_day(known_album):
    """The 0.5B gave "after" to queries with no word of time order ("the concert where I saw the fireworks"): such a
    split is read as "day", with a note; a query that says "after" keeps it."""
    run, trace, _ = run_steered(known_album, [json.dumps({"anchor": "penguin", "same": "after", "target": "bird"}),
                                              json.dumps({"thought": "t", "final_answer": ["heron"]})],
                                query="the birds at the beach where I saw the penguin")
    step = next(s for s in trace.steps if s.name == "plan")
    assert run.state.plan.same == "day" and step.outputs["same"] == "day"
    assert any("no word of time order" in n for n in step.notes)
    run, _, _ = run_steered(known_album, [json.dumps({"anchor": "penguin", "same": "before", "target": "bird"}),
                                          json.dumps({"thought": "t", "final_answer": ["heron"]})],
                            query="the birds from my last trip before the day I saw the penguin")
    assert run.state.plan.same == "before"
