"""The JSON tool protocol (grammar-constrained turns for small local models), the compact prompt with its
worked example, function-call syntax in the text protocol, and the search-first rule; scripted backend,
plus llama.cpp's own JSON-schema grammar converter on the schemas the runtime sends."""

from __future__ import annotations

import json

import pytest

from imagent.agents import AgentRuntime
from imagent.agents.runtime import SEARCH_FIRST
from imagent.agents.wire import (
    fix_arguments,
    json_turn_schema,
    parse_json_turn,
    parse_tool_calls,
    render_worked_example,
)
from imagent.core.trace import Trace
from imagent.methods.album.scaffold import WORKED_EXAMPLE
from imagent.methods.album.tools import AlbumToolsConfig, album_tools
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
    assert "Every kite shot with the camera that took the red tractor." in system  # the worked example
    assert ('{"thought": "k52 is the red tractor. Keep the photos taken with its camera.", "tool": "FilterMetadata"'
            in system)
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
    assert '"final_answer": ["k60", "p14"]' in as_json and "<tool_call>" not in as_json
    assert "<tool_call>" in as_text and 'The final answer is: ["k60", "p14"]' in as_text
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
    """The 0.5B agent filtered on the example's date instead of reading the anchor's date: that call is
    refused (not run, counted, the model told why); the anchor's real date and the day after it pass."""
    tools = album_tools(known_album)
    day = "time >= '{}' and time < '{}'"
    model = scripted([
        json_turn("ImageSearch", query="penguin", top_k=2),
        json_turn("FilterMetadata", expression=day.format("2016-08-21", "2016-08-22"), save_as="that_day"),
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
    assert refused["calls"][0]["error"] and "'2016-08-21' is from the worked example" in (
        refused["observation"])
    assert trace.counters["agent.example_date_refused"] == 1
    assert "match" in steps[3].outputs["observation"] and not steps[3].outputs["calls"][0]["error"]
    assert run.answer == ["heron"]

    # Where the request holds the date, the same call runs; without the example shown (native tool calls)
    # there is nothing to copy from.
    filter_day = {"expression": day.format("2016-08-21", "2016-08-22")}
    cases = [
        ("what did I photograph on 2016-08-21?", "json",
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
