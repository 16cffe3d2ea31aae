"""The agent runtime with the scripted chat backend: native and text tool-call paths, malformed calls,
tool errors fed back, the turn budget, final-answer parsing and fall-backs, hooks, images, the trace."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import pytest

from imagent.agents import AgentHooks, AgentRuntime, Observation, Tool, ToolArgs, ToolError
from imagent.core.cache import DiskCache
from imagent.core.trace import SearchCancelled, Trace
from imagent.models.base import ChatError, ImagePart, Message
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Role

ALBUM = {"p1", "p2", "p3", "p4", "p5", "p6"}
SCORES = {"birds": [("p2", 0.9), ("p3", 0.7), ("p1", 0.2)], "sea": [("p4", 0.8), ("p2", 0.95)]}


class QueryArgs(ToolArgs):
    query: str


class PhotoIdsArgs(ToolArgs):
    photo_ids: list[str]


class Search(Tool):
    name = "ImageSearch"
    description = "Search photos."
    Args = QueryArgs

    def __init__(self) -> None:
        self.queries: list[str] = []

    def run(self, args, state):
        self.queries.append(args.query)
        hits = SCORES.get(args.query, [])
        return Observation("\n".join(f"{i} (score {s})" for i, s in hits) or "nothing",
                           photos=[i for i, _ in hits], scores=dict(hits))


class Broken(Tool):
    name = "Broken"
    description = "Always fails."

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def run(self, args, state):
        raise self.exc


class View(Tool):
    name = "ViewPhotos"
    description = "Show photos."
    Args = PhotoIdsArgs

    def __init__(self, album) -> None:
        self.album = album

    def run(self, args, state):
        images, _ = self.album.view(args.photo_ids)
        return Observation(f"showing {len(images)}", photos=list(args.photo_ids), images=images)


def call(name, **arguments):
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def scripted(replies, **kw):
    """A model answering with ``replies`` in order (the last one repeats)."""
    seq = list(replies)

    def reply(_text):
        return seq.pop(0) if len(seq) > 1 else seq[0]

    return ScriptedChatModel(default=reply, **kw)


def run_agent(model, tools=None, trace=None, **kw):
    trace = trace or Trace()
    runtime = AgentRuntime(Role("agent", model), tools if tools is not None else [Search()], "You find photos.",
                           known_ids=ALBUM, **kw)
    with trace.activate():
        run = runtime.run("birds by the sea")
    return run, trace


def turn_steps(trace):
    return [s for s in trace.steps if s.name.startswith("turn.")]


# --------------------------------------------------------------------------- the two paths


def test_text_path_runs_tools_and_parses_the_answer():
    model = scripted([f"Search first.\n{call('ImageSearch', query='birds')}", 'The final answer is: ["p2", "p3"]'])
    run, trace = run_agent(model)
    assert (run.answer, run.source, run.turns, run.tool_calls) == (["p2", "p3"], "model", 2, 1)
    assert run.paths == {"text": 1, "none": 1}
    # The tools are described in the system prompt; no native tools are sent.
    msgs, params = model.calls[0]
    assert "<tool_call>" in msgs[0].text and "- ImageSearch: Search photos." in msgs[0].text
    assert params.tools is None
    # The observation came back as a <tool_response> user message.
    msgs, _ = model.calls[1]
    assert msgs[-1].role == "user" and "<tool_response>" in msgs[-1].text and "p2 (score 0.9)" in msgs[-1].text
    steps = turn_steps(trace)
    assert [s.name for s in steps] == ["turn.1", "turn.2"]
    out = steps[0].outputs
    assert (out["path"], out["tool"], out["arguments"], out["photos"]) == ("text", "ImageSearch", {"query": "birds"},
                                                                         ["p2", "p3", "p1"])
    assert out["reasoning"] == "Search first." and "p2 (score 0.9)" in out["observation"]
    assert steps[1].outputs["answer"] == ["p2", "p3"] and steps[1].outputs["path"] == "none"
    # Each step holds its model call (tokens) and its tool call.
    kinds = [c.kind for c in steps[0].calls]
    assert kinds == ["chat", "tool"] and steps[0].calls[0].prompt_tokens > 0


TWO_CALLS = {"text": "Two searches.",
             "tool_calls": [{"id": "a", "name": "ImageSearch", "arguments": {"query": "birds"}},
                            {"id": "b", "name": "ImageSearch", "arguments": '{"query": "sea"}'}]}


def test_native_path_uses_tool_calls_and_tool_messages():
    """With ``one_tool_per_step=False`` every call of a reply runs (the path the paper does not take)."""
    model = scripted([TWO_CALLS, 'The final answer is: ["p2"]'], supports_tools=True)
    run, trace = run_agent(model, one_tool_per_step=False)
    assert run.answer == ["p2"] and run.paths == {"native": 1, "none": 1}
    msgs, params = model.calls[0]
    assert [t["function"]["name"] for t in params.tools] == ["ImageSearch"] and params.tool_choice == "auto"
    assert params.parallel_tool_calls is None  # not asked for
    assert "<tool_call>" not in msgs[0].text  # no text protocol in native mode
    msgs, _ = model.calls[1]
    assistant, t1, t2 = msgs[-3:]
    assert assistant.role == "assistant" and [c["id"] for c in assistant.tool_calls] == ["a", "b"]
    assert (t1.role, t1.tool_call_id, t2.tool_call_id) == ("tool", "a", "b")
    assert "p4 (score 0.8)" in t2.text
    out = turn_steps(trace)[0].outputs
    assert out["path"] == "native" and out["tool"] == "ImageSearch, ImageSearch"
    assert out["arguments"] == [{"query": "birds"}, {"query": "sea"}] and out["photos"] == ["p2", "p3", "p1", "p4"]


@pytest.mark.parametrize("protocol", ["native", "text"])
def test_one_tool_per_step_on_both_protocols(protocol):
    """The paper's step: one tool call per reply. Native calls ask for ``parallel_tool_calls=false``; a reply's
    second call is not run on either protocol, and the model reads an observation saying why."""
    first = TWO_CALLS if protocol == "native" else f"Two searches.\n{call('ImageSearch', query='birds')}\n" \
                                                   f"{call('ImageSearch', query='sea')}"
    search = Search()
    model = scripted([first, 'The final answer is: ["p2"]'], supports_tools=protocol == "native")
    run, trace = run_agent(model, tools=[search])
    assert search.queries == ["birds"] and run.tool_calls == 1  # only the first call ran
    assert model.calls[0][1].parallel_tool_calls is (False if protocol == "native" else None)
    assert trace.counters["agent.extra_calls_refused"] == 1
    msgs, _ = model.calls[1]
    if protocol == "native":
        t1, t2 = msgs[-2:]
        assert (t1.tool_call_id, t2.tool_call_id) == ("a", "b")  # every call id still gets its tool message
        refusal = t2.text
    else:
        refusal = msgs[-1].text.split("</tool_response>")[1]
    assert refusal.count("Not run: one tool per step") == 1 and "p4" not in refusal
    out = turn_steps(trace)[0].outputs
    assert out["path"] == protocol and out["photos"] == ["p2", "p3", "p1"]
    assert [c["error"] for c in out["calls"]] == [False, True]
    # The last call of the budget offers no tools: nothing to ask of parallel calls there.
    final = scripted([first], supports_tools=protocol == "native")
    run_agent(final, max_turns=1)
    assert final.calls[-1][1].parallel_tool_calls is None


def test_native_backend_answering_in_text_protocol_takes_the_text_path():
    model = scripted([call("ImageSearch", query="birds"), 'The final answer is: ["p3"]'], supports_tools=True)
    run, trace = run_agent(model)
    assert run.answer == ["p3"] and turn_steps(trace)[0].outputs["path"] == "text"


def test_auto_mode_falls_back_to_text_when_the_backend_refuses_tools():
    class Refusing(ScriptedChatModel):
        def chat(self, messages, params):
            if params.tools:
                raise ChatError("HTTP 400: tools are not supported by this server")
            return super().chat(messages, params)

    model = Refusing(default=lambda t: 'The final answer is: ["p1"]' if "p2 (score 0.9)" in t
                     else call("ImageSearch", query="birds"), supports_tools=True)
    run, trace = run_agent(model)
    assert run.answer == ["p1"] and run.paths == {"text": 1, "none": 1}
    assert any("refused native tool calls" in n for n in trace.steps[0].notes)
    assert "<tool_call>" in model.calls[-1][0][0].text  # the system prompt now describes the text protocol


def test_tool_mode_text_forces_the_protocol_on_a_native_backend():
    model = scripted(['The final answer is: ["p1"]'], supports_tools=True)
    run_agent(model, tool_mode="text")
    assert model.calls[0][1].tools is None and "<tool_call>" in model.calls[0][0][0].text


# --------------------------------------------------------------------------- mistakes go back to the model


def test_malformed_call_unknown_tool_and_bad_arguments_are_fed_back():
    model = scripted([
        "<tool_call>{search birds}</tool_call>",
        call("Teleport", where="moon"),
        call("ImageSearch", q="birds"),
        call("imagesearchtool", query="birds"),  # the paper's spelling works
        'The final answer is: ["p2"]',
    ])
    search = Search()
    run, trace = run_agent(model, tools=[search])
    prompts = model.prompts()
    assert "Error: your tool call could not be read: the tool call is not valid JSON" in prompts[1]
    assert "Error: there is no tool named 'Teleport'. Available tools: ImageSearch." in prompts[2]
    assert "Error: ImageSearch: unknown argument(s) 'q'; it takes query (string)" in prompts[3]
    assert search.queries == ["birds"] and run.answer == ["p2"] and run.tool_calls == 4
    steps = turn_steps(trace)
    assert [s.outputs["calls"][0]["error"] for s in steps[:4]] == [True, True, True, False]
    assert [c.error is not None for s in steps[:4] for c in s.calls if c.kind == "tool"] == [True, True, True, False]


@pytest.mark.parametrize(("exc", "text"), [
    (ToolError("unknown photo id(s): p99"), "Error: unknown photo id(s): p99"),
    (ValueError("boom"), "Error: the tool Broken failed (ValueError: boom)."),
])
def test_a_tool_failure_is_an_observation_not_an_exception(exc, text):
    model = scripted([call("Broken"), 'The final answer is: ["p1"]'])
    run, trace = run_agent(model, tools=[Broken(exc)])
    assert text in model.prompts()[1] and run.answer == ["p1"]
    assert turn_steps(trace)[0].outputs["calls"][0]["error"] is True


def test_no_call_and_no_answer_gets_a_nudge():
    model = scripted(["Hmm, let me think about it.", 'The final answer is: ["p1"]'])
    run, trace = run_agent(model)
    assert "You neither called a tool nor gave a final answer" in model.prompts()[1]
    assert run.answer == ["p1"] and run.turns == 2 and turn_steps(trace)[0].outputs["feedback"].startswith("You")


# --------------------------------------------------------------------------- answers


def test_unknown_ids_are_dropped_and_recorded():
    run, trace = run_agent(scripted(['The final answer is: ["p2", "ghost", "p5"]']))
    assert run.answer == ["p2", "p5"] and run.dropped == ["ghost"] and run.source == "model"
    assert turn_steps(trace)[0].outputs["dropped"] == ["ghost"]


def test_an_all_unknown_answer_is_sent_back_once_then_the_fallback_answers():
    model = scripted([call("ImageSearch", query="birds"), 'The final answer is: ["photo_id1"]',
                      'The final answer is: ["photo_id2"]'])
    run, trace = run_agent(model)
    assert "These ids are not in the album: photo_id1" in model.prompts()[2]
    assert run.source == "fallback" and run.answer == ["p2", "p3", "p1"]  # best scores seen
    assert "named no photo in the album" in run.reason and run.dropped == ["photo_id1", "photo_id2"]
    assert trace.steps[-1].name == "answer.fallback" and trace.steps[-1].outputs["answer"] == ["p2", "p3", "p1"]


def test_an_empty_answer_is_refused_by_the_never_empty_rule():
    model = scripted([call("ImageSearch", query="sea"), "The final answer is: []", 'The final answer is: ["p4"]'])
    run, _ = run_agent(model)
    assert "The list was empty." in model.prompts()[2] and run.answer == ["p4"] and run.source == "model"


def test_fallback_keeps_the_best_score_per_photo_and_caps_the_count():
    model = scripted([call("ImageSearch", query="birds"), call("ImageSearch", query="sea"), "The final answer is: []"])
    run, _ = run_agent(model, answer_retries=0, fallback_k=2)
    assert run.answer == ["p2", "p4"]  # p2 best 0.95, p4 0.8, p3 0.7


def test_fallback_with_nothing_seen_uses_the_method_fallback_then_empty():
    run, _ = run_agent(scripted(["The final answer is: []"]), answer_retries=0, fallback=lambda state: ["p6", "zz"])
    assert run.answer == ["p6"] and run.source == "fallback"
    run, _ = run_agent(scripted(["The final answer is: []"]), answer_retries=0)
    assert run.answer == [] and "no candidate was seen" in run.reason


# --------------------------------------------------------------------------- budget


def test_budget_exhaustion_asks_for_the_answer_in_one_final_call_without_tools():
    model = scripted([call("ImageSearch", query="birds")] * 3 + ['The final answer is: ["p3"]'], supports_tools=True)
    run, trace = run_agent(model, max_turns=3)
    assert len(model.calls) == 4 and run.turns == 4  # 3 turns + the final call
    final_msgs, final_params = model.calls[-1]
    assert "You have used all 3 turns" in final_msgs[-1].text
    assert final_params.tool_choice == "none"
    assert run.answer == ["p3"] and run.source == "model" and "3-turn budget" in run.reason
    assert [s.name for s in turn_steps(trace)] == ["turn.1", "turn.2", "turn.3", "turn.4"]
    assert turn_steps(trace)[-1].outputs["final"] is True


def test_budget_exhaustion_without_an_answer_falls_back():
    model = scripted([call("ImageSearch", query="sea")])  # never answers
    run, _ = run_agent(model, max_turns=2)
    assert run.source == "fallback" and run.answer == ["p2", "p4"]
    assert "2-turn budget was spent without a usable answer" in run.reason
    assert len(model.calls) == 3


def test_a_model_that_only_repeats_its_calls_is_asked_for_the_answer_early():
    """Alternating two calls that each repeat an earlier one (refused; the loop guard never sees one tool three
    times in a row): after ``stuck_after`` such turns the runtime stops offering tools and asks for the answer."""
    replies = [call("ImageSearch", query="sea"), call("ImageSearch", query="birds"),
               call("ImageSearch", query="sea"), call("ImageSearch", query="birds"),
               call("ImageSearch", query="sea"), 'The final answer is: ["p2"]']
    model = scripted(replies, supports_tools=True)
    run, trace = run_agent(model, max_turns=30)
    assert run.answer == ["p2"] and run.source == "model" and run.turns == 6  # 2 calls, 3 repeats, the answer
    assert "3 repeated calls in a row" in run.reason and trace.counters.get("agent.stuck") == 1
    final_msgs, final_params = model.calls[-1]
    assert "Your last 3 tool calls repeated earlier ones" in final_msgs[-1].text
    assert final_params.tool_choice == "none"
    # A new call in between starts the count again.
    replies = [call("ImageSearch", query="sea"), call("ImageSearch", query="sea"), call("ImageSearch", query="sea"),
               call("ImageSearch", query="cat"), call("ImageSearch", query="sea"), 'The final answer is: ["p2"]']
    run, trace = run_agent(scripted(replies, supports_tools=True), max_turns=30)
    assert run.turns == 6 and "agent.stuck" not in trace.counters and run.reason == "the model's final answer"
    # stuck_after is the agent's config field: 2 asks one turn earlier, 0 never asks
    replies = [call("ImageSearch", query="sea"), call("ImageSearch", query="sea"), call("ImageSearch", query="sea"),
               'The final answer is: ["p2"]']
    run, trace = run_agent(scripted(replies, supports_tools=True), max_turns=30, stuck_after=2)
    assert run.turns == 4 and "2 repeated calls in a row" in run.reason and trace.counters.get("agent.stuck") == 1
    replies = [call("ImageSearch", query="sea")] * 5 + ['The final answer is: ["p2"]']
    run, trace = run_agent(scripted(replies, supports_tools=True), max_turns=30, stuck_after=0)
    assert run.turns == 6 and "agent.stuck" not in trace.counters


def test_repeat_limit_ends_a_search_that_alternates_new_calls_with_repeats() -> None:
    # a small model's cycle: a new call, then a repeat of an earlier one; never stuck "in a row"
    cycle = [call("ImageSearch", query="sea"), call("ImageSearch", query="sea"), call("ImageSearch", query="cat"),
             call("ImageSearch", query="cat"), call("ImageSearch", query="dog"), call("ImageSearch", query="sea"),
             call("ImageSearch", query="hat"), call("ImageSearch", query="cat")]
    role = scripted([*cycle[:6], 'The final answer is: ["p2"]'], supports_tools=True)
    run, trace = run_agent(role, max_turns=30, repeat_limit=3)
    assert run.turns == 7 and "3 repeated calls" in run.reason and "in a row" not in run.reason
    assert trace.counters.get("agent.stuck") == 1 and run.answer == ["p2"]
    msgs, params = role.calls[-1]
    assert "3 of your tool calls repeated earlier ones" in msgs[-1].text and params.tool_choice == "none"
    # 0 (the runtime's default): no limit, the cycle runs to its end and the model answers itself
    run, trace = run_agent(scripted([*cycle, 'The final answer is: ["p2"]'], supports_tools=True), max_turns=30)
    assert run.turns == 9 and "agent.stuck" not in trace.counters and run.reason == "the model's final answer"


def test_a_model_error_mid_run_answers_with_the_best_seen():
    replies = [call("ImageSearch", query="sea")]

    def reply(_t):
        if replies:
            return replies.pop()
        raise ChatError("server went away")

    run, trace = run_agent(ScriptedChatModel(default=reply))
    assert run.source == "fallback" and run.answer == ["p2", "p4"] and "server went away" in run.reason
    assert trace.steps[-1].name == "answer.fallback"


def test_the_query_call_cap_ends_the_run_with_the_best_seen():
    model = scripted([call("ImageSearch", query="sea")], supports_tools=True)  # never answers
    run, _ = run_agent(model, trace=Trace(max_calls=2))
    assert len(model.calls) == 2 and run.source == "fallback" and run.answer == ["p2", "p4"]
    assert "the model call failed" in run.reason


def test_cancellation_propagates():
    trace = Trace(cancel_event=threading.Event())
    model = ScriptedChatModel(default=lambda t: (trace.cancel_event.set(), call("ImageSearch", query="sea"))[1])
    with pytest.raises(SearchCancelled):
        run_agent(model, trace=trace)


# --------------------------------------------------------------------------- hooks


class Recorder(AgentHooks):
    def __init__(self, reject_first: bool = False) -> None:
        self.events: list[str] = []
        self.reject_first = reject_first

    def on_start(self, state):
        self.events.append("start")
        state.set_task(Message.user("HINT: search short keywords.\n", *state.messages[1].parts))

    def before_turn(self, state):
        self.events.append(f"before:{state.turn + 1}")

    def after_turn(self, state, turn):
        self.events.append(f"after:{turn.n}:{turn.path}")

    def before_answer(self, state, answer):
        self.events.append(f"answer:{answer}")
        if self.reject_first:
            self.reject_first = False
            return "AUDIT: the anchor was not verified; search again with other keywords."
        return None

    def on_finish(self, state, run):
        self.events.append(f"finish:{run.source}")


@dataclass(frozen=True)
class Checked:
    """A hook's own record type (the runtime knows nothing of it)."""

    turn: int
    passed: bool


class Checker(AgentHooks):
    def before_answer(self, state, answer):
        ok = state.tool_calls > 0
        state.records.add(Checked(state.turn, ok))
        return None if ok else "search first"


def test_a_hook_keeps_its_own_typed_records_in_the_state():
    model = scripted(['The final answer is: ["p1"]', call("ImageSearch", query="birds"), 'The final answer is: ["p2"]'])
    run, _ = run_agent(model, hooks=[Checker()])
    assert run.answer == ["p2"]
    assert run.state.records.of(Checked) == [Checked(1, False), Checked(3, True)]
    assert run.state.records.last(Checked) == Checked(3, True)
    assert run.state.records.of(Recorder) == [] and run.state.records.last(Recorder) is None


def test_hooks_run_at_their_points_and_an_audit_can_reject_an_answer():
    hook = Recorder(reject_first=True)
    model = scripted(['The final answer is: ["p1"]', call("ImageSearch", query="birds"), 'The final answer is: ["p2"]'])
    run, trace = run_agent(model, hooks=[hook])
    assert model.prompts()[0].count("HINT: search short keywords.") == 1
    assert "AUDIT: the anchor was not verified" in model.prompts()[1]
    assert run.answer == ["p2"]
    assert hook.events == ["start", "before:1", "answer:['p1']", "after:1:none", "before:2", "after:2:text",
                           "before:3", "answer:['p2']", "after:3:none", "finish:model"]
    assert turn_steps(trace)[0].outputs["rejected_by"] == "Recorder"


def test_the_audit_is_skipped_when_no_turn_is_left():
    hook = Recorder(reject_first=True)
    run, _ = run_agent(scripted(['The final answer is: ["p1"]']), hooks=[hook], max_turns=1)
    assert run.answer == ["p1"] and run.source == "model" and not any(e.startswith("answer:") for e in hook.events)


def test_a_tool_can_defer_a_history_rewrite_to_the_end_of_the_turn():
    class Condense(Tool):
        name = "Condense"
        description = "Condense the history."

        def run(self, args, state):
            state.defer(lambda msgs: [msgs[0], msgs[1], Message.user("SUMMARY: p2 looked right.")])
            return Observation("will condense")

    model = scripted([call("Condense"), 'The final answer is: ["p2"]'])
    run_agent(model, tools=[Condense()])
    second = model.calls[1][0]
    assert len(second) == 3 and second[-1].text == "SUMMARY: p2 looked right."


# --------------------------------------------------------------------------- images and caption mode


@pytest.mark.real_model
def test_viewed_photos_reach_a_blind_model_as_surrogates_with_their_ids(known_album):
    model = scripted([call("ViewPhotos", photo_ids=["crow", "penguin"]), 'The final answer is: ["crow"]'])
    runtime = AgentRuntime(Role("agent", model), [View(known_album)], "Find photos.", known_ids=known_album)
    trace = Trace()
    with trace.activate():
        run = runtime.run("the crow")
    sent = model.calls[1][0][-1]  # what the backend received: caption mode replaced the pixels
    assert sent.role == "user" and not sent.has_images()
    crow = "Photo ID crow: [Image, described in text: A crow.; taken 2013-07-01 12:00:00; at Paris, France]"
    assert crow in sent.text
    assert "Photo ID penguin: [Image, described in text: A little penguin." in sent.text
    assert run.answer == ["crow"] and run.state.viewed == ["crow", "penguin"]
    assert any("caption mode" in n for n in turn_steps(trace)[1].notes)


@pytest.mark.real_model
def test_viewed_photos_reach_a_seeing_model_as_images_after_the_tool_messages(known_album):
    model = scripted([{"tool_calls": [{"id": "v", "name": "ViewPhotos", "arguments": {"photo_ids": ["crow"]}}]},
                      'The final answer is: ["crow"]'], supports_tools=True, sees_images=True)
    runtime = AgentRuntime(Role("agent", model), [View(known_album)], "Find photos.", known_ids=known_album)
    runtime.run("the crow")
    msgs = model.calls[1][0]
    assert [m.role for m in msgs[-3:]] == ["assistant", "tool", "user"]
    assert not msgs[-2].has_images()  # tool messages carry text only
    parts = msgs[-1].parts
    i = next(n for n, p in enumerate(parts) if isinstance(p, ImagePart))
    assert parts[i - 1] == "\nPhoto ID crow: " and parts[i].record.id == "crow"


# --------------------------------------------------------------------------- cache


def test_the_call_cache_keys_on_the_offered_tools(tmp_path):
    cache = DiskCache(tmp_path / "cache.sqlite")
    model = scripted(['The final answer is: ["p1"]'], supports_tools=True)
    for tools in ([Search()], [Search()], [Search(), Broken(ValueError())]):
        AgentRuntime(Role("agent", model, cache), tools, "sys", known_ids=ALBUM).run("q")
    assert len(model.calls) == 2  # the second run was served from the cache; other tools -> another key
    again = Role("agent", model, cache).chat([Message.system("sys"), Message.user("q")])
    assert again.text == 'The final answer is: ["p1"]'


def test_native_tool_calls_survive_the_cache(tmp_path):
    cache = DiskCache(tmp_path / "cache.sqlite")
    reply = {"tool_calls": [{"id": "x", "name": "ImageSearch", "arguments": {"query": "sea"}}]}
    model = ScriptedChatModel(default=lambda t: 'The final answer is: ["p4"]' if "p4 (score" in t else reply,
                              supports_tools=True)
    runtime = AgentRuntime(Role("agent", model, cache), [Search()], "You find photos.", known_ids=ALBUM)
    first = runtime.run("birds by the sea")
    second = runtime.run("birds by the sea")
    assert len(model.calls) == 2  # the second run's two calls (a native tool call, then the answer) were cached
    assert first.answer == second.answer == ["p4"] and second.paths == {"native": 1, "none": 1}
