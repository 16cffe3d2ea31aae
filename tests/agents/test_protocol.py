"""The tool-call text protocol, native tool calls, final-answer parsing and argument validation."""

from __future__ import annotations

import json

import pytest
from pydantic import Field

from imagent.agents import (
    Observation,
    Tool,
    ToolArgs,
    ToolError,
    native_tool_calls,
    parse_final_answer,
    parse_tool_calls,
    strip_tool_calls,
    text_protocol_prompt,
    tools_as_openai,
    validate_args,
)


class EchoArgs(ToolArgs):
    text: str = Field(min_length=1)
    times: int = Field(1, ge=1, le=3)
    ids: list[str] | None = None


class Echo(Tool):
    name = "Echo"
    description = "Echo the text back."
    Args = EchoArgs

    def run(self, args, state):
        return Observation(" ".join([args.text] * args.times))


# --------------------------------------------------------------------------- <tool_call> blocks


def test_well_formed_blocks_in_order():
    text = ('I will search first.\n<tool_call>\n{"name": "ImageSearch", "arguments": {"query": "penguin"}}\n'
            '</tool_call>\n<tool_call>{"name": "GetMetadata", "arguments": {"photo_ids": ["1", "2"]}}</tool_call>')
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("ImageSearch", {"query": "penguin"}),
                                                      ("GetMetadata", {"photo_ids": ["1", "2"]})]
    assert [c.id for c in calls] == ["call_0", "call_1"] and all(c.error is None for c in calls)
    assert strip_tool_calls(text) == "I will search first."


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "ImageSearch", "arguments": {"query": "penguin"}}',  # no closing tag
    '<tool_call>```json\n{"name": "ImageSearch", "arguments": {"query": "penguin"}}\n```</tool_call>',  # fence
    "<tool_call>{'name': 'ImageSearch', 'arguments': {'query': 'penguin',},}</tool_call>",  # quotes, commas
    '<tool_call>{"name": "ImageSearch", "parameters": {"query": "penguin"}}</tool_call>',  # alias
    '<tool_call>{"name": "ImageSearch", "arguments": "{\\"query\\": \\"penguin\\"}"}</tool_call>',  # string args
    '<tool_call>{"function": {"name": "ImageSearch", "arguments": {"query": "penguin"}}}</tool_call>',  # OpenAI
    '<tool_call>{"name": "ImageSearch", "arguments": {"query": "penguin"',  # cut short by max_tokens
    '<think>maybe <tool_call>{"name": "Nope"}</tool_call></think><TOOL_CALL>'
    '{"name": "ImageSearch", "arguments": {"query": "penguin"}}</TOOL_CALL>',  # drafts dropped, any case
])
def test_lenient_where_intent_is_clear(text):
    calls = parse_tool_calls(text)
    assert len(calls) == 1
    assert (calls[0].name, calls[0].arguments, calls[0].error) == ("ImageSearch", {"query": "penguin"}, None)


def test_missing_closing_tag_between_two_calls():
    calls = parse_tool_calls('<tool_call>{"name": "A", "arguments": {}}\n<tool_call>{"name": "B", "arguments": {}}')
    assert [c.name for c in calls] == ["A", "B"]


@pytest.mark.parametrize(("text", "error"), [
    ("<tool_call></tool_call>", "the <tool_call> block is empty"),
    ("<tool_call>search for penguins please</tool_call>", "the tool call is not valid JSON"),
    ('<tool_call>{"arguments": {"query": "x"}}</tool_call>', 'the tool call has no "name"'),
    ('<tool_call>{"name": "A", "arguments": ["x"]}</tool_call>', '"arguments" must be a JSON object'),
    ('<tool_call>{"name": "A", "arguments": "not json at all"}</tool_call>', "the arguments are not valid JSON"),
    ('<tool_call>["a", "b"]</tool_call>', "the tool call is not a JSON object"),
])
def test_unreadable_calls_carry_an_error_instead_of_a_guess(text, error):
    calls = parse_tool_calls(text)
    assert len(calls) == 1 and calls[0].error is not None and error in calls[0].error


def test_untagged_json_counts_only_for_a_known_tool_name():
    fenced = 'Let me search.\n```json\n{"name": "ImageSearch", "arguments": {"query": "penguin"}}\n```'
    assert parse_tool_calls(fenced) == []  # no tool names given: never guessed
    calls = parse_tool_calls(fenced, tool_names=["ImageSearch"])
    assert [(c.name, c.arguments) for c in calls] == [("ImageSearch", {"query": "penguin"})]
    bare = 'Calling {"name": "ImageSearch", "arguments": {"query": "x"}} now'
    assert [c.name for c in parse_tool_calls(bare, tool_names=["ImageSearch"])] == ["ImageSearch"]
    quoted = 'The final answer is: ["1", "2"] and here is JSON {"name": "Alice"}'
    assert parse_tool_calls(quoted, tool_names=["ImageSearch"]) == []


# --------------------------------------------------------------------------- native tool calls


def test_native_tool_calls():
    calls = native_tool_calls([
        {"id": "c1", "name": "ImageSearch", "arguments": '{"query": "penguin", "top_k": 5}'},
        {"id": "c2", "name": "GetMetadata", "arguments": "{'photo_ids': ['1',],}"},  # repaired
        {"id": "c3", "name": "X", "arguments": "{{{{"},
        {"id": "c4", "name": "", "arguments": "{}"},
        {"name": "Y", "arguments": {"already": "a dict"}},
    ])
    assert (calls[0].id, calls[0].name, calls[0].arguments) == ("c1", "ImageSearch", {"query": "penguin", "top_k": 5})
    assert calls[1].arguments == {"photo_ids": ["1"]} and calls[1].error is None
    assert calls[2].error and "not valid JSON" in calls[2].error
    assert calls[3].error == "the tool call has no name"
    assert (calls[4].id, calls[4].arguments) == ("call_4", {"already": "a dict"})


# --------------------------------------------------------------------------- final answer


@pytest.mark.parametrize(("text", "ids"), [
    ('The final answer is: ["5981883283", "5981890977"].', ["5981883283", "5981890977"]),
    ("The final answer is: [5981883283, 5981890977]", ["5981883283", "5981890977"]),
    ("Final answer: ['a1', 'b2', 'a1']", ["a1", "b2"]),
    ("the FINAL ANSWER IS [photo_7]", ["photo_7"]),
    ("The final answer is: []", []),
    ('I said the final answer is: ["1"] but no: The final answer is: ["2"]', ["2"]),
    ('<think>The final answer is: ["draft"]</think>The final answer is: ["kept"]', ["kept"]),
    ('The final answer is: ["x1", "x2"', ["x1", "x2"]),  # cut short
])
def test_final_answer_parsing(text, ids):
    assert parse_final_answer(text) == ids


@pytest.mark.parametrize("text", ["", "I think it is photo 5.", "The final answer is: photo 5", "answer: [1]"])
def test_no_final_answer(text):
    assert parse_final_answer(text) is None


# --------------------------------------------------------------------------- tools as offered


def test_tools_as_openai_and_text_prompt():
    echo = Echo()
    spec = tools_as_openai([echo])
    assert spec == [{"type": "function", "function": {"name": "Echo", "description": "Echo the text back.",
                                                      "parameters": echo.parameters}}]
    prompt = text_protocol_prompt([echo])
    assert "<tool_call>" in prompt and "</tool_call>" in prompt and "<tool_response>" in prompt
    assert "- Echo: Echo the text back." in prompt and json.dumps(echo.parameters) in prompt
    assert echo.signature() == "Echo(text: string, times?: integer, ids?: list[string])"


# --------------------------------------------------------------------------- argument validation


def test_validate_args_fills_defaults_and_coerces():
    assert validate_args(EchoArgs, {"text": "hi"}) == EchoArgs(text="hi", times=1)
    assert validate_args(EchoArgs, {"text": "hi", "times": "2", "ids": "7"}) == EchoArgs(text="hi", times=2, ids=["7"])
    assert validate_args(EchoArgs, {"text": " hi ", "ids": None}) == EchoArgs(text="hi", times=1)


@pytest.mark.parametrize(("args", "message"), [
    ({"text": "hi", "colour": "red"}, "Echo: unknown argument(s) 'colour'; it takes text (string), times (integer)"),
    ({}, "Echo: missing required argument(s) 'text'"),
    ({"text": "hi", "times": "many"}, "Echo: bad argument times: expected a number, got 'many'"),
    ({"text": "hi", "times": 2.5}, "expected an integer"),
    ({"text": "hi", "times": 9}, "argument 'times' must be <= 3, not 9"),
    ({"text": "hi", "times": 0}, "argument 'times' must be >= 1, not 0"),
    ({"text": "  "}, "argument 'text' must not be empty"),
    (["hi"], "Echo: arguments must be a JSON object, not array"),
])
def test_validate_args_errors_tell_what_the_tool_takes(args, message):
    with pytest.raises(ToolError) as err:
        validate_args(EchoArgs, args, tool="Echo")
    assert message in str(err.value)


def test_think_blocks_are_stripped_in_linear_time():
    """<think> blocks go (to the first closing tag after each opening one; an unclosed one stays), and a
    reply of many unclosed tags is read in one pass, not in quadratic time (a no-hang bound, not a speed claim)."""
    import random
    import re
    import time

    from imagent.agents.wire import _strip_think

    reference = re.compile(r"<think>.*?</think>", re.S | re.I)
    rng = random.Random(3)
    parts = ["<think>", "</think>", "<THINK>", "</Think>", "a", " b", "<", "think>", "</", "x<think>y"]
    for _ in range(20_000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        assert _strip_think(text) == reference.sub("", text), text
    start = time.perf_counter()
    assert _strip_think("<think>" * 20_000 + "answer") == "<think>" * 20_000 + "answer"  # the regex: 35 s
    assert time.perf_counter() - start < 5.0
